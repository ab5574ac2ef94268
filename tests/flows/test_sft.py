"""What the run's warm-start cache key is made of (flows/sft.py: cache_inputs): every
setting that makes the warm start changes it; RL-only settings and the ones that change
no weight do not, so a sweep over RL settings reuses one warm start."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from engines.env.task_sources.micro import generate_micro_tasks, named_function
from engines.trainer.warm_start_cache import warm_start_key
from flows.config import RunConfig
from flows.config_loader import load_config
from flows.sft import (
    cache_inputs,
    copy_drilled,
    edit_drilled,
    mixed_micro_tasks,
    neutral_tokenizer_text,
    with_drills,
)

TRAIN = generate_micro_tasks(6, seed=0)
LONG = ["--trainer.sft.copy_drill_long_steps", "50"]
CORPUS = ["--tasks.kind", "corpus", "--tasks.corpus_path", "c/", "--env.feedback", "keep"]  # a corpus run


def key(*overrides: str, train=TRAIN) -> str:
    return warm_start_key(cache_inputs(load_config(RunConfig, None, list(overrides)), train))


@pytest.mark.parametrize(
    "override",
    [
        ["--tasks.seed", "1"],
        ["--env.edit_attempts", "2"],
        ["--trainer.sft.max_steps", "400"],
        ["--trainer.sft.edit_tool", "edit"],
        ["--trainer.sft.edit_tool", "replace"],
        ["--trainer.sft.edit_tool", "function_change"],
        ["--trainer.sft.edit_tool", "line_change"],
        ["--trainer.sft.demonstrations", "oracle"],
        ["--trainer.seed", "3"],
        ["--trainer.seq_len", "256"],
        ["--model.tiny.num_layers", "6"],
        # The trainer path SFT trains through: ranks, sharding, precision, output head, recompute.
        ["--trainer.processes", "2"],
        ["--trainer.processes", "2", "--trainer.parallelism", "fsdp2"],
        ["--trainer.mixed_precision", "bf16"],
        ["--trainer.logprob_chunk_tokens", "0"],
        ["--trainer.activation_checkpointing", "true"],
    ],
)
def test_a_setting_that_makes_the_warm_start_changes_the_key(override: list[str]) -> None:
    assert key(*override) != key()


def test_the_failed_attempt_share_changes_the_key_of_oracle_demonstrations() -> None:
    oracle = ["--trainer.sft.demonstrations", "oracle"]
    assert key(*oracle, "--trainer.sft.failed_attempt_share", "0.25") != key(*oracle)


def test_other_training_tasks_change_the_key() -> None:
    assert key(train=generate_micro_tasks(6, seed=1)) != key()
    assert key(train=TRAIN[:5]) != key()


@pytest.mark.parametrize(
    "override",
    [
        ["--trainer.lr", "1e-4"],
        ["--trainer.micro_batch_rows", "4"],
        ["--trainer.temperature", "1.0", "--inference.sampling.temperature", "1.0"],
        ["--rl.steps", "3"],
        ["--eval.tasks", "200"],
        ["--trainer.sft.log_every", "50"],
        ["--trainer.sft.cache", "false"],
        ["--run", "another"],
    ],
)
def test_rl_settings_and_settings_that_change_no_weight_keep_the_key(override: list[str]) -> None:
    assert key(*override) == key()


def test_a_corpus_run_mixes_in_the_micro_tasks_it_asks_for_and_keys_them() -> None:
    corpus = CORPUS
    plain = load_config(RunConfig, None, corpus)
    mixed = load_config(RunConfig, None, [*corpus, "--trainer.sft.micro_demonstrations", "5"])
    assert mixed_micro_tasks(plain) == []
    tasks = mixed_micro_tasks(mixed)
    assert len(tasks) == 5 and {t.env_name for t in tasks} == {t.env_name for t in TRAIN}
    assert all("_" in named_function(t) for t in tasks)  # compound names, to be copied
    assert warm_start_key(cache_inputs(mixed, TRAIN)) != warm_start_key(cache_inputs(plain, TRAIN))
    with pytest.raises(ValueError, match="trainer.sft.micro_demonstrations mixes micro demonstrations"):
        load_config(RunConfig, None, ["--trainer.sft.micro_demonstrations", "5"])


def test_a_corpus_run_with_a_hint_may_rename_its_demonstrations_and_keys_the_share() -> None:
    corpus = CORPUS
    plain = load_config(RunConfig, None, corpus)
    renamed = load_config(RunConfig, None, [*corpus, "--tasks.hint", "function", "--trainer.sft.renamed_share", "0.5"])
    assert warm_start_key(cache_inputs(renamed, TRAIN)) != warm_start_key(cache_inputs(plain, TRAIN))
    for refused in (corpus, []):  # statements that name nothing (the default hint); a micro run
        with pytest.raises(ValueError, match="trainer.sft.renamed_share renames the file and function"):
            load_config(RunConfig, None, [*refused, "--trainer.sft.renamed_share", "0.5"])


def test_copy_drills_need_a_corpus_run_whose_hint_names_the_function_and_change_the_key() -> None:
    corpus = [*CORPUS, "--tasks.hint"]
    plain = load_config(RunConfig, None, [*corpus, "function"])
    drilled = load_config(RunConfig, None, [*corpus, "function", "--trainer.sft.copy_drill_steps", "100"])
    assert warm_start_key(cache_inputs(drilled, TRAIN)) != warm_start_key(cache_inputs(plain, TRAIN))
    for refused in ([*corpus, "file"], []):  # the hint names no function; a micro run
        with pytest.raises(ValueError, match="trainer.sft.copy_drill_steps drills copying"):
            load_config(RunConfig, None, [*refused, "--trainer.sft.copy_drill_steps", "100"])
    batch = ["--trainer.sft.copy_drill_batch_size", "16"]
    smaller = load_config(RunConfig, None, [*corpus, "function", "--trainer.sft.copy_drill_steps", "100", *batch])
    assert warm_start_key(cache_inputs(smaller, TRAIN)) != warm_start_key(cache_inputs(drilled, TRAIN))
    with pytest.raises(ValueError, match="copy_drill_batch_size sizes the copy- and edit-drill phases"):
        load_config(RunConfig, None, [*corpus, "function", *batch])  # no drill phase to size
    RunConfig(**plain.model_dump(mode="json"))  # passed on whole (a lane's config) with the default: accepted
    long = load_config(RunConfig, None, [*corpus, "function", "--trainer.sft.copy_drill_steps", "100", *LONG])
    assert warm_start_key(cache_inputs(long, TRAIN)) != warm_start_key(cache_inputs(drilled, TRAIN))
    with pytest.raises(ValueError, match="copy_drill_long_steps sharpens the copying"):
        load_config(RunConfig, None, [*corpus, "function", *LONG])  # no short drills first
    drill_lr = ["--trainer.sft.copy_drill_lr", "0.002"]
    fast = load_config(RunConfig, None, [*corpus, "function", "--trainer.sft.copy_drill_steps", "100", *drill_lr])
    assert warm_start_key(cache_inputs(fast, TRAIN)) != warm_start_key(cache_inputs(drilled, TRAIN))
    with pytest.raises(ValueError, match="copy_drill_lr is the copy- and edit-drill phases. learning rate"):
        load_config(RunConfig, None, [*corpus, "function", *drill_lr])
    unchecked = ["--trainer.sft.copy_drill_min_copied", "0"]
    free = load_config(RunConfig, None, [*corpus, "function", "--trainer.sft.copy_drill_steps", "100", *unchecked])
    assert warm_start_key(cache_inputs(free, TRAIN)) == warm_start_key(
        cache_inputs(drilled, TRAIN)
    )  # stops, never changes
    with pytest.raises(ValueError, match="copy_drill_min_copied checks the model the copy-drill phase made"):
        load_config(RunConfig, None, [*corpus, "function", *unchecked])
    hinted = ["--trainer.sft.copy_drill_hint_steps", "100"]
    first = load_config(RunConfig, None, [*corpus, "function", "--trainer.sft.copy_drill_steps", "100", *hinted])
    assert warm_start_key(cache_inputs(first, TRAIN)) != warm_start_key(cache_inputs(drilled, TRAIN))
    with pytest.raises(ValueError, match="copy_drill_hint_steps forms the copying that the short drills"):
        load_config(RunConfig, None, [*corpus, "function", *hinted])  # no short drills after them


def test_drills_mixed_into_the_demonstrations_make_their_shares_and_are_new_ones() -> None:
    drilled = [*CORPUS, "--tasks.hint", "function", "--trainer.sft.copy_drill_steps", "100"]
    shares = ["--trainer.sft.copy_drill_share", "0.25", "--trainer.sft.edit_drill_share", "0.25"]
    mixed = load_config(RunConfig, None, [*drilled, *shares])
    demos = [[{"role": "user", "content": f"demo {i}"}, {"role": "assistant", "content": "submit"}] for i in range(30)]
    out = with_drills(demos, mixed)
    assert out[:30] == demos and len(out) == 60  # 15 of 60 are copy drills, 15 edit drills
    copies, edits = out[30:45], out[45:]
    assert all(len(d) == 2 and d[1]["content"].startswith("view ") for d in copies)
    assert all([m["role"] for m in d] == ["user", "assistant", "tool", "assistant"] for d in edits)
    assert all(d[3]["content"].startswith("change ") for d in edits)
    phases = copy_drills_of(mixed)
    assert not {d[1]["content"] for d in copies} & {d[1]["content"] for d in phases}  # another seed: new names
    assert with_drills(demos, load_config(RunConfig, None, drilled)) == demos
    assert warm_start_key(cache_inputs(mixed, TRAIN)) != warm_start_key(
        cache_inputs(load_config(RunConfig, None, drilled), TRAIN)
    )
    function_hint = [*CORPUS, "--tasks.hint", "function"]
    with pytest.raises(ValueError, match="copy_drill_share keeps the copying"):
        load_config(RunConfig, None, [*function_hint, "--trainer.sft.copy_drill_share", "0.25"])
    for refused in ([*CORPUS, "--tasks.hint", "file"], []):  # the hint names no function; a micro run
        with pytest.raises(ValueError, match="edit_drill_share drills viewing and changing"):
            load_config(RunConfig, None, [*refused, "--trainer.sft.edit_drill_share", "0.25"])
    with pytest.raises(ValueError, match="leave no room for the repository demonstrations"):
        load_config(RunConfig, None, [*drilled, "--trainer.sft.copy_drill_share", "0.5", *shares[2:3], "0.5"])


def test_a_corpus_runs_tokenizer_may_read_the_installed_code_alone_and_that_changes_the_key() -> None:
    neutral = load_config(RunConfig, None, [*CORPUS, "--model.tiny.tokenizer_text", "installed_code"])
    assert key(*CORPUS, "--model.tiny.tokenizer_text", "installed_code") != key(*CORPUS)
    shape, code = neutral_tokenizer_text(neutral, drills=30, code_chars=50_000)
    assert len(shape) == 40 and sum(map(len, code)) >= 50_000
    assert {d[1]["content"].split()[0] for d in shape} == {"view"}  # the protocol's turns, on installed names
    assert [m["content"].split()[0] for m in shape[-1] if m["role"] == "assistant"] == ["view", "change"]
    with pytest.raises(ValueError, match="model.tiny.tokenizer_text = 'installed_code' keeps a corpus run's"):
        load_config(RunConfig, None, ["--model.tiny.tokenizer_text", "installed_code"])  # a micro run


def copy_drills_of(config: RunConfig) -> list[list[dict]]:
    """The first drills of `config`'s copy-drill phases, short and long (flows/sft.py:
    copy_drilled draws them)."""
    from engines.env.task_sources.copy_drills import copy_drills

    return [*copy_drills(200, config.tasks.seed, statement="short"), *copy_drills(200, config.tasks.seed + 2)]


def test_the_copy_drill_phase_trains_the_fresh_model_into_a_folder_beside_it(
    tmp_path: Path, tiny_model_dir: Path, prefect_server: dict[str, str]
) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    init = tmp_path / "init-model"
    shutil.copytree(tiny_model_dir, init)
    drills = ["--trainer.sft.copy_drill_steps", "2", "--trainer.sft.copy_drill_batch_size", "2"]
    corpus = [*CORPUS, "--tasks.hint", "function"]
    long, unchecked = ["--trainer.sft.copy_drill_long_steps", "1"], ["--trainer.sft.copy_drill_min_copied", "0"]
    hints = ["--trainer.sft.copy_drill_hint_steps", "1"]
    checked = load_config(RunConfig, None, [*corpus, *drills, *long])
    config = load_config(RunConfig, None, [*corpus, *drills, *long, *unchecked, *hints])
    with temporary_settings(updates={PREFECT_API_URL: prefect_server["PREFECT_API_URL"]}):
        # Two steps form no copying: the check stops the build before the long drills.
        with pytest.raises(ValueError, match=r"copy_drill_min_copied = 0.5: .* copies 0% of 64 fresh copy drills"):
            copy_drilled(str(init), checked)
        assert not (tmp_path / "copy-drilled-long").exists()
        out = copy_drilled(str(init), config)  # its SFT is a task of the sft flow
    assert Path(out) == tmp_path / "copy-drilled-long"  # the hint drills' model, the short ones', the long ones'
    phases = (init, tmp_path / "copy-drilled-hint", tmp_path / "copy-drilled", Path(out))
    models = [load_file(p / "model.safetensors") for p in phases]
    for before, after in zip(models, models[1:]):
        assert before.keys() == after.keys() and any(not before[k].equal(after[k]) for k in before)


def test_the_edit_drill_phase_needs_a_function_hint_changes_the_key_and_owns_the_drill_batch() -> None:
    function_hint = [*CORPUS, "--tasks.hint", "function"]
    steps = ["--trainer.sft.edit_drill_steps", "100"]
    assert key(*function_hint, *steps) != key(*function_hint)
    for refused in ([*CORPUS, "--tasks.hint", "file"], []):  # the hint names no function; a micro run
        with pytest.raises(ValueError, match="edit_drill_steps drills viewing and changing"):
            load_config(RunConfig, None, [*refused, *steps])
    # Its batch and learning rate are the drill phases': set with it alone, they are read.
    load_config(RunConfig, None, [*function_hint, *steps, "--trainer.sft.copy_drill_batch_size", "16"])
    load_config(RunConfig, None, [*function_hint, *steps, "--trainer.sft.copy_drill_lr", "0.002"])


def test_frozen_embeddings_need_trained_ones_first_and_change_the_key() -> None:
    drilled = [*CORPUS, "--tasks.hint", "function", "--trainer.sft.edit_drill_steps", "100"]
    frozen = ["--trainer.sft.freeze_embeddings", "true"]
    assert key(*drilled, *frozen) != key(*drilled)
    for refused in (CORPUS, []):  # a fresh tiny model no drill phase trains first: its embeddings are random
        with pytest.raises(ValueError, match="freeze_embeddings keeps the token embeddings as they are"):
            load_config(RunConfig, None, [*refused, *frozen])


def test_the_edit_drill_phase_trains_on_hint_only_edit_drills_into_a_folder_beside_it(
    tmp_path: Path, tiny_model_dir: Path, prefect_server: dict[str, str]
) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    init = tmp_path / "init-model"
    shutil.copytree(tiny_model_dir, init)
    phase = ["--trainer.sft.edit_drill_steps", "1", "--trainer.sft.copy_drill_batch_size", "2"]
    phase += ["--trainer.sft.freeze_embeddings", "true"]  # the repository SFT's: the drills train them
    config = load_config(RunConfig, None, [*CORPUS, "--tasks.hint", "function", *phase])
    with temporary_settings(updates={PREFECT_API_URL: prefect_server["PREFECT_API_URL"]}):
        out = edit_drilled(str(init), config)
    assert Path(out) == tmp_path / "edit-drilled"
    before, after = load_file(init / "model.safetensors"), load_file(Path(out) / "model.safetensors")
    assert before.keys() == after.keys() and any(not before[k].equal(after[k]) for k in before)
    assert not before["model.embed_tokens.weight"].equal(after["model.embed_tokens.weight"])


def test_a_micro_runs_key_ignores_the_code_only_corpus_runs_read() -> None:
    from engines.trainer.warm_start_cache import CODE_MODULES, CORPUS_MODULES, code_digest

    micro = cache_inputs(load_config(RunConfig, None, []), TRAIN)
    corpus = cache_inputs(load_config(RunConfig, None, CORPUS), TRAIN)
    assert micro["code"] == code_digest(CODE_MODULES)  # a change to the drills keeps the default warm start
    assert corpus["code"] == code_digest(CODE_MODULES + CORPUS_MODULES)


def test_old_tokens_sizes_a_corpus_runs_edits_changes_its_key_and_is_refused_for_micro_runs() -> None:
    wide = ["--trainer.sft.old_tokens", "6"]
    assert key(*CORPUS, *wide) != key(*CORPUS)
    drilled = [*CORPUS, "--tasks.hint", "function", "--trainer.sft.copy_drill_steps", "100"]
    shares = ["--trainer.sft.edit_drill_share", "0.25"]
    demos = [[{"role": "user", "content": "demo"}, {"role": "assistant", "content": "submit"}]] * 3
    narrow, widened = (with_drills(demos, load_config(RunConfig, None, [*drilled, *shares, *w])) for w in ([], wide))
    olds = [(a[3]["content"].split("\n")[1], b[3]["content"].split("\n")[1]) for a, b in zip(narrow[3:], widened[3:])]
    assert olds and all(a.strip() in b for a, b in olds) and any(len(b) > len(a) for a, b in olds)
    with pytest.raises(ValueError, match="trainer.sft.old_tokens sizes OLD in a corpus run's"):
        load_config(RunConfig, None, wide)
