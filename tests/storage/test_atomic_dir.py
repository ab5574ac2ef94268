"""Whole-directory commits: all or nothing, replace or keep, nothing left beside the target."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.atomic_dir import atomic_dir, commit_dir, stage_dir


def test_a_directory_appears_whole_and_replaces_the_old_one(tmp_path: Path) -> None:
    target = tmp_path / "v1"
    with atomic_dir(target) as stage:
        (stage / "a.bin").write_bytes(b"old")
        assert not target.exists()  # nothing visible before the commit
    with atomic_dir(target) as stage:
        (stage / "sub").mkdir()
        (stage / "sub" / "b.bin").write_bytes(b"new")
    assert sorted(p.name for p in target.rglob("*")) == ["b.bin", "sub"]
    assert [p.name for p in tmp_path.iterdir()] == ["v1"]  # no stage or old copy left


def test_a_failed_write_leaves_the_target_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "v1"
    with atomic_dir(target) as stage:
        (stage / "a.bin").write_bytes(b"good")
    with pytest.raises(RuntimeError, match="half-way"), atomic_dir(target) as stage:
        (stage / "a.bin").write_bytes(b"partial")
        raise RuntimeError("died half-way")
    assert (target / "a.bin").read_bytes() == b"good"
    assert [p.name for p in tmp_path.iterdir()] == ["v1"]


def test_keep_mode_leaves_an_existing_copy(tmp_path: Path) -> None:
    target = tmp_path / "model"
    first, second = stage_dir(target), stage_dir(target)
    (first / "config.json").write_text("first")
    (second / "config.json").write_text("second")
    assert commit_dir(first, target, replace=False) is True
    assert commit_dir(second, target, replace=False) is False
    assert (target / "config.json").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
