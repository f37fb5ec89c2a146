"""Windows shared between a machine's Python workers (pipelines.job.window_cache): exact versions, private folder."""

from __future__ import annotations

import os
import sys

import pytest

from windjoin.pipelines.job.window_cache import WindowFiles


@pytest.fixture
def files(tmp_path, monkeypatch) -> WindowFiles:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    return WindowFiles("job-a")


def test_a_stored_version_loads_and_only_that_version(files: WindowFiles) -> None:
    files.store(0, "v1", {"rows": [1, 2]})
    assert files.load(0, "v1") == {"rows": [1, 2]}
    assert files.load(0, "v2") is None and files.load(1, "v1") is None
    files.store(0, "v2", {"rows": [3]})
    assert files.load(0, "v2") == {"rows": [3]}
    assert files.load(0, "v1") is None  # the slot's older version is gone: never mistaken for current


def test_jobs_do_not_see_each_other(files: WindowFiles) -> None:
    files.store(0, "v1", "a")
    assert WindowFiles("job-b").load(0, "v1") is None


def test_a_folder_others_can_write_is_not_read(files: WindowFiles) -> None:
    files.store(0, "v1", "a")
    os.chmod(files.root, 0o777)
    assert files.load(0, "v1") is None
    files.store(0, "v2", "b")  # nor written
    os.chmod(files.root, 0o700)
    assert files.load(0, "v2") is None and files.load(0, "v1") == "a"


def test_windows_that_do_not_pickle_are_not_shared(files: WindowFiles) -> None:
    import weakref

    class Held:
        pass

    held = Held()
    files.store(0, "v1", "a")
    files.store(0, "v2", {"ref": weakref.ref(held)})  # MJoin's operators hold weak references
    assert files.load(0, "v2") is None
    assert files.load(0, "v1") == "a"  # the last version that pickled is left as it was
    assert not list(files.root.glob(".*.tmp"))


class _Gone:
    """Stands for windows of a class older code defined where the current code has none."""


def test_windows_left_by_other_code_are_a_miss(files: WindowFiles, monkeypatch) -> None:
    files.store(0, "v1", _Gone())
    monkeypatch.delattr(sys.modules[__name__], "_Gone")
    assert files.load(0, "v1") is None  # rebuilt from the segments instead of failing the batch
