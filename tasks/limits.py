"""Names of the global concurrency limits the lanes take slots from (created, with
their sizes, by flows.prefect_setup), and the lease a holder keeps renewing."""

TRAINING_LIMIT = "tandem-training"  # one trainer owns a machine's cores or devices
ROLLOUT_LIMIT = "tandem-rollout"  # one rollout lane owns the vLLM servers it started
# A lane holds its slot for its whole life and renews the lease every 3/4 of this; a
# killed lane's slot frees itself this long after its last renewal.
SLOT_LEASE_S = 60.0  # the least Prefect accepts
