"""Names of the global concurrency limits tasks take slots from (created, with their
sizes, by flows.prefect_setup)."""

TRAINING_LIMIT = "tandem-training"  # one trainer owns a machine's cores or devices
ROLLOUT_LIMIT = "tandem-rollout"  # one rollout lane owns the vLLM servers it started
