"""replace_whole: the new content or the old, never half, and no temporary file left behind."""

from __future__ import annotations

import os

import pytest

from windjoin.connectors.files.atomic_write import replace_whole


def test_replaces_a_file_and_creates_its_folder(tmp_path):
    path = tmp_path / "deep" / "costs.json"
    replace_whole(path, b"one")
    replace_whole(path, b"two")
    assert path.read_bytes() == b"two" and os.listdir(path.parent) == ["costs.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "marks.json"
    replace_whole(path, b"old")

    def refuse(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        replace_whole(path, b"new")
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["marks.json"]
