"""A weight update is checked against the exported weights, with one server.

The export records a digest of every tensor (tensor-digests.json); before the server
pauses, the pool digests the files it is about to reload from. Here the export's
files are swapped for other weights after it was written: the update is refused before
the server loads them, and the server serves its verified weights on.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from engines.inference.server_pool import WeightUpdateError
from engines.inference.types import SamplingParams
from engines.model.load import load_moe_causal_lm, load_tokenizer
from engines.trainer.export import export_weights

pytestmark = pytest.mark.vllm

PROMPT = [1, 40, 41, 42, 43, 4, 2]


@pytest.mark.slow
def test_an_update_to_weights_other_than_the_exported_ones_fails(
    pool: Any, run: Any, tiny_model_dir: Path, second_checkpoint: Path, tmp_path: Path
) -> None:
    assert len(pool.slots) == 1  # one server: nothing to compare it with but the export
    tokenizer = load_tokenizer(tiny_model_dir)
    exported = Path(export_weights(load_moe_causal_lm(tiny_model_dir), tokenizer, str(tmp_path / "v-bad"), "fp32"))
    shutil.copyfile(second_checkpoint / "model.safetensors", exported / "model.safetensors")  # wrong weights
    slot, old = pool.slots[0], pool.version

    with pytest.raises(WeightUpdateError, match="holds weights that differ from the exported ones"):
        run(pool.update_weights(str(exported), old + 1))
    # Refused before the pause: the server never loaded them and serves its verified weights on.
    assert slot.version == old and slot.verified
    assert run(pool.generate(PROMPT, SamplingParams(max_tokens=4, seed=0))).weight_version == old

    # The next update, to a correct export, passes the check and puts the server back.
    good = export_weights(load_moe_causal_lm(tiny_model_dir), tokenizer, str(tmp_path / "v-good"), "fp32")
    run(pool.update_weights(good, old + 2))
    completion = run(pool.generate(PROMPT, SamplingParams(max_tokens=4, seed=0)))
    assert slot.verified and slot.version == old + 2 and completion.weight_version == old + 2
