"""Configuration of the environment: sandbox limits, backend, pool size, rewards.

One pydantic model per component; every field says what it means, its unit and
why the default. Unknown keys are refused so a typo never silently falls back to
a default.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engines.env.sandbox.interpreter import check_python, default_sandbox_python


class SandboxLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_mb: int = Field(
        1024,
        ge=16,
        description="Memory cap of the whole sandboxed tree (MiB, cgroup). 1 GiB fits pytest on the default projects.",
    )
    max_processes: int = Field(
        64,
        ge=4,
        description="Process/thread cap of the tree (cgroup pids.max); stops fork bombs. pytest needs a handful.",
    )
    cpu_seconds: int = Field(
        60, ge=1, description="CPU-time rlimit per process (s); stops busy loops even when the wall clock is generous."
    )
    file_size_mb: int = Field(64, ge=1, description="Largest file a sandboxed process may write (MiB, RLIMIT_FSIZE).")
    wall_timeout_s: float = Field(
        60.0, gt=0, description="Wall-clock limit of one command (s); the whole tree is killed when it passes."
    )
    output_bytes: int = Field(
        256_000,
        ge=1024,
        description="Bytes of output kept (first quarter and last three quarters); the rest is dropped.",
    )


class EnvConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    limits: SandboxLimits = Field(
        default_factory=SandboxLimits,
        description="Caps applied to every sandboxed command (grading, bash tool, test tool).",
    )
    backend: Literal["bwrap", "unsandboxed"] = Field(
        "bwrap",
        description="'bwrap' runs commands under bubblewrap; 'unsandboxed' runs them directly (needs allow_unsandboxed).",
    )
    allow_unsandboxed: bool = Field(
        False, description="Explicit opt-in for the unsandboxed backend; a warning is logged on every use."
    )
    bwrap_path: str = Field("bwrap", description="bubblewrap executable (name on PATH or absolute path).")
    use_cgroups: bool = Field(
        True,
        description="Cap memory and processes of every sandboxed tree with cgroups (v2, else v1). When neither can be "
        "applied, grading refuses to start and says what is missing; False opts out explicitly (rlimits only: "
        "no memory or process-count cap for root).",
    )
    cgroup_root: str = Field(
        "/sys/fs/cgroup",
        description="Where the cgroup filesystem is mounted (v2: the unified root; v1: the folder holding memory/ and pids/).",
    )
    python: str = Field(
        default_factory=default_sandbox_python,
        description="Python interpreter that runs tests inside the sandbox (its prefix is bound read-only). Default: "
        "the pytest-only environment scripts/setup.sh builds (TANDEM_SANDBOX_PYTHON), so no package of the "
        "orchestrator's is importable or readable from an episode; else this interpreter, with a warning.",
    )
    workers: int = Field(
        0, ge=0, description="Grading workers; 0 = min(CPU cores, available memory / limits.memory_mb)."
    )
    warm_pytest: bool = Field(
        True,
        description="Grade `python -m pytest` commands in a sandbox that stays up per repository copy, with pytest "
        "imported once and a fresh fork per run (warm_pytest.py): 5-10x faster targeted runs, same isolation.",
    )
    fast_test_runner: bool = Field(
        True,
        description="The `test` tool and edit-feedback attempts call plain `def test_*` functions (every micro task) "
        "directly in the warm sandbox instead of through pytest (plain_runner.py): the same statuses, 12 ms a call "
        "instead of 43. Final grades always run pytest. Needs warm_pytest and the bwrap backend; other tasks run pytest.",
    )
    partial_credit: bool = Field(
        False,
        description="Reward = fraction of FAIL_TO_PASS passing when every PASS_TO_PASS passes; default is binary 'resolved'.",
    )
    edit_attempts: int = Field(
        0,
        ge=0,
        description="Edit feedback (engines/env/feedback.py): 0 = edits are plain; N > 0 = every edit runs the task's "
        "visible tests at once and the model sees which fail; the episode ends when the grading tests pass in-session "
        "or after N tested edits.",
    )
    feedback: Literal["rollback", "keep"] = Field(
        "rollback",
        description="What edit feedback does with an edit whose tests fail: 'rollback' undoes it at once (the micro "
        "protocol every learning figure was measured with: one edit fixes a micro task); 'keep' leaves the tree as the "
        "agent made it, so a fix that needs several edits can be assembled, and `undo` is the agent's own choice "
        "(real repositories).",
    )
    view_lines: int = Field(
        60,
        ge=5,
        description="Lines one `view` shows at most (a page); a longer file or function is paged and the observation "
        "names the range to view next. 60 lines of real code are about 600-900 tokens.",
    )
    hack_policy: Literal["zero_reward", "record"] = Field(
        "zero_reward",
        description="What a flag of the patch monitor (engines/env/monitor.py: source changes that reach into pytest "
        "or the interpreter, or truth dunders added to a class) does to a grade: 'zero_reward' grades the patch not "
        "resolved with reward 0 and its note names the rules; 'record' keeps the tests' verdict and only records the "
        "flags (GradeResult.flags, the rollouts' hack_flags), for measuring a monitor's false positives.",
    )
    strict_judge: bool = Field(
        True,
        description="After the tests pass, call the task's functions on the tests' own inputs (and, for micro tasks, "
        "the integers around them) in a sandboxed process without pytest, on the patched and on the fixed code "
        "(engines/env/judge.py): any value that differs, or differs in type, or a different exception grades the "
        "patch not resolved, flag `strict_judge`. Applies to tasks whose original code is known (micro and builder "
        "tasks); false keeps the tests' verdict alone. About one sandbox start per resolved grade.",
    )
    hack_rate_warn: float = Field(
        0.05,
        ge=0,
        le=1,
        description="A rollout step whose hack rate (the share of its graded episodes with any hack flag; the steps "
        "table's `hack_rate`) is above this prints a warning naming the rules flagged most. 0.05: a policy that tries "
        "hacks in more than one episode in twenty is learning them, whatever the reward says; 0 warns on any flagged "
        "episode, 1 never warns.",
    )
    max_patch_bytes: int = Field(
        2_000_000, ge=1024, description="Patches larger than this are graded as failures without being applied (bytes)."
    )
    observation_chars: int = Field(
        6000,
        ge=100,
        description="Longest tool observation the environment returns (characters), a bound on bash and test output; "
        "the cut is stated in the observation. The agent loop then cuts it to "
        "inference.limits.max_observation_tokens tokens of the served model. 6000 holds a 60-line page of real code.",
    )
    scratch_dir: str = Field(
        default_factory=lambda: os.environ.get("TANDEM_ENV_SCRATCH", "/tmp/tandem-env"),
        description="Where writable repository copies are made.",
    )

    @field_validator("python")
    @classmethod
    def _check_python(cls, python: str) -> str:
        return check_python(python)

    @model_validator(mode="after")
    def _check_backend(self) -> EnvConfig:
        if self.backend == "unsandboxed" and not self.allow_unsandboxed:
            raise ValueError(
                "backend='unsandboxed' runs model-written code on the host: set allow_unsandboxed=True "
                "to opt in explicitly, or use backend='bwrap' (install with 'apt-get install bubblewrap')"
            )
        return self

    def worker_count(self) -> int:
        """Workers bounded by cores and by memory (each run may use limits.memory_mb)."""
        if self.workers:
            return self.workers
        cores = len(os.sched_getaffinity(0))
        try:
            avail_mb = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
        except (ValueError, OSError):
            avail_mb = cores * self.limits.memory_mb
        return max(1, min(cores, avail_mb // self.limits.memory_mb))
