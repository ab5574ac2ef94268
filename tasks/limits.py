"""The concurrency limits the lanes take slots from, one pair per run (created, one slot
each, by flows.prefect_setup.ensure_limits), and the lease a holder keeps renewing.

Per run, not per machine or server: two runs on one Prefect server proceed at once,
while one run never has two trainer lanes (or two rollout lanes) alive together, as a
restarted lane beside a predecessor that is not yet gone would be."""

TRAINING_LIMIT = "tandem-training"  # one trainer lane per run: one writer of its weights
ROLLOUT_LIMIT = "tandem-rollout"  # one rollout lane per run: one writer of its shards
RUN_LIMIT = "tandem-run"  # held by the rl flow while its lanes run elsewhere: its liveness (flows/parent_watch.py)
# A lane holds its slot for its whole life and renews the lease every 3/4 of this; a
# killed lane's slot frees itself this long after its last renewal.
SLOT_LEASE_S = 60.0  # the least Prefect accepts


def training_limit(run: str) -> str:
    """The name of `run`'s training limit."""
    return f"{TRAINING_LIMIT}:{run}"


def rollout_limit(run: str) -> str:
    """The name of `run`'s rollout limit."""
    return f"{ROLLOUT_LIMIT}:{run}"


def run_limit(run: str) -> str:
    """The name of `run`'s liveness limit."""
    return f"{RUN_LIMIT}:{run}"


def run_limits(run: str) -> dict[str, int]:
    """`run`'s limits: name -> slots."""
    return {training_limit(run): 1, rollout_limit(run): 1, run_limit(run): 1}
