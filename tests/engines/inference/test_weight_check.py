"""Tensor digests and the comparison a weight update makes (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from engines.inference.vllm_extension.tensor_digest import file_digests, read_digests, tensor_digest, write_digests
from engines.inference.weight_files import EMBEDDING, LM_HEAD, WeightUpdateError, expected_digests, mismatches


def test_a_digest_changes_with_any_value_dtype_or_shape() -> None:
    t = torch.arange(6, dtype=torch.float32)
    changed = t.clone()
    changed[3] += 1e-6
    digests = {tensor_digest(x) for x in (t, changed, t.to(torch.bfloat16), t.view(2, 3), t.view(2, 3).t())}
    assert len(digests) == 5
    assert tensor_digest(t.view(2, 3).t().contiguous()) == tensor_digest(t.view(2, 3).t())  # layout-free


def test_written_digests_are_read_back_and_preferred_to_the_files(tmp_path: Path) -> None:
    save_file({"a": torch.ones(2), "b": torch.zeros(3)}, str(tmp_path / "model.safetensors"))
    written = write_digests(tmp_path)
    assert read_digests(tmp_path) == written == file_digests(tmp_path)
    save_file({"a": torch.full((2,), 2.0), "b": torch.zeros(3)}, str(tmp_path / "model.safetensors"))
    assert expected_digests(tmp_path) == written  # the export's record, not what is there now


def test_a_directory_without_digests_is_digested(tmp_path: Path) -> None:
    save_file({"a": torch.ones(2)}, str(tmp_path / "model.safetensors"))
    assert expected_digests(tmp_path) == {"a": tensor_digest(torch.ones(2))}
    with pytest.raises(WeightUpdateError, match="no tensors"):
        expected_digests(tmp_path / "missing")


def test_mismatches_name_what_differs_is_missing_or_extra() -> None:
    expected = {"a": "1", "b": "2", EMBEDDING: "e"}
    assert mismatches(expected, {"a": "1", "b": "2", EMBEDDING: "e", LM_HEAD: "e"}) == []  # tied head copy
    assert mismatches(expected, {"a": "1", "b": "x", EMBEDDING: "e", LM_HEAD: "x", "c": "3"}) == [
        "b (differs)",
        "c (unexpected)",
        f"{LM_HEAD} (differs)",
    ]
    assert mismatches(expected, {"a": "1"}) == ["b (missing)", f"{EMBEDDING} (missing)"]
