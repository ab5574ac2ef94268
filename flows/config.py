"""The configuration of a whole run: one pydantic model composed of each
component's own config, so the Prefect UI shows it as one form and a TOML file
or `--section.key value` overrides can set any field (see flows/config_loader.py).

Checks that need more than one field live here and run before anything starts:
a batch that groups cannot divide, a negative staleness bound, a model path that
does not exist.
"""

from __future__ import annotations

import os
import secrets
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engines.env.config import EnvConfig
from engines.env.task_sources.builder import BuildConfig
from engines.env.task_sources.edit_forms import EditTool
from engines.env.task_sources.micro_demos import DemonstrationKind
from engines.env.task_sources.selection import Hint
from engines.inference.config import EpisodeLimits, InferenceConfig, SamplingConfig
from engines.model.hub import is_hub_id, template_folder
from engines.model.tiny_config import TinyModelConfig
from engines.rollout.curriculum import Curriculum
from engines.tool_calls import chat_templates, template_supports_tools, template_tool_format
from engines.trainer.config import SFTConfig, TrainerConfig
from flows.lanes_config import LanesConfig
from flows.metrics import MetricsConfig
from storage.config import StorageConfig
from storage.layout import check_name


class ModelConfig(BaseModel):
    """Which weights the run starts from."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        None,
        description="Starting checkpoint: a Hugging Face MoE causal-LM directory (local path or s3://) or a Hub model "
        "id ('Qwen/Qwen3-30B-A3B', resolved through the Hugging Face cache; HF_HUB_OFFLINE=1 reads only the cache). "
        "None: create the tiny Qwen3-MoE and warm-start it with SFT on micro-task demonstrations.",
    )
    tiny: TinyModelConfig = Field(
        default_factory=TinyModelConfig,
        description="Shape of the tiny MoE created when path is None; refused when path is set (nothing reads it).",
    )


def _build_field(name: str, **kwargs) -> Any:
    """A field of CorpusBuild with BuildConfig's own default and description (one owner)."""
    field = BuildConfig.model_fields[name]
    default = {"default_factory": field.default_factory} if field.default_factory else {"default": field.default}
    return Field(**default, description=field.description, **kwargs)


class CorpusBuild(BaseModel):
    """How a corpus run builds its corpus when tasks.corpus_path holds none yet
    (engines/env/task_sources/builder.py: resumable, cached by content, so a second run reuses it).
    The sandbox settings are the run's `env`."""

    model_config = ConfigDict(extra="forbid")

    projects: list[str] = _build_field("projects")
    tasks_per_project: int = _build_field("tasks_per_project", ge=1)
    max_mutants_per_project: int = _build_field("max_mutants_per_project", ge=1)
    heldout_projects: list[str] = _build_field("heldout_projects")
    heldout_fraction: float = _build_field("heldout_fraction", ge=0, le=1)
    seed: int = _build_field("seed")

    def build_config(self, env: EnvConfig) -> BuildConfig:
        """The builder's configuration: these keys, the run's sandbox settings."""
        return BuildConfig(**self.model_dump(), env=EnvConfig.model_validate(env.model_dump()))


class TaskSetConfig(BaseModel):
    """Where the run's tasks come from."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["micro", "corpus"] = Field(
        "micro",
        description="micro: generated bug-fix modules (fast, learnable by a tiny model); corpus: a built task corpus.",
    )
    corpus_path: str | None = Field(
        None, description="Corpus directory (from `tandem tasks build`) when kind = corpus."
    )
    train_tasks: int = Field(
        4000,
        ge=1,
        description="Training tasks: micro tasks generated, or at most this many of the corpus's training split "
        "(drawn by seed).",
    )
    heldout_tasks: int = Field(
        500,
        ge=1,
        description="Held-out tasks: micro tasks generated (disjoint seed), or at most this many of the corpus's "
        "held-out split (drawn by seed); 500 resolve a 10-point change with a standard error near 2 points.",
    )
    seed: int = Field(
        0,
        description="Seed of the micro-task generator (train uses seed, held-out seed + 1), or of the draw from a "
        "corpus (engines/env/task_sources/selection.py).",
    )
    build: CorpusBuild | None = Field(
        None,
        description="Build the corpus at corpus_path first when it holds none (kind = corpus): which projects and how "
        "many tasks each. None: the corpus must exist (`tandem tasks build`).",
    )
    hint: Hint = Field(
        "tests",
        description="What a corpus task's problem statement says (engines/env/task_sources/selection.py): 'tests' the failing "
        "tests and their output only (SWE-bench's setting), 'file' also the file the bug is in, 'function' also "
        "the function or class (Class.method). Micro statements always name the failing call: refused there.",
    )

    @model_validator(mode="after")
    def _corpus(self) -> TaskSetConfig:
        if self.kind == "corpus" and not self.corpus_path:
            raise ValueError(
                "tasks.corpus_path: required when tasks.kind = 'corpus' (build one with `tandem tasks build`)"
            )
        if self.kind == "micro" and self.build is not None:
            raise ValueError(
                "tasks.build: micro tasks are generated, not built; remove tasks.build or set tasks.kind = 'corpus'"
            )
        if self.kind == "micro" and self.hint != "tests":
            raise ValueError(
                f"tasks.hint = {self.hint!r}: micro tasks' statements name the failing call and nothing else is "
                "written for them; the hint applies to tasks.kind = 'corpus'. Remove tasks.hint"
            )
        return self


class RLConfig(BaseModel):
    """The shape of the RL loop."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(
        50,
        ge=1,
        description="Optimizer steps of the run (each consumes one rollout shard); 50 take the tiny run 6-9 minutes "
        "on 2 cores.",
    )
    async_level: int = Field(
        1,
        ge=0,
        description="Staleness bound k: rollouts of step s come from policy versions >= s - k (0 = synchronous).",
    )
    batch_size: int = Field(128, ge=2, description="Episodes per step (tasks per step x group_size).")
    group_size: int = Field(
        8, ge=2, description="Episodes per task; advantages are relative to the group (1 would give zero advantages)."
    )
    seed: int = Field(
        0,
        description="Seed of the tasks each step takes (rl.curriculum); generation is seeded by "
        "inference.sampling.seed.",
    )
    curriculum: Curriculum = Field(
        "draw",
        description="Which training tasks each step takes (engines/rollout/curriculum.py): 'draw' afresh each step "
        "from (seed, step); 'mixed' walks them in seeded passes, every task once before any twice, and after the "
        "first pass only those whose latest group had mixed outcomes (a group that failed or passed whole trains "
        "nothing), with set-aside tasks, those walked longest ago first, filling at least a quarter of each pass.",
    )

    @model_validator(mode="after")
    def _divisible(self) -> RLConfig:
        if self.batch_size % self.group_size:
            raise ValueError(
                f"rl.batch_size ({self.batch_size}) is not divisible by rl.group_size ({self.group_size}): "
                "make batch_size a multiple of group_size"
            )
        return self


class EvalConfig(BaseModel):
    """Held-out evaluation before and after RL."""

    model_config = ConfigDict(extra="forbid")

    tasks: int = Field(500, ge=1, description="Held-out tasks evaluated (at most tasks.heldout_tasks).")
    samples: int = Field(
        1,
        ge=0,
        description="Samples per task at the rollout temperature for pass@k (k = samples); 0 runs the greedy pass "
        "alone, about half the evaluation's time when many tasks are evaluated.",
    )


class RunSamplingConfig(SamplingConfig):
    """Sampling of a model turn for micro tasks (defaults on the fields, so overriding one key keeps the others)."""

    max_tokens_per_turn: int = Field(
        64, ge=1, description="Most tokens of one turn; a micro-task action is about 20 tokens."
    )
    temperature: float = Field(
        0.7,
        ge=0.0,
        description="Rollout temperature (trainer.temperature must match). The tiny warm start solves 6% of held-out "
        "tasks sampled at 0.7 but 2% at 1.0: more groups with a success to learn from.",
    )
    top_p: float = Field(
        1.0,
        gt=0.0,
        le=1.0,
        description="Nucleus mass; must stay 1.0 in an RL run: the trainer's logprobs are of the full distribution.",
    )

    @field_validator("top_p")
    @classmethod
    def _full_distribution(cls, top_p: float) -> float:
        if top_p < 1.0:
            raise ValueError(
                f"inference.sampling.top_p = {top_p}: the trainer computes logprobs over the full distribution, so "
                "tokens sampled from a truncated nucleus would get wrong importance ratios; use top_p = 1.0"
            )
        return top_p


class RunEpisodeLimits(EpisodeLimits):
    """Episode limits for micro tasks (about 150 tokens per episode)."""

    max_turns: int = Field(4, ge=1, description="Most model turns per episode.")
    max_total_tokens: int = Field(
        512, ge=2, description="Most tokens in the whole conversation; at most the server's context."
    )
    max_concurrent_episodes: int = Field(128, ge=1, description="Episodes in flight at once: a whole step's batch.")
    max_observation_tokens: int | None = Field(
        256,
        ge=8,
        description="Observations longer than this many tokens are cut (head kept, the cut stated); a micro view is "
        "under 150. None: a quarter of max_total_tokens.",
    )


class RunInferenceConfig(InferenceConfig):
    """InferenceConfig whose model_dir the run fills in (the published weights), with
    defaults sized for the tiny MoE on micro tasks (episodes of about 150 tokens)."""

    model_dir: str = Field(
        "", description="Filled in by the run with the weights it serves; leave empty (set model.path instead)."
    )
    max_model_len: int = Field(512, ge=16, description="Context length of each server in tokens.")
    kv_cache_gb: float = Field(
        0.5, gt=0, description="KV cache in GB: per server on the CPU build, per GPU on a GPU build."
    )
    max_num_seqs: int = Field(128, ge=1, description="Sequences one server batches at once: a whole step's batch.")
    concurrency_per_server: int = Field(128, ge=1, description="Requests in flight per server.")
    sampling: RunSamplingConfig = Field(default_factory=RunSamplingConfig, description="Sampling of a model turn.")
    limits: RunEpisodeLimits = Field(
        default_factory=RunEpisodeLimits, description="Turn, token and time limits of an episode."
    )

    @field_validator("model_dir")
    @classmethod
    def _filled_by_the_run(cls, model_dir: str) -> str:
        if model_dir:
            raise ValueError(
                f"inference.model_dir = {model_dir!r}: the run fills it with the weights it serves (version 0, then "
                "each published version); leave it empty and set model.path to start from a model"
            )
        return model_dir

    weight_cache_versions: int = Field(
        3,
        ge=3,
        description="With an s3:// lake, weight versions the rollout host keeps copied on local disk "
        "(engines/rollout/weight_cache.py); the oldest others are deleted before each new copy. At least 3: "
        "the version the servers started from, the one they serve and the one being loaded.",
    )


class RunSFTConfig(SFTConfig):
    """Warm start bounded in steps (time is only a safety net), so its quality does not
    depend on how busy the machine is."""

    max_steps: int | None = Field(
        1300,
        ge=1,
        description="Optimizer steps of the warm start (14-17 minutes on 2 cores at 0.66-0.80 s a step, so a run "
        "that builds it ends within 30). With spaced_context_change and candidates demonstrations, 1300 steps write "
        "a valid single-token edit inside the named function first in 81% of held-out tasks, spaced_change 66.5% "
        "(README: the edit gate); at 600 steps the viewed forms have not yet learned to name the function.",
    )
    max_seconds: float | None = Field(
        2400,
        gt=0,
        description="Safety bound on the warm start's wall time (s); max_steps is what ends it on an idle machine.",
    )
    schedule: Literal["constant", "cosine"] = Field("cosine", description="Cosine decay to 10% of lr at max_steps.")
    failed_attempt_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Under edit feedback (env.edit_attempts > 0), the share of micro-task demonstrations that show one "
        "or two failed attempts (masked from the loss) before the fix, so the warm start knows what a retry is.",
    )
    edit_tool: EditTool = Field(
        "spaced_context_change",
        description="How the micro-task demonstrations write an edit (engines/env/task_sources/micro.py: line_edit): edit (line "
        "number + the whole new line), replace (the old line copied, with lines above it until unique), or a short "
        "form that writes only the tokens that change, OLD unique in its scope: short_replace (the file), "
        "line_change (`change m.py LINE`), function_change (`change m.py NAME`, the named function), viewed_change "
        "(function_change after a first turn `view m.py NAME` that shows the named function), spaced_change "
        "(viewed_change with OLD and NEW keeping the space before their first token, so OLD is the view's own BPE "
        "tokens), spaced_line_change (spaced_change naming the line by the number the view shows, OLD unique in "
        "that line), spaced_context_change (spaced_change with OLD at least two tokens: the change and the token "
        "before it). The policy "
        "may use any. benchmarks/edit_gate.py measures how often each warm start writes a valid edit.",
    )
    demonstrations: DemonstrationKind = Field(
        "candidates",
        description="Who writes the warm start's demonstrations: oracle (the fix, after failed attempts masked from "
        "the loss in failed_attempt_share of them) or candidates (distinct plausible edits of the named function in "
        "random order until the tests pass or env.edit_attempts run out, every attempt trained: the tools and the "
        "edit form, not the fixes; needs env.edit_attempts >= 1).",
    )
    demonstrations_per_task: int = Field(
        1,
        ge=1,
        description="Demonstrations of each repository task (tasks.kind = corpus), each trying the candidates in its "
        "own order: a corpus of a few hundred tasks gives few demonstrations otherwise. Micro runs write one per "
        "task (4,000 tasks): refused there.",
    )
    micro_demonstrations: int = Field(
        0,
        ge=0,
        description="Micro-task demonstrations (as a micro run's warm start writes them: `demonstrations`, "
        "`edit_tool`, functions named by two or three random words) mixed into a corpus run's warm start "
        "(tasks.kind = corpus): short episodes of the same tools, many for one repository episode's tokens, in which "
        "the model must copy a name it has not seen from the statement and OLD from the view. 0: repository "
        "demonstrations only. Refused for micro runs.",
    )
    copy_drill_steps: int = Field(
        0,
        ge=0,
        description="SFT steps (of copy_drill_batch_size drills each) on copy drills before the demonstrations "
        "(engines/env/task_sources/copy_drills.py): statements whose hint names a file and function drawn from the "
        "names of the Python code installed beside the trainer (about 100,000, too many to recall), answered by the "
        "view of exactly those names, so the tiny model learns to copy a name from the statement (an induction "
        "circuit, formed in a phase change whose step varies with the machine and the batch order; "
        "copy_drill_hint_steps before these bring it sooner: docs/2026-12-06-real-task-gate.md) before it learns the "
        "tools; long repository episodes alone did not teach it in the SFT time a run has. 0: none. Needs "
        "tasks.kind = corpus and tasks.hint = 'function'; refused otherwise.",
    )
    copy_drill_batch_size: int = Field(
        32,
        ge=1,
        description="Drills a step of the copy-drill phase (trainer.sft.copy_drill_steps; half of it in "
        "copy_drill_long_steps) and of the edit-drill phase (edit_drill_steps): a short copy drill is about 80 tokens, "
        "so 32 cost about 1 s a step on 2 cores. Read only when copy_drill_steps or edit_drill_steps > 0.",
    )
    old_tokens: int = Field(
        2,
        ge=1,
        description="Fewest whole tokens in the OLD of a corpus run's repository demonstrations and edit drills "
        "(`change PATH NAME`: the shortest span of the changed line that holds its change and occurs once in the "
        "function, or the whole line). At 2, OLD is mostly a mutation's own shape (`not (`, `+= 1`), and a warm "
        "start wrote such shapes from memory in 43 of 51 first edits on a project it never trained on instead of "
        "copying from the view (docs/2026-12-06-real-task-gate.md, X18); more tokens take in the line's names, "
        "which only copying gets right, but at 6 the tiny model copied fewer (OLD in the function 3.3% against 13.3%, "
        "X19). Refused for micro runs (their demonstrations keep trainer.sft.edit_tool's form).",
    )
    copy_drill_hint_steps: int = Field(
        0,
        ge=0,
        description="SFT steps (of copy_drill_batch_size drills each) before copy_drill_steps on copy drills whose "
        "statement is the hint line alone (about 20 tokens, a quarter of a short drill). A head that has not yet "
        "learnt where to look spreads its attention over every token of the statement, so the fewer there are, "
        "the stronger the signal that forms the copying circuit: on a machine where 1,350 short-drill steps formed "
        "none, hint-only drills formed it from step 300 and the short drills after them copied at once "
        "(docs/2026-12-06-real-task-gate.md, X18). 0: none. Needs copy_drill_steps > 0.",
    )
    copy_drill_long_steps: int = Field(
        0,
        ge=0,
        description="SFT steps after copy_drill_steps on copy drills whose statements are as long as the builder's "
        "(1-8 failures and up to 12 lines of assertion output, lines of real code; half copy_drill_batch_size a step, "
        "each about 4 times as long): the circuit the short drills formed copied a hint after 100 tokens of "
        "statement and garbled it after 500; these teach it to copy past them. 0: none. Needs copy_drill_steps > 0.",
    )
    copy_drill_lr: float | None = Field(
        None,
        gt=0,
        description="Learning rate of the drill phases (copy_drill_steps, copy_drill_long_steps, "
        "edit_drill_steps); None: trainer.sft.lr, as the repository SFT after them. Drilled at 2e-3, then trained "
        "on the repository demonstrations at 5e-4 rather than 2e-3, the model kept copying a never-trained "
        "project's path (docs/2026-12-06-real-task-gate.md, X11). Needs copy_drill_steps or edit_drill_steps > 0.",
    )
    copy_drill_min_copied: float = Field(
        0.5,
        ge=0,
        le=1,
        description="After the short copy-drill phase, the drilled model answers 64 fresh short drills greedy; when it "
        "copies fewer than this share exactly, the warm-start build stops with an error before the long phase and "
        "the repository SFT. The copying circuit forms in a phase change that may come after copy_drill_steps: a "
        "model drilled on the recipe's 900 steps named the hinted file in 98% of a held-out project's episodes "
        "on one machine and in none on another (docs/2026-12-06-real-task-gate.md, X17), and a warm start that "
        "does not copy scores 0 on every project it never trained on. 0: no check. Read only when "
        "copy_drill_steps > 0.",
    )
    copy_drill_share: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Share of the repository SFT's examples that are copy drills (as the copy-drill phase's, drawn "
        "with another seed), mixed among the demonstrations so the copying the phase formed keeps being trained "
        "while the model learns the training projects' names (engines/env/task_sources/copy_drills.py). 0: "
        "demonstrations only. Needs copy_drill_steps > 0 (a circuit to keep); refused otherwise.",
    )
    edit_drill_share: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Share of the repository SFT's examples that are edit drills (engines/env/task_sources/"
        "edit_drills.py): a repository episode's first turns on a function of the installed Python code (about "
        "30,000 files), viewing the function the hint names and changing one of its lines, so the model copies "
        "names and OLD from code too plentiful to recall, as on a project it never trained on. 0: none. Needs "
        "tasks.kind = corpus and tasks.hint = 'function'; refused otherwise.",
    )
    edit_drill_steps: int = Field(
        0,
        ge=0,
        description="SFT steps (of copy_drill_batch_size drills each) on edit drills alone after the copy-drill "
        "phases and before the repository SFT (engines/env/task_sources/edit_drills.py), each statement the hint "
        "line alone: the model copies OLD from a viewed function of code too plentiful to recall, as the copy "
        "drills taught it to copy the hinted names. Each drill is about 350 tokens (about 2.4 s a step of 32 on 2 "
        "cores). After 300 steps and the repository SFT, the greedy first edit applied inside the hinted function "
        "in 24.5% of held-out tasks of the training projects (6.1% without) and 6.7% of a held-out project's "
        "(3.3%) (docs/2026-12-06-real-task-gate.md, X20). 0: none. Needs tasks.kind = corpus and tasks.hint = "
        "'function'; refused otherwise.",
    )
    renamed_share: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of the repository demonstrations (tasks.kind = corpus) in which the names the hint gives "
        "(the file's package and module, the class, the function) are replaced in every message by names of random "
        "words (engines/env/task_sources/renamed_demos.py): the model must copy them from the statement, as on a "
        "project it never trained on, rather than recall the training projects' names. Needs tasks.hint = 'file' or "
        "'function'; refused for micro runs.",
    )
    cache: bool = Field(
        True,
        description="Reuse a warm start made of the same inputs (tasks, demonstration and SFT settings, model shape, "
        "the code that makes it), cached under $TANDEM_CACHE or ~/.cache/tandem-rl/warm-starts/<key> "
        "(engines/trainer/warm_start_cache.py); false trains a fresh one and caches nothing.",
    )


class RunEnvConfig(EnvConfig):
    """EnvConfig with the run's protocol: edit feedback with 3 attempts."""

    edit_attempts: int = Field(
        3,
        ge=0,
        description="Every edit runs the visible tests and the model sees which fail; the episode ends when the "
        "grading tests pass in-session or after this many tested edits (0: plain edits, one-shot). 3 distinct "
        "plausible guesses solve about three times as many micro tasks as one, so what RL teaches (retry "
        "differently) carries over to unseen tasks.",
    )


class RunTrainerConfig(TrainerConfig):
    """TrainerConfig with defaults for the tiny MoE on micro tasks. Defaults live on the
    fields (not in a factory) so overriding one key keeps the others."""

    # Micro episodes are short (about 150 tokens) and of similar length: padding wastes
    # little, and unpacked rows take the faster attention path on CPU (2x per SFT step).
    # Adam moves every weight by about lr per step whatever the gradient's size: 5e-4
    # narrowed the policy within 10 steps (held-out -8.5 points); 1e-4 after a short
    # warm-up learns (README: the learning lab).
    lr: float = Field(1e-4, gt=0, description="AdamW learning rate for RL (the warm start uses 2e-3).")
    warmup_steps: int = Field(3, ge=0, description="Linear learning-rate warm-up in RL steps, then constant.")
    temperature: float = Field(0.7, gt=0, description="Rollout temperature: inference.sampling.temperature.")
    packing: bool = Field(False, description="Pack several episodes per row; off for short micro episodes.")
    micro_batch_rows: int = Field(
        16,
        ge=1,
        description="Forward/backward passes of at most micro_batch_rows x seq_len tokens (8k: a 1-thread trainer "
        "ran its update fastest at 2k-8k, benchmarks/trainer_step.py).",
    )
    seq_len: int = Field(512, ge=16, description="Row length in tokens (the server's context).")
    sft: RunSFTConfig = Field(
        default_factory=RunSFTConfig,
        description="Warm-start SFT of the tiny model (model.path unset); refused when model.path is set.",
    )


class RetentionConfig(BaseModel):
    """Which published weight versions the run keeps as it goes (storage/retention.py);
    the rest are deleted after each step, so a long run does not end on a full disk."""

    model_config = ConfigDict(extra="forbid")

    keep_last: int | None = Field(
        None,
        ge=1,
        description="Newest versions kept. None: rl.async_level + 1, the versions rollouts may still be generated "
        "with under the staleness bound. The version the servers serve is always kept.",
    )
    milestone_every: int = Field(
        10, ge=0, description="Also keep every Nth version (v0, vN, v2N, ...) as a milestone; 0 keeps none."
    )

    def last(self, async_level: int) -> int:
        """The resolved `keep_last`."""
        return self.keep_last if self.keep_last is not None else async_level + 1


def unique_run_name() -> str:
    """tiny-moe-<date>-<time>-<4 hex>: a new name per run, so two runs never share a folder by accident."""
    return f"tiny-moe-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


class RunConfig(BaseModel):
    """A whole asynchronous RL run."""

    model_config = ConfigDict(extra="forbid")

    run: str = Field(
        default_factory=unique_run_name,
        description="Run name: the folder under storage.root holding everything of the run. Default: a new "
        "name per run (tiny-moe-<date>-<time>-<hex>); give an existing run's name to resume it.",
    )
    allow_config_change: bool = Field(
        False,
        description="Resume a run even when this configuration differs from the one stored at its start "
        "(only rl.steps may differ otherwise; the differing keys are listed and the run is refused).",
    )
    storage: StorageConfig = Field(
        default_factory=StorageConfig, description="Where trajectories, metrics and weights go."
    )
    model: ModelConfig = Field(default_factory=ModelConfig, description="Starting weights.")
    tasks: TaskSetConfig = Field(default_factory=TaskSetConfig, description="Training and held-out tasks.")
    env: RunEnvConfig = Field(default_factory=RunEnvConfig, description="Sandbox, grading and the edit protocol.")
    inference: RunInferenceConfig = Field(
        default_factory=RunInferenceConfig,
        description="vLLM servers, sampling and episode limits.",
    )
    trainer: RunTrainerConfig = Field(
        default_factory=RunTrainerConfig, description="RL objective, optimizer and SFT warm start."
    )
    rl: RLConfig = Field(default_factory=RLConfig, description="Steps, staleness bound, batch and group sizes.")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Held-out evaluation.")
    retention: RetentionConfig = Field(
        default_factory=RetentionConfig, description="Weight versions kept as the run goes."
    )
    metrics: MetricsConfig = Field(
        default_factory=MetricsConfig,
        description="Per-step metrics and held-out evaluations for TensorBoard, W&B and MLflow (off by default).",
    )
    lanes: LanesConfig = Field(
        default_factory=LanesConfig, description="Lanes on other machines, as deployments (off by default)."
    )

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        check_name("run", self.run)
        path = self.model.path
        if path and not path.startswith("s3://") and not os.path.isdir(path) and not is_hub_id(path):
            raise ValueError(
                f"model.path: {path!r} is not a directory or a Hugging Face model id ('org/name'); "
                "give a model directory, an id, or leave it unset"
            )
        if path:
            self._check_tiny_only()
        self._settle_tool_format()
        if self.inference.tool_format != "text":
            self._check_tool_calls()
        if self.tasks.kind == "corpus" and not path:
            self._check_repository_warm_start()
        if not path:
            self._check_tiny_context()
        if self.tasks.kind == "corpus" and self.env.edit_attempts and self.env.feedback == "rollback":
            raise ValueError(
                "env.feedback = 'rollback' with tasks.kind = 'corpus': every failing edit would be undone, so a fix "
                "that needs two edits could never be assembled; set env.feedback = 'keep' (the agent undoes with "
                "`undo`), or env.edit_attempts = 0"
            )
        sampled_at = self.inference.sampling.temperature
        if sampled_at != self.trainer.temperature:
            raise ValueError(
                f"trainer.temperature ({self.trainer.temperature}) differs from inference.sampling.temperature "
                f"({sampled_at}): the RL loss compares the trainer's logprobs with the sampler's, so set both to the same value"
            )
        self._check_devices()
        if not path and (why := self.trainer.sft_unsupported()) is not None:
            raise ValueError(f"{why}, or set model.path (with it unset the run warm-starts the tiny model by SFT)")
        needed = self.rl.async_level + 1
        if self.retention.keep_last is not None and self.retention.keep_last < needed:
            raise ValueError(
                f"retention.keep_last ({self.retention.keep_last}) is below rl.async_level + 1 ({needed}): rollouts may "
                "still be generated with the versions it would delete; raise it or leave it unset"
            )
        if self.tasks.kind == "micro" and self.trainer.sft.demonstrations_per_task != 1:
            raise ValueError(
                "trainer.sft.demonstrations_per_task applies to repository tasks (tasks.kind = 'corpus'); micro runs "
                "write one demonstration per generated task: remove the key, or raise tasks.train_tasks"
            )
        if self.tasks.kind == "micro" and self.trainer.sft.micro_demonstrations:
            raise ValueError(
                "trainer.sft.micro_demonstrations mixes micro demonstrations into a corpus run's warm start "
                "(tasks.kind = 'corpus'); a micro run's warm start is all micro demonstrations: remove the key"
            )
        if self.trainer.sft.copy_drill_steps and (self.tasks.kind == "micro" or self.tasks.hint != "function"):
            raise ValueError(
                "trainer.sft.copy_drill_steps drills copying the file and function a corpus run's hint names "
                f"(tasks.kind = 'corpus', tasks.hint = 'function'); this run has tasks.kind = {self.tasks.kind!r}, "
                f"tasks.hint = {self.tasks.hint!r}: remove the key or set the hint"
            )
        if self.model.tiny.tokenizer_text != "demonstrations" and self.tasks.kind == "micro":
            raise ValueError(
                f"model.tiny.tokenizer_text = {self.model.tiny.tokenizer_text!r} keeps a corpus run's project names "
                "out of the tokenizer; a micro run's tasks have none, and its warm start was measured with the "
                "demonstrations' tokenizer: remove the key"
            )
        sft = self.trainer.sft
        # Against the default, not model_fields_set: a config passed on whole (a lane's) sets every field.
        if sft.copy_drill_batch_size != type(sft).model_fields["copy_drill_batch_size"].default and not (
            sft.copy_drill_steps or sft.edit_drill_steps
        ):
            raise ValueError(
                "trainer.sft.copy_drill_batch_size sizes the copy- and edit-drill phases, and trainer.sft."
                "copy_drill_steps = 0 and edit_drill_steps = 0 run none: set one of them or remove the key"
            )
        if sft.old_tokens != type(sft).model_fields["old_tokens"].default and self.tasks.kind == "micro":
            raise ValueError(
                "trainer.sft.old_tokens sizes OLD in a corpus run's repository demonstrations and edit drills, and a "
                "micro run has neither (trainer.sft.edit_tool sets its demonstrations' form): remove the key or set "
                "tasks.kind = 'corpus'"
            )
        if sft.copy_drill_hint_steps and not sft.copy_drill_steps:
            raise ValueError(
                "trainer.sft.copy_drill_hint_steps forms the copying that the short drills of "
                "trainer.sft.copy_drill_steps carry to longer statements, and copy_drill_steps = 0 runs none: set "
                "copy_drill_steps or remove the key"
            )
        if sft.copy_drill_long_steps and not sft.copy_drill_steps:
            raise ValueError(
                "trainer.sft.copy_drill_long_steps sharpens the copying the short drills of trainer.sft.copy_drill_steps "
                "form, and copy_drill_steps = 0 runs none: set copy_drill_steps or remove the key"
            )
        if sft.copy_drill_lr is not None and not (sft.copy_drill_steps or sft.edit_drill_steps):
            raise ValueError(
                "trainer.sft.copy_drill_lr is the copy- and edit-drill phases' learning rate, and trainer.sft."
                "copy_drill_steps = 0 and edit_drill_steps = 0 run none: set one of them or remove the key"
            )
        if sft.copy_drill_min_copied != type(sft).model_fields["copy_drill_min_copied"].default and not (
            sft.copy_drill_steps
        ):
            raise ValueError(
                "trainer.sft.copy_drill_min_copied checks the model the copy-drill phase made, and "
                "trainer.sft.copy_drill_steps = 0 runs none: set copy_drill_steps or remove the key"
            )
        if sft.copy_drill_share and not sft.copy_drill_steps:
            raise ValueError(
                "trainer.sft.copy_drill_share keeps the copying the copy-drill phase forms, and "
                "trainer.sft.copy_drill_steps = 0 runs no such phase: set copy_drill_steps or remove the key"
            )
        for key, value in (("edit_drill_share", sft.edit_drill_share), ("edit_drill_steps", sft.edit_drill_steps)):
            if value and (self.tasks.kind == "micro" or self.tasks.hint != "function"):
                raise ValueError(
                    f"trainer.sft.{key} drills viewing and changing the function a corpus run's hint names "
                    f"(tasks.kind = 'corpus', tasks.hint = 'function'); this run has tasks.kind = "
                    f"{self.tasks.kind!r}, tasks.hint = {self.tasks.hint!r}: remove the key or set the hint"
                )
        if sft.freeze_embeddings and not self.model.path and not (sft.copy_drill_steps or sft.edit_drill_steps):
            raise ValueError(
                "trainer.sft.freeze_embeddings keeps the token embeddings as they are, and this run's tiny model is "
                "created with random ones that no drill phase trains first (trainer.sft.copy_drill_steps = 0 and "
                "edit_drill_steps = 0): set a drill phase or model.path, or remove the key"
            )
        if sft.copy_drill_share + sft.edit_drill_share >= 1:
            raise ValueError(
                f"trainer.sft.copy_drill_share ({sft.copy_drill_share}) and edit_drill_share ({sft.edit_drill_share}) "
                "leave no room for the repository demonstrations: their sum must be below 1"
            )
        if self.trainer.sft.renamed_share and (self.tasks.kind == "micro" or self.tasks.hint == "tests"):
            raise ValueError(
                "trainer.sft.renamed_share renames the file and function a corpus run's hint names (tasks.kind = "
                f"'corpus', tasks.hint = 'file' or 'function'); this run has tasks.kind = {self.tasks.kind!r}, "
                f"tasks.hint = {self.tasks.hint!r}: remove the key or set the hint"
            )
        if self.trainer.sft.demonstrations == "candidates" and not self.env.edit_attempts:
            raise ValueError(
                "trainer.sft.demonstrations = 'candidates' tries edits until the tests pass, which needs edit "
                "feedback: set env.edit_attempts >= 1, or use demonstrations = 'oracle'"
            )
        if self.eval.tasks > self.tasks.heldout_tasks:
            raise ValueError(
                f"eval.tasks ({self.eval.tasks}) exceeds tasks.heldout_tasks ({self.tasks.heldout_tasks}): lower one or raise the other"
            )
        return self

    def _check_devices(self) -> None:
        """The GPUs both lanes list on one node; the rest of the plan needs the node's GPU count
        and is made when the lanes start (flows/devices.py)."""
        if self.trainer.nodes > 1 and not self.lanes.deployed:
            raise ValueError(
                f"trainer.nodes = {self.trainer.nodes}: a trainer over several machines runs one trainer lane per "
                "node, each a run of lanes.trainer_deployment; set lanes.rollout_deployment and "
                "lanes.trainer_deployment (the README's lanes-apart mode), or trainer.nodes = 1"
            )
        self._check_hosts()
        if self.lanes.deployed:
            if self.trainer.share_devices:
                raise ValueError(
                    "trainer.share_devices: with the lanes on other machines (lanes.rollout_deployment, "
                    "lanes.trainer_deployment) the servers and the trainer never share a node's GPUs; remove it"
                )
            return
        both = sorted(set(self.inference.devices or []) & set(self.trainer.devices or []))
        if both and not self.trainer.share_devices:
            raise ValueError(
                f"inference.devices {self.inference.devices} and trainer.devices {self.trainer.devices} both list "
                f"GPU {both}: vLLM's KV cache and the trainer's weights would compete for its memory. Give each its "
                "own GPUs, or set trainer.share_devices = true for a model small enough to share them"
            )

    def _check_hosts(self) -> None:
        """Servers on several machines: one run of lanes.server_deployment per other host."""
        hosts, lanes = self.inference.hosts, self.lanes
        if hosts > 1 and (lanes.server_deployment is None or not lanes.deployed):
            raise ValueError(
                f"inference.hosts = {hosts}: the servers of hosts 1-{hosts - 1} run as lanes.server_deployment "
                "('server-host/remote'), beside the two lanes as deployments: set lanes.server_deployment, "
                "lanes.rollout_deployment and lanes.trainer_deployment (the README's lanes-apart mode), or hosts = 1"
            )
        if hosts == 1 and lanes.server_deployment is not None:
            raise ValueError(
                f"lanes.server_deployment = {lanes.server_deployment!r} runs the servers of hosts other than the "
                "rollout lane's, and inference.hosts = 1 has none: raise inference.hosts or remove it"
            )

    def _settle_tool_format(self) -> None:
        """inference.tool_format 'auto' made the format model.path's chat template writes
        ('text' for the tiny model), once, here: the stored configuration then carries it
        to SFT, the lanes, evaluation and replay. Set as decided, not as given, so the
        section's explicitly set keys stay the caller's (`tandem eval` reads them)."""
        if self.inference.tool_format != "auto":
            return
        path = self.model.path
        if path and path.startswith("s3://"):
            raise ValueError(
                f"inference.tool_format = 'auto' reads the chat template of model.path, which is on S3 ({path!r}): "
                "set inference.tool_format to 'text' or the model family's format"
            )
        try:
            fmt = template_tool_format(chat_templates(template_folder(path))) if path else "text"
        except FileNotFoundError as exc:
            raise ValueError(str(exc)) from None
        object.__setattr__(self.inference, "tool_format", fmt)  # not in model_fields_set

    def _check_tool_calls(self) -> None:
        """Native tool calls need a chat template that lists tools: never the tiny model's own."""
        path, fmt = self.model.path, self.inference.tool_format
        if not path:
            raise ValueError(
                f"inference.tool_format = {fmt!r}: the tiny model's chat template has no tools section and its warm "
                "start teaches the text actions; set tool_format = 'text', or model.path to a model whose template lists tools"
            )
        if os.path.isdir(path) and template_supports_tools(path) is False:
            raise ValueError(
                f"inference.tool_format = {fmt!r}: the chat template of model.path ({path!r}) never references "
                "`tools`, so the tool schemas would not reach the model; set tool_format = 'text' or use a template "
                "with a tools section"
            )

    def _check_repository_warm_start(self) -> None:
        """The tiny model on a built corpus warm-starts on the repository candidate
        demonstrator (engines/env/task_sources/repo_demos.py): its own edit form, candidates, kept feedback."""
        sft = self.trainer.sft
        if sft.demonstrations != "candidates":
            raise ValueError(
                f"trainer.sft.demonstrations = {sft.demonstrations!r} with tasks.kind = 'corpus': the oracle demonstrator "
                "writes micro tasks only; repository tasks warm-start on the candidate demonstrator. Use "
                "'candidates', or set model.path"
            )
        if sft.failed_attempt_share != RunSFTConfig().failed_attempt_share:
            raise ValueError(
                f"trainer.sft.failed_attempt_share = {sft.failed_attempt_share} with tasks.kind = 'corpus': it shapes "
                "the micro oracle's demonstrations only; repository demonstrations show every candidate tried. "
                "Remove the key"
            )
        if sft.edit_tool != RunSFTConfig().edit_tool:
            raise ValueError(
                f"trainer.sft.edit_tool = {sft.edit_tool!r} with tasks.kind = 'corpus': repository demonstrations are "
                f"written in the {RunSFTConfig().edit_tool} form only (engines/env/task_sources/repo_demos.py); remove the key"
            )

    def _check_tiny_context(self) -> None:
        """The tiny model created here must hold the sequences the run trains and serves."""
        longest = self.model.tiny.max_position_embeddings
        for key, value in (
            ("inference.max_model_len", self.inference.max_model_len),
            ("trainer.seq_len", self.trainer.seq_len),
        ):
            if value > longest:
                raise ValueError(
                    f"{key} ({value}) exceeds model.tiny.max_position_embeddings ({longest}), the longest sequence "
                    f"the tiny model is made for: raise model.tiny.max_position_embeddings to at least {value}"
                )

    def _check_tiny_only(self) -> None:
        """model.tiny and trainer.sft shape and warm-start the tiny model made when model.path is unset;
        with model.path those weights are version 0 as they are, so a changed key would do nothing."""
        defaults = RunTrainerConfig().sft.model_dump()
        sections = (
            ("model.tiny", self.model.tiny.model_dump(), TinyModelConfig().model_dump()),
            ("trainer.sft", self.trainer.sft.model_dump(), defaults),
        )
        for section, values, default in sections:
            changed = next((k for k in values if values[k] != default[k]), None)
            if changed is not None:
                raise ValueError(
                    f"{section}.{changed} = {values[changed]!r}: {section} applies only to the tiny model created "
                    f"when model.path is unset; model.path ({self.model.path!r}) is used as it is. Remove "
                    f"{section}.{changed}, or unset model.path"
                )
