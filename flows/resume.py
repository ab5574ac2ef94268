"""Resume safety: a re-run with the same run name continues the stored run only when
it asks for the same thing.

The first start of a run stores its resolved configuration in the lake (the `runs`
table). A later start under the same name is compared with the newest stored start,
key by key: only the step count (`rl.steps`, to extend or shorten a run), where
the lanes run (`lanes.*`, and on which GPUs: `inference.devices`, `trainer.devices`,
`trainer.share_devices`) and the override itself may differ. Anything else would mix two experiments in one run's
rollouts and curves, so it is refused with every differing key listed, unless the
configuration sets `allow_config_change = true`.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from storage import runs
from storage.fs import Store

# Where the lanes run changes no result: a run may resume on other machines, or other GPUs.
_PLACEMENT = {
    *(f"lanes.{k}" for k in ("rollout_deployment", "trainer_deployment", "max_restarts", "poll_interval_s")),
    *("inference.devices", "trainer.devices", "trainer.share_devices"),
}
MAY_DIFFER = frozenset({"rl.steps", "allow_config_change", *_PLACEMENT})


class ConfigChangedError(ValueError):
    """A re-run whose configuration differs from the stored run's; the message lists the keys."""


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"rl": {"steps": 5}} -> {"rl.steps": 5}; lists and scalars are leaves."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{dotted}."))
        else:
            out[dotted] = value
    return out


def config_changes(
    stored: dict[str, Any], current: dict[str, Any], may_differ: frozenset[str] = MAY_DIFFER
) -> list[str]:
    """`key: stored -> current` for every key that differs, except `may_differ`."""
    old, new = flatten(stored), flatten(current)
    missing = "(absent)"
    return [
        f"{key}: {json.dumps(old.get(key, missing))} -> {json.dumps(new.get(key, missing))}"
        for key in sorted(old.keys() | new.keys())
        if key not in may_differ and old.get(key, missing) != new.get(key, missing)
    ]


def check_resume(
    store: Store, run: str, config: BaseModel, allow_change: bool, may_differ: frozenset[str] = MAY_DIFFER
) -> list[str]:
    """Refuse to resume `run` with a configuration other than its stored one; returns
    the differences that `allow_change` let through (empty for a new or matching run).
    `may_differ`: keys that never count (the step count of the run's kind)."""
    previous = runs.latest_start(store, run)
    if previous is None or not previous.get("config"):
        return []
    changes = config_changes(json.loads(previous["config"]), json.loads(config.model_dump_json()), may_differ)
    if changes and not allow_change:
        steps = " or ".join(sorted(may_differ - {"allow_config_change"} - _PLACEMENT))
        listing = "\n".join(f"  - {c}" for c in changes)
        raise ConfigChangedError(
            f"run {run!r} under {store.display} was started with another configuration; "
            f"{len(changes)} key{'s differ' if len(changes) > 1 else ' differs'} (stored -> now):\n{listing}\n"
            f"Use a new run name (--run NAME) for a new experiment, change only {steps} to resume it, "
            "or pass --allow_config_change true to continue it with the new values anyway."
        )
    return changes
