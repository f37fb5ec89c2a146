"""Where Parquet results live: a local folder, or a prefix of any object store pyarrow knows (`s3://`, `gs://`,
`abfs://`), with the few steps the sink, snapshots and readers need, each atomic on both.

A local folder publishes a batch by one rename (the batch folder exists if and only if the batch was committed)
and fsyncs what it writes. An object store has no rename: a batch's pieces are copied from the pending folder
into the batch folder, then a commit marker `_committed/<batch folder>` (one object, written whole or not at all)
publishes it; readers list the markers, never the folders, so a batch copied halfway by a killed commit is not
read, and its replay copies it again. Every object is written in one request, so none is ever seen half written.
(A tool that reads the hive layout without the markers can see a batch while its commit copies it.)

Credentials come from the environment as pyarrow and the cloud SDKs read them (for S3: AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY, AWS_SHARED_CREDENTIALS_FILE, web identity; AWS_ENDPOINT_URL for an S3-compatible server),
never from the spec: a URL carrying credentials is refused.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from windjoin.operators.results_url import check_results_url

MARKERS_DIR = "_committed"


class ResultFiles(ABC):
    """A results location: paths are strings under `root`, joined with "/"."""

    def __init__(self, fs: pafs.FileSystem, root: str, url: str) -> None:
        self.fs = fs
        self.root = root
        self.url = url  # for messages: what the user configured (never holds credentials)

    def join(self, *parts: str) -> str:
        return "/".join((self.root.rstrip("/"), *parts))

    def info(self, path: str) -> pafs.FileInfo:
        return self.fs.get_file_info(path)

    def is_dir(self, path: str) -> bool:
        return self.info(path).type == pafs.FileType.Directory

    def is_file(self, path: str) -> bool:
        return self.info(path).type == pafs.FileType.File

    def names(self, folder: str) -> list[str]:
        """The names of a folder's entries ([] when it does not exist)."""
        selector = pafs.FileSelector(folder, allow_not_found=True)
        return [entry.base_name for entry in self.fs.get_file_info(selector)]

    def read_bytes(self, path: str, max_bytes: int | None = None) -> bytes:
        """The file's bytes, or its first `max_bytes` (None: all)."""
        with self.fs.open_input_stream(path) as source:
            return source.read(max_bytes)

    def open_input(self, path: str) -> pa.NativeFile:
        """A file to read at random (Parquet footers, row groups); FileNotFoundError when it is gone."""
        return self.fs.open_input_file(path)

    def read_metadata(self, path: str) -> pq.FileMetaData:
        return pq.read_metadata(path, filesystem=self.fs)

    def read_schema(self, path: str) -> pa.Schema:
        return pq.read_schema(path, filesystem=self.fs)

    def read_table(self, path: str, columns: list[str] | None = None) -> pa.Table:
        return pq.read_table(path, columns=columns, filesystem=self.fs)

    def remove_tree(self, folder: str) -> None:
        """Remove a folder and everything under it; nothing when it is gone."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_dir(folder)

    def remove(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(path)

    def published_names(self, parent: str) -> list[str]:
        """The names of the published folders in `parent` (possibly with unpublished ones: callers match them)."""
        return self.names(parent)

    def reachable(self) -> bool:
        """Whether the location answers (a readiness probe): an object store answers."""
        try:
            self.info(self.root)
        except OSError:
            return False
        return True

    @abstractmethod
    def make_dir(self, folder: str) -> None: ...

    @abstractmethod
    def write_bytes(self, path: str, data: bytes) -> None:
        """Write a whole file, replacing one there: readers see the old one or the new one, never half."""

    @abstractmethod
    def write_new(self, path: str, data: bytes) -> bool:
        """Write a whole file unless one is there (False then)."""

    @abstractmethod
    def write_parquet(self, path: str, table: pa.Table, **options: Any) -> None:
        """Write a Parquet file whole, readers never seeing it half written."""

    @abstractmethod
    def published(self, folder: str) -> bool:
        """Whether `folder` was published (`publish`)."""

    @abstractmethod
    def publish(self, pending: str, final: str, names: Iterable[str]) -> bool:
        """Make the files `names` of folder `pending` the folder `final`, visible to readers all at once; False when
        `final` was published already (by another writer meanwhile)."""

    @abstractmethod
    def unpublish(self, folder: str) -> None:
        """Remove a published folder: first hidden from readers, then its files; nothing when it is gone."""

    @abstractmethod
    def version(self, folder: str) -> Hashable:
        """What changes when a published folder is written anew (removed and published again); FileNotFoundError
        when it is not published."""

    def sync(self, folder: str) -> None:  # noqa: B027 (a step only local folders need)
        """Make a folder's entries durable (a local folder's; object stores are when a request returns)."""


class LocalFiles(ResultFiles):
    """A local folder: temporary file, fsync, rename."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        root = os.path.abspath(os.fspath(path))
        super().__init__(pafs.LocalFileSystem(), root, root)

    def make_dir(self, folder: str) -> None:
        os.makedirs(folder, exist_ok=True)

    def reachable(self) -> bool:
        """A local folder answers when it exists."""
        return os.path.isdir(self.root)

    def open_input(self, path: str) -> pa.NativeFile:
        return pa.OSFile(path)  # a file, not a path: no filesystem to resolve on every read

    def write_bytes(self, path: str, data: bytes) -> None:
        tmp = self._temporary(path)
        try:
            _write_synced(tmp, data)
            os.replace(tmp, path)
        finally:
            _unlink(tmp)
        fsync_path(os.path.dirname(path))

    def write_new(self, path: str, data: bytes) -> bool:
        tmp = self._temporary(path)
        try:
            _write_synced(tmp, data)
            try:
                os.link(tmp, path)  # atomic, and unlike rename never replaces a file another writer made
            except FileExistsError:
                return False
        finally:
            _unlink(tmp)
        fsync_path(os.path.dirname(path))
        return True

    def write_parquet(self, path: str, table: pa.Table, **options: Any) -> None:
        tmp = self._temporary(path)
        try:
            pq.write_table(table, tmp, **options)
            fsync_path(tmp)
            os.rename(tmp, path)
        finally:
            _unlink(tmp)
        fsync_path(os.path.dirname(path))

    def published(self, folder: str) -> bool:
        return os.path.isdir(folder)

    def publish(self, pending: str, final: str, names: Iterable[str]) -> bool:
        fsync_path(pending)
        try:
            os.rename(pending, final)  # atomic; fails if another writer committed the batch meanwhile
        except OSError:
            if os.path.isdir(final):
                return False
            raise
        fsync_path(os.path.dirname(final))
        return True

    def unpublish(self, folder: str) -> None:
        """Renamed to a hidden temporary name first (atomic), so no half-removed folder is ever listed; the name
        is the Parquet sink's temporary pattern, so a crash leftover is cleaned by its next commit."""
        parent, name = os.path.split(folder)
        doomed = os.path.join(parent, f".{name}.tmp-{uuid.uuid4().hex}")
        try:
            os.rename(folder, doomed)
        except FileNotFoundError:
            return
        self.remove_tree(doomed)

    def version(self, folder: str) -> Hashable:
        """Its inode and times: a folder removed and written again has a new inode or new times (only one written
        again within one tick of the kernel's file clock, a few ms, on the same inode would look unchanged)."""
        status = os.stat(folder)
        return status.st_ino, status.st_mtime_ns, status.st_ctime_ns

    def sync(self, folder: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            fsync_path(folder)

    @staticmethod
    def _temporary(path: str) -> str:
        parent, name = os.path.split(path)
        return os.path.join(parent, f".{name}.tmp-{uuid.uuid4().hex}")


class ObjectFiles(ResultFiles):
    """A prefix of an object store: each object written in one request; folders published by commit markers."""

    def make_dir(self, folder: str) -> None:
        """Nothing: an object store's folders are the prefixes of its objects."""

    def write_bytes(self, path: str, data: bytes) -> None:
        with self.fs.open_output_stream(path) as out:
            out.write(data)

    def write_new(self, path: str, data: bytes) -> bool:
        """Checked, then written: callers are single writers (the driver), the check keeps a replay from
        replacing what an earlier attempt wrote."""
        if self.info(path).type != pafs.FileType.NotFound:
            return False
        self.write_bytes(path, data)
        return True

    def write_parquet(self, path: str, table: pa.Table, **options: Any) -> None:
        """Encoded in memory, then sent in one request: a failure while encoding sends nothing."""
        buffer = pa.BufferOutputStream()
        pq.write_table(table, buffer, **options)
        self.write_bytes(path, buffer.getvalue().to_pybytes())

    def _marker(self, folder: str) -> str:
        parent, _, name = folder.rpartition("/")
        return f"{parent}/{MARKERS_DIR}/{name}"

    def published(self, folder: str) -> bool:
        return self.is_file(self._marker(folder))

    def published_names(self, parent: str) -> list[str]:
        return self.names(f"{parent}/{MARKERS_DIR}")

    def publish(self, pending: str, final: str, names: Iterable[str]) -> bool:
        marker = self._marker(final)
        if self.is_file(marker):
            return False
        self.remove_tree(final)  # a copy a killed commit left halfway
        for name in names:
            self.fs.copy_file(f"{pending}/{name}", f"{final}/{name}")
        self.write_bytes(marker, uuid.uuid4().hex.encode())  # the commit: one object
        self.remove_tree(pending)
        return True

    def unpublish(self, folder: str) -> None:
        self.remove(self._marker(folder))  # first the marker: readers stop seeing the folder
        self.remove_tree(folder)

    def version(self, folder: str) -> Hashable:
        """The commit's id, in its marker (written anew by every publish)."""
        return self.read_bytes(self._marker(folder))


def result_files(url: str | os.PathLike[str], key: str = "sinks.parquet.path") -> ResultFiles:
    """The results location of a path or URL; ValueError naming `key` when it carries credentials or no
    filesystem pyarrow knows has its scheme."""
    text = os.fspath(url)
    if "://" not in text:
        return LocalFiles(text)
    parts = urlsplit(check_results_url(text, key))
    if parts.scheme == "file":
        return LocalFiles(parts.path)
    try:
        fs, root = pafs.FileSystem.from_uri(text)
    except (pa.ArrowException, ValueError) as err:
        raise ValueError(f"{key}: {text!r} is no location pyarrow can open ({err})") from None
    if isinstance(fs, pafs.LocalFileSystem):
        return LocalFiles(root)
    return ObjectFiles(fs, root.rstrip("/"), f"{parts.scheme}://{parts.netloc}{parts.path}")


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Flush a file's or a folder's data to disk (a folder's: its entries, so a rename or unlink survives a crash)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # some file systems refuse fsync on folders
            os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _unlink(path: str) -> None:
    Path(path).unlink(missing_ok=True)
