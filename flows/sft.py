"""The `sft` flow: the warm start that becomes weight version 0.

With `model.path` set, those weights are version 0 as they are (copied into the lake
first when the lanes run on other machines, `lanes.*_deployment`). Otherwise a tiny
Qwen3-MoE is created (tokenizer trained on the demonstrations) and fine-tuned on
the oracle episodes of the training tasks, so RL starts from a policy that
sometimes succeeds. That warm start is cached by a hash of everything that makes it
(engines/trainer/warm_start_cache.py): a run whose inputs were seen before copies it
instead of training (`trainer.sft.cache = false` always trains). SFT trains as the
trainer lane would (engines/trainer/sft.py): `trainer.processes` ranks, its parallelism
and precision, on the GPUs the device plan gives the trainer. Idempotent: a run that
already has version 0 reuses it.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.utilities.annotations import quote

from engines.env.task_sources.copy_drills import copy_drills, installed_sample
from engines.env.task_sources.corpus import corpus_id, load_corpus
from engines.env.task_sources.edit_drills import edit_drills
from engines.env.task_sources.micro import generate_micro_tasks
from engines.env.task_sources.renamed_demos import renamed_share
from engines.env.task_sources.repo_demos import source_texts
from engines.env.types import Task
from engines.handoff import RunContext
from engines.trainer.warm_start_cache import (
    CODE_MODULES,
    CORPUS_MODULES,
    SFT_TRAINER_FIELDS,
    cached,
    code_digest,
    warm_start_inputs,
    warm_start_key,
)
from flows.config import RunConfig
from flows.devices import device_plan, node_gpus
from storage import checkpoints
from storage.errors import NotFoundError
from storage.fs import Store
from tasks.training import (
    copy_check,
    copy_warm_start,
    create_model,
    demonstrations,
    fine_tune,
    fit_demonstrations,
    initial_dir,
    publish,
    repository_demonstrations,
    resolve_model,
)

# model.tiny.tokenizer_text = 'installed_code': about the training projects' code in a
# recipe's corpus (660 kB in the lab's 191 tasks) several times over, and drills enough
# for the protocol's words; the tokenizer trains on it in about 10 s.
TOKENIZER_CODE_CHARS = 3_000_000
TOKENIZER_DRILLS = 1_500
# Fresh short drills the drilled model answers (trainer.sft.copy_drill_min_copied): a formed
# circuit copies nearly all, an unformed one none, so 64 tell them apart; about 1 s on 2 cores.
COPY_CHECK_DRILLS = 64


@flow(name="sft", log_prints=True)
def warm_start(config: RunConfig, corpus_dir: str, context: RunContext) -> str:
    """Return the URI of weight version 0 in `context`'s lake, creating it when needed."""
    store = context.store
    try:
        return checkpoints.get(store, config.run, 0).uri
    except NotFoundError:
        pass
    if config.model.path:
        local = resolve_model(config.model.path)
        if config.lanes.deployed and "://" not in local:
            # Lanes on other machines open v0 through the lake, as every later version:
            # a path on this machine (a folder, the Hub cache) may not exist there.
            uri = checkpoints.weights_uri(store, config.run, 0)
            return publish(store, config.run, 0, -1, copy_warm_start(Path(local), store, uri))
        return publish(store, config.run, 0, -1, local)
    # SFT trains through the trainer's path: its ranks on the GPUs the device plan gives the trainer.
    config = device_plan(config, node_gpus()).apply(config)
    train = [t for t in load_corpus(corpus_dir) if t.split == "train"]
    uri = checkpoints.weights_uri(store, config.run, 0)
    if config.trainer.sft.cache:
        inputs = cache_inputs(config, train)
        local = cached(warm_start_key(inputs), lambda out: build(config, train, str(out), context.work), inputs=inputs)
        copy_warm_start(local, store, uri)
    else:
        build(config, train, uri, context.work, store)
    return publish(store, config.run, 0, -1, uri)


def build(config: RunConfig, train: list[Task], out: str, work: Path, store: Store | None = None) -> str:
    """Demonstrations of `train`, a fresh tiny model (made in the run's `work` folder), SFT
    on them, exported to `out` (a path inside `store` when given, else a local folder). Tasks from real repositories
    get the candidate demonstrator's episodes and a tokenizer that has read their code, or
    the installed code (model.tiny.tokenizer_text)."""
    sft = config.trainer.sft
    code: list[str] = []
    if config.tasks.kind == "corpus":
        demos = repository_demonstrations(
            quote(train),
            config.env.edit_attempts,
            config.tasks.seed,
            config.env,
            sft.demonstrations_per_task,
            sft.old_tokens,
        )
        if config.model.tiny.tokenizer_text == "demonstrations":
            code = source_texts(train)  # read before renaming: the tokenizer learns the real code
        demos = renamed_share(demos, sft.renamed_share, config.tasks.seed)
        if mixed := mixed_micro_tasks(config):  # the same tools on short generated tasks
            demos = [*demos, *micro_demonstrations(config, mixed)]
    else:
        demos = micro_demonstrations(config, train)
    texts = (demos, code) if config.model.tiny.tokenizer_text == "demonstrations" else neutral_tokenizer_text(config)
    init = create_model(initial_dir(work), quote(texts[0]), config.model.tiny, quote(texts[1]))
    if sft.copy_drill_steps:
        init = copy_drilled(init, config)
    if sft.edit_drill_steps:
        init = edit_drilled(init, config)
    if config.tasks.kind == "corpus":  # real code runs long: measured with the tokenizer just trained
        demos = fit_demonstrations(init, quote(with_drills(demos, config)), config.trainer.seq_len)
    return fine_tune(init, quote(demos), out, config.trainer, store)


def neutral_tokenizer_text(
    config: RunConfig, drills: int = TOKENIZER_DRILLS, code_chars: int = TOKENIZER_CODE_CHARS
) -> tuple[list[list[dict]], list[str]]:
    """model.tiny.tokenizer_text = 'installed_code': conversations in the protocol's shape
    (`drills` copy drills, a third as many edit drills) and `code_chars` of code, all of the
    installed code, none of a project's.
    Trained on the training projects' code, the tokenizer made their names whole tokens
    and a held-out project's five pieces (`voluptuous`: ` v`, `ol`, `up`, `t`, `uous`), so
    what the warm start learnt on one did not carry to the other
    (docs/2026-12-06-real-task-gate.md, X15)."""
    seed = config.tasks.seed
    shape = copy_drills(drills, seed + 3) + edit_drills(drills // 3, seed + 4, config.env.view_lines)
    return shape, installed_sample(code_chars, seed)


def copy_drilled(init: str, config: RunConfig) -> str:
    """The fresh model `init` after trainer.sft.copy_drill_hint_steps steps on copy drills of
    the installed code's names (engines/env/task_sources/copy_drills.py) whose statement is
    the hint alone, copy_drill_steps on short statements, then copy_drill_long_steps on
    statements as long as the builder's, beside it: it learns to copy a name from the
    statement before it learns the tools."""
    sft, seed, batch = config.trainer.sft, config.tasks.seed, config.trainer.sft.copy_drill_batch_size
    if sft.copy_drill_hint_steps:  # seed + 6: names no other drills of the build use
        hints = copy_drills(sft.copy_drill_hint_steps * batch, seed + 6, statement="hint")
        init = drill_phase(init, hints, sft.copy_drill_hint_steps, batch, "copy-drilled-hint", config)
    short = copy_drills(sft.copy_drill_steps * batch, seed, statement="short")
    out = drill_phase(init, short, sft.copy_drill_steps, batch, "copy-drilled", config)
    check_copying(out, config)
    if not sft.copy_drill_long_steps:
        return out
    batch = max(1, batch // 2)  # each about four times as long
    long = copy_drills(sft.copy_drill_long_steps * batch, seed + 2)  # seed + 1: the drills mixed into the SFT
    return drill_phase(out, long, sft.copy_drill_long_steps, batch, "copy-drilled-long", config)


def edit_drilled(init: str, config: RunConfig) -> str:
    """`init` after trainer.sft.edit_drill_steps steps on edit drills whose statement is the
    hint alone (engines/env/task_sources/edit_drills.py), beside it: it learns to copy OLD
    from a viewed function before the repository SFT, where edit drills are a share of the
    examples (edit_drill_share), as it learnt to copy the hinted names before it."""
    sft, batch = config.trainer.sft, config.trainer.sft.copy_drill_batch_size
    # seed + 7: files no other drills of the build start from
    drills = edit_drills(
        sft.edit_drill_steps * batch, config.tasks.seed + 7, config.env.view_lines, sft.old_tokens, "hint"
    )
    drills = fit_demonstrations(init, quote(drills), config.trainer.seq_len)  # a long function's page may not fit
    return drill_phase(init, drills, sft.edit_drill_steps, batch, "edit-drilled", config)


def check_copying(model_dir: str, config: RunConfig) -> None:
    """Stop the build when the drilled model in `model_dir` copies fewer fresh short drills
    exactly than trainer.sft.copy_drill_min_copied (engines/model/copy_check.py)."""
    sft = config.trainer.sft
    if not sft.copy_drill_min_copied:
        return
    drills = copy_drills(COPY_CHECK_DRILLS, config.tasks.seed + 5, statement="short")  # + 5: names no phase trains on
    share, misses = copy_check(model_dir, quote(drills))
    print(f"[sft] the drilled model copies {share:.0%} of {len(drills)} fresh copy drills exactly")
    if share < sft.copy_drill_min_copied:
        raise ValueError(
            f"trainer.sft.copy_drill_min_copied = {sft.copy_drill_min_copied}: after trainer.sft.copy_drill_steps = "
            f"{sft.copy_drill_steps} the drilled model ({model_dir}) copies {share:.0%} of {len(drills)} fresh copy "
            f"drills exactly (it wrote {'; '.join(misses)}), so its copying circuit has not formed (when it "
            "forms, the phase's loss above leaves its plateau and falls about 20-fold) and a warm start built "
            "on it would score 0 on projects it never trained on. Raise copy_drill_hint_steps (hint-only drills "
            "form it sooner) or copy_drill_steps; copy_drill_min_copied = 0 builds on without the check "
            "(docs/2026-12-06-real-task-gate.md, X17, X18)"
        )


def drill_phase(init: str, drills: list[list[dict]], steps: int, batch: int, name: str, config: RunConfig) -> str:
    """`init` after `steps` SFT steps of `batch` of `drills`, in the folder `name` beside it."""
    sft = config.trainer.sft
    # The drills teach the installed code's tokens: their embeddings train (freeze_embeddings is the repository SFT's).
    update = {
        "max_steps": steps,
        "batch_size": batch,
        "max_seconds": None,
        "lr": sft.copy_drill_lr or sft.lr,
        "freeze_embeddings": False,
    }
    phase = sft.model_copy(update=update)
    out = str(Path(init).parent / name)
    return fine_tune(init, quote(drills), out, config.trainer.model_copy(update={"sft": phase}), None)


def with_drills(demos: list[list[dict]], config: RunConfig) -> list[list[dict]]:
    """`demos` with copy drills and edit drills making trainer.sft.copy_drill_share and
    edit_drill_share of the whole; the copy drills are drawn with a seed the drill phase
    does not use (new names, not its drills again)."""
    sft, seed = config.trainer.sft, config.tasks.seed
    per_share = len(demos) / (1 - sft.copy_drill_share - sft.edit_drill_share)
    copies, edits = round(per_share * sft.copy_drill_share), round(per_share * sft.edit_drill_share)
    return [
        *demos,
        *(copy_drills(copies, seed + 1) if copies else []),
        *(edit_drills(edits, seed, config.env.view_lines, sft.old_tokens) if edits else []),
    ]


def mixed_micro_tasks(config: RunConfig) -> list[Task]:
    """The micro tasks whose demonstrations a corpus run's warm start mixes in
    (trainer.sft.micro_demonstrations; none for a micro run)."""
    n = config.trainer.sft.micro_demonstrations
    if not n or config.tasks.kind != "corpus":
        return []
    # Names of two or three random words, none seen often: the model must copy them, as it
    # must copy a real project's names, rather than recall one of the default 16.
    return generate_micro_tasks(n, config.tasks.seed, compound_names=True)


def micro_demonstrations(config: RunConfig, tasks: list[Task]) -> list[list[dict]]:
    """The micro warm start's demonstrations of `tasks`."""
    sft = config.trainer.sft
    return demonstrations(
        quote(tasks),
        config.env.edit_attempts,
        sft.failed_attempt_share,
        config.tasks.seed,
        sft.edit_tool,
        sft.demonstrations,
    )


def cache_inputs(config: RunConfig, train: list[Task]) -> dict:
    """What the run's warm start is made of (engines/trainer/warm_start_cache.py)."""
    sft = config.trainer.sft
    kind = "feedback" if config.env.edit_attempts else "oracle"
    if (
        config.tasks.kind == "corpus"
    ):  # engines/env/task_sources/repo_demos.py: its verdicts come from the sandboxed tests
        kind = f"repository-{config.env.feedback}-view{config.env.view_lines}"
    demos = {
        "kind": kind,
        "edit_attempts": config.env.edit_attempts,
        "failed_attempt_share": sft.failed_attempt_share,
        "edit_tool": sft.edit_tool,
        "demonstrator": sft.demonstrations,
        "seed": config.tasks.seed,
    }
    # The switch itself, how often progress is printed and the copy check (it stops a build,
    # never changes its weights) change no weight.
    sft_settings = sft.model_dump(mode="json", exclude={"cache", "log_every", "copy_drill_min_copied"})
    trainer = config.trainer.model_dump(mode="json", include=set(SFT_TRAINER_FIELDS))
    model = config.model.tiny.model_dump(mode="json")
    code = CODE_MODULES + (CORPUS_MODULES if config.tasks.kind == "corpus" else ())
    return warm_start_inputs(corpus_id(train), demos, sft_settings, trainer, model, code_digest(code))
