"""The warm start's Prefect tasks: progress while a corpus's candidate edits are tested."""

from __future__ import annotations

import pytest

from tasks.training import _with_progress


def test_candidates_are_tested_in_chunks_in_order_with_a_line_after_each(capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[int] = []

    def tester(items):
        calls.append(len(items))
        return [{"test_x": "PASSED" if patch == "good" else "FAILED"} for _, patch in items]

    items = [(None, "good" if i % 3 == 0 else "bad") for i in range(7)]
    out = _with_progress(tester, every=3)(items)
    assert calls == [3, 3, 1]
    assert out == tester(items)[: len(items)]
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[sft] tested")]
    assert [line.split(" in the sandbox")[0] for line in lines] == [
        "[sft] tested 3 of 7 candidate edits",
        "[sft] tested 6 of 7 candidate edits",
        "[sft] tested 7 of 7 candidate edits",
    ]
