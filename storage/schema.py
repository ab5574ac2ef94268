"""Arrow schemas of the lake's tables, and their version check.

Every file carries `tandem.table` and `tandem.schema_version` in its Parquet
metadata. Readers accept any version up to `SCHEMA_VERSION` and refuse newer ones,
so an old install never misreads a newer run. Column meanings are in the field
metadata (`doc`), visible to any Parquet tool.
"""

from __future__ import annotations

import pyarrow as pa

from storage.errors import SchemaVersionError

# 1: first release. 2: hive partition keys only in folder names (storage/partition.py);
# rollouts gain `patch`; new tables `runs` and `rescores`. A new table needs no new
# version (`advantages`, `evaluations`, `experiments` came later): older readers never
# list its folder, and no file they read changes. 3: rollouts gain `valid_actions` and
# `hack_flags` (an older reader would refuse the unknown columns; files of 2 read here
# with them null).
SCHEMA_VERSION = 3
TABLE_KEY = b"tandem.table"
VERSION_KEY = b"tandem.schema_version"

_TS = pa.timestamp("us", tz="UTC")


def _f(name: str, type_: pa.DataType, doc: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable=nullable, metadata={"doc": doc})


def _schema(table: str, fields: list[pa.Field]) -> pa.Schema:
    return pa.schema(fields, metadata={TABLE_KEY: table.encode(), VERSION_KEY: str(SCHEMA_VERSION).encode()})


ROLLOUTS = _schema(
    "rollouts",
    [
        _f("run_id", pa.string(), "run name", nullable=False),
        _f("step", pa.int64(), "training step this episode feeds", nullable=False),
        _f("policy_versions", pa.list_(pa.int64()), "weight version that generated each model turn"),
        _f("min_policy_version", pa.int64(), "oldest version among policy_versions (staleness = step - this)"),
        _f("task_id", pa.string(), "task instance id", nullable=False),
        _f("group_id", pa.string(), "episodes sharing a group are compared for the advantage"),
        _f("sample_index", pa.int32(), "index of this episode within its group"),
        _f("env_name", pa.dictionary(pa.int32(), pa.string()), "environment that served the task"),
        _f("prompt_ids", pa.list_(pa.int32()), "token ids of the first prompt"),
        _f("completion_ids", pa.list_(pa.int32()), "every token after the prompt: model turns and observations"),
        _f("loss_mask", pa.list_(pa.bool_()), "per completion token: true for model tokens, false for observations"),
        _f("completion_logprobs", pa.list_(pa.float32()), "per completion token inference logprob (0 where masked)"),
        _f(
            "routed_experts",
            pa.large_binary(),
            "uint8/uint16 experts [tokens, layers, top_k], C order; null if not recorded",
        ),
        _f("routed_experts_shape", pa.list_(pa.int32(), 3), "[tokens, layers, top_k] of routed_experts"),
        _f("num_prompt_tokens", pa.int32(), "len(prompt_ids)"),
        _f("num_completion_tokens", pa.int32(), "len(completion_ids)"),
        _f("reward", pa.float64(), "scalar reward from the grader"),
        _f(
            "advantage",
            pa.float64(),
            "not written by current runs (null): the advantages the trainer used are in the `advantages` table; "
            "older runs hold the rollout lane's plain group baseline here, not what was trained on",
        ),
        _f("resolved", pa.bool_(), "every FAIL_TO_PASS and PASS_TO_PASS test passed"),
        _f("f2p_passed", pa.int32(), "FAIL_TO_PASS tests passing after the patch"),
        _f("f2p_total", pa.int32(), "FAIL_TO_PASS tests of the task"),
        _f("p2p_passed", pa.int32(), "PASS_TO_PASS tests passing after the patch"),
        _f("p2p_total", pa.int32(), "PASS_TO_PASS tests of the task"),
        _f("test_report", pa.string(), "JSON: test id -> status, from the grader"),
        _f(
            "hack_flags",
            pa.list_(pa.string()),
            "rules the patch monitor (engines/env/monitor.py) flagged on the graded patch, empty when none; "
            "null before schema version 3",
        ),
        _f(
            "patch", pa.string(), "the agent's final patch (unified diff) that was graded; null before schema version 2"
        ),
        _f("num_turns", pa.int32(), "model turns in the episode"),
        _f(
            "valid_actions",
            pa.int32(),
            "model turns that were valid actions (text actions or tool calls, reasoning set aside); "
            "null before schema version 3",
        ),
        _f(
            "finish_reason",
            pa.dictionary(pa.int32(), pa.string()),
            "submitted | max_turns | max_tokens | timeout | error",
        ),
        _f("generation_s", pa.float64(), "seconds spent generating"),
        _f("grading_s", pa.float64(), "seconds spent grading"),
        _f("infra_failure", pa.bool_(), "true when the harness failed (not the model); left out of group statistics"),
        _f("infra_message", pa.string(), "what failed in the harness"),
        _f("started_at", _TS, "episode start (UTC)"),
        _f("finished_at", _TS, "episode end (UTC)"),
        _f("conversation", pa.string(), "the rendered conversation, for humans"),
    ],
)

STEPS = _schema(
    "steps",
    [
        _f("run_id", pa.string(), "run name", nullable=False),
        _f("step", pa.int64(), "training step", nullable=False),
        _f("policy_version", pa.int64(), "weight version after this step"),
        _f("num_episodes", pa.int64(), "episodes in the step's shard"),
        _f("num_trained_episodes", pa.int64(), "episodes left after dropping zero-advantage groups"),
        _f("reward_mean", pa.float64(), "mean reward of the step's episodes"),
        _f("pass_rate", pa.float64(), "fraction of episodes resolved"),
        _f("staleness_max", pa.int64(), "max over episodes of step - min_policy_version"),
        _f("completion_tokens", pa.int64(), "completion tokens generated for the step"),
        _f("trained_tokens", pa.int64(), "loss tokens in the optimizer step"),
        _f("generation_s", pa.float64(), "wall seconds of the rollout for this step"),
        _f("training_s", pa.float64(), "wall seconds of the optimizer step"),
        _f("loss", pa.float64(), "RL loss"),
        _f("mismatch_kl", pa.float64(), "KL(inference || trainer) on loss tokens"),
        _f("masked_fraction", pa.float64(), "fraction of loss tokens masked by the ratio bounds"),
        _f("entropy", pa.float64(), "mean token entropy of the trainer's policy"),
        _f("grad_norm", pa.float64(), "gradient norm before clipping"),
        _f("skipped", pa.bool_(), "true when the optimizer step was skipped (no tokens, NaN loss)"),
        _f("extra", pa.map_(pa.string(), pa.float64()), "other metrics by name"),
        _f("written_at", _TS, "when this row was written (UTC)"),
    ],
)

TASKS = _schema(
    "tasks",
    [
        _f("instance_id", pa.string(), "unique task id (SWE-bench instance_id)", nullable=False),
        _f("repo", pa.string(), "project the task comes from, e.g. toolz"),
        _f("version", pa.string(), "project version (sdist version)"),
        _f("base_commit", pa.string(), "content hash of the base snapshot the patches apply to"),
        _f("problem_statement", pa.string(), "what the agent is told"),
        _f("patch", pa.string(), "gold patch (unified diff)"),
        _f("test_patch", pa.string(), "patch adding or changing tests (may be empty)"),
        _f("FAIL_TO_PASS", pa.list_(pa.string()), "tests that must go from failing to passing"),
        _f("PASS_TO_PASS", pa.list_(pa.string()), "tests that must keep passing"),
        _f("test_cmd", pa.string(), "command that runs the tests (test ids appended)"),
        _f("log_parser", pa.string(), "SWE-bench log parser name that derived the test ids"),
        _f("env_name", pa.string(), "micro | swe"),
        _f("split", pa.string(), "train | heldout"),
        _f("snapshot_uri", pa.string(), "where the base snapshot's files are"),
        _f("metadata", pa.string(), "JSON: bug kind, mutated file and line, etc."),
    ],
)

CHECKPOINTS = _schema(
    "checkpoints",
    [
        _f("run_id", pa.string(), "run name", nullable=False),
        _f("version", pa.int64(), "weight version (v = step + 1 after step s)", nullable=False),
        _f("step", pa.int64(), "training step that produced it"),
        _f("uri", pa.string(), "where the weights are"),
        _f("format", pa.string(), "safetensors | safetensors-fp8 | accelerate-state"),
        _f("created_at", _TS, "publication time (UTC)"),
    ],
)

RUNS = _schema(
    "runs",
    [
        _f("run_id", pa.string(), "run name", nullable=False),
        _f("start", pa.int64(), "0 for the run's first start, then one more per resume", nullable=False),
        _f("kind", pa.string(), "rl | replay-train | rescore"),
        _f("started_at", _TS, "when this start began (UTC)"),
        _f("config", pa.string(), "JSON: the resolved configuration of this start (every field, defaults included)"),
        _f("code_version", pa.string(), "git:<commit>[+dirty] of the checkout, else tandem-rl <package version>"),
        _f("corpus_id", pa.string(), "sha256 of the task corpus's rows (same tasks -> same id, wherever stored)"),
        _f("corpus_path", pa.string(), "where the corpus was read from"),
        _f("num_tasks", pa.int64(), "tasks in the corpus"),
        _f("source_root", pa.string(), "lake root of the run whose trajectories this run reuses (replays)"),
        _f("source_run", pa.string(), "run whose trajectories this run reuses; null for a run that generated its own"),
        _f("source_steps", pa.list_(pa.int64()), "steps of source_run this run reads"),
    ],
)

RESCORES = _schema(
    "rescores",
    [
        _f("run_id", pa.string(), "the rescore run's name", nullable=False),
        _f("step", pa.int64(), "step of the source run the episode belongs to", nullable=False),
        _f("source_run", pa.string(), "run whose stored patches were re-graded", nullable=False),
        _f("task_id", pa.string(), "task instance id"),
        _f("group_id", pa.string(), "group of the episode in the source run"),
        _f("sample_index", pa.int32(), "index of the episode within its group"),
        _f("stored_reward", pa.float64(), "reward stored by the source run (NaN: infrastructure failure)"),
        _f("stored_resolved", pa.bool_(), "resolved as stored by the source run"),
        _f("reward", pa.float64(), "reward from the current grader (NaN: infrastructure failure)"),
        _f("resolved", pa.bool_(), "resolved according to the current grader"),
        _f("f2p_passed", pa.int32(), "FAIL_TO_PASS tests passing now"),
        _f("f2p_total", pa.int32(), "FAIL_TO_PASS tests of the task"),
        _f("p2p_passed", pa.int32(), "PASS_TO_PASS tests passing now"),
        _f("p2p_total", pa.int32(), "PASS_TO_PASS tests of the task"),
        _f("test_report", pa.string(), "JSON: test id -> status, from the current grader"),
        _f("agrees", pa.bool_(), "reward equals stored_reward (both NaN counts as agreeing)"),
        _f("infra_failure", pa.bool_(), "the harness failed while re-grading"),
        _f("infra_message", pa.string(), "what failed in the harness"),
        _f("grading_s", pa.float64(), "seconds spent re-grading"),
    ],
)

ADVANTAGES = _schema(
    "advantages",
    [
        _f("run_id", pa.string(), "the run whose trainer used these advantages", nullable=False),
        _f("step", pa.int64(), "training step", nullable=False),
        _f("rollouts_run", pa.string(), "run whose rollouts hold the episode (the source run of a replay)"),
        _f("task_id", pa.string(), "task instance id"),
        _f("group_id", pa.string(), "group the advantage is relative to"),
        _f("sample_index", pa.int32(), "index of the episode within its group"),
        _f("reward", pa.float64(), "reward the advantage was computed from (NaN: infrastructure failure)"),
        _f("advantage", pa.float64(), "advantage the trainer gave the episode's loss tokens; null: infra failure"),
        _f("trained", pa.bool_(), "in the optimizer step's batch (false: infra failure or a group without signal)"),
    ],
)

EVALUATIONS = _schema(
    "evaluations",
    [
        _f("run_id", pa.string(), "run whose weights were evaluated", nullable=False),
        _f("version", pa.int64(), "weight version evaluated", nullable=False),
        _f("evaluation", pa.string(), "which evaluation of the run: before | after (the rl flow), evaluate (the flow)"),
        _f("pass", pa.string(), "greedy (temperature 0, pass@1) | sampled (rollout temperature, pass@k)"),
        _f("task_id", pa.string(), "held-out task instance id"),
        _f("sample_index", pa.int32(), "index of the sample of the task (always 0 for greedy)"),
        _f("attempts", pa.int32(), "edits tested in the episode (engines/rollout/attempts.py)"),
        _f("first_attempt_passed", pa.bool_(), "the first tested edit resolved the task"),
        _f("repeats", pa.int32(), "attempts identical to an earlier failed attempt"),
        _f("resolved", pa.bool_(), "every FAIL_TO_PASS and PASS_TO_PASS test passed"),
        _f("reward", pa.float64(), "reward from the grader (NaN: infrastructure failure)"),
        _f("patch", pa.string(), "the final patch that was graded (unified diff)"),
        _f("num_turns", pa.int32(), "model turns in the episode"),
        _f("finish_reason", pa.string(), "submitted | max_turns | max_tokens | timeout | error"),
        _f("infra_failure", pa.bool_(), "the harness failed, not the model"),
        _f("conversation", pa.string(), "the rendered conversation, for humans"),
        _f("written_at", _TS, "when the evaluation was written (UTC)"),
    ],
)

# Lake-level (not per run): one row per experiment of the learning lab, appended.
EXPERIMENTS = _schema(
    "experiments",
    [
        _f("name", pa.string(), "the experiment's name (the design measured)", nullable=False),
        _f("settings", pa.string(), "JSON: the mode, the runs' lake and names, and the resolved run configuration"),
        _f(
            "figures",
            pa.string(),
            "JSON: held-out greedy and first-attempt pass@1 before and after, the gain, McNemar's p, "
            "and the gain's 95% paired-bootstrap interval",
        ),
        _f("code_version", pa.string(), "git:<commit>[+dirty] of the checkout, else tandem-rl <package version>"),
        _f("started_at", _TS, "when the experiment started (UTC)"),
        _f("wall_s", pa.float64(), "wall seconds of the whole experiment"),
    ],
)

SCHEMAS: dict[str, pa.Schema] = {
    "rollouts": ROLLOUTS,
    "steps": STEPS,
    "tasks": TASKS,
    "checkpoints": CHECKPOINTS,
    "runs": RUNS,
    "rescores": RESCORES,
    "advantages": ADVANTAGES,
    "evaluations": EVALUATIONS,
    "experiments": EXPERIMENTS,
}


def check_version(metadata: dict[bytes, bytes] | None, where: str) -> int:
    """Return the schema version of a file; refuse versions newer than ours."""
    raw = (metadata or {}).get(VERSION_KEY)
    version = int(raw) if raw else 0
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{where} was written with schema version {version}, newer than this "
            f"tandem-rl understands ({SCHEMA_VERSION}). Upgrade tandem-rl to read it."
        )
    return version


def conform(table: pa.Table, kind: str) -> pa.Table:
    """Cast `table` to the schema of `kind`, filling absent nullable columns with nulls.

    Raises ValueError naming the columns that are unknown or required but absent.
    """
    schema = SCHEMAS[kind]
    unknown = sorted(set(table.column_names) - set(schema.names))
    if unknown:
        raise ValueError(f"{kind}: unknown columns {unknown}; allowed: {schema.names}")
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(_cast(table.column(field.name), field, kind))
        elif field.nullable:
            columns.append(pa.nulls(table.num_rows, field.type))
        else:
            raise ValueError(f"{kind}: required column {field.name!r} is missing")
    return pa.Table.from_arrays(columns, schema=schema)


def _cast(column: pa.ChunkedArray, field: pa.Field, kind: str) -> pa.ChunkedArray:
    try:
        return column.cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(
            f"{kind}.{field.name}: cannot store {column.type} as {field.type} ({exc}); "
            f"give {field.name} values of type {field.type}"
        ) from exc
