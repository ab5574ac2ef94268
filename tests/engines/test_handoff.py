"""The lanes' contract (engines/handoff.py): the staleness bound holds for every schedule
of trainer completions, the version poll reports each newer version once, and a run's
context is its lake, its name and its work folder."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engines.handoff import (
    RunContext,
    StalenessError,
    check_episodes,
    follow_versions,
    min_version,
    version_to_use,
    work_dir,
)
from storage import checkpoints
from storage.config import StorageConfig
from storage.fs import Store, open_store


def simulate(num_steps: int, k: int, train_durations: list[int], gen_durations: list[int]) -> list[int]:
    """Discrete-time model of the two lanes; returns the version used for each step.

    The trainer trains step s (taking train_durations[s] ticks) once its shard exists
    and publishes version s + 1; the rollout lane waits via `version_to_use`.
    """
    published = 0
    used: list[int] = []
    shard_done_at: dict[int, int] = {}
    t, step, gen_left, train_step, train_left = 0, 0, None, 0, None
    version = None
    while len(used) < num_steps:
        # trainer lane
        if train_left is None and train_step in shard_done_at:
            train_left = train_durations[train_step]
        if train_left is not None:
            train_left -= 1
            if train_left <= 0:
                published = train_step + 1
                train_step, train_left = train_step + 1, None
        # rollout lane
        if gen_left is None:
            version = version_to_use(step, k, published)
            if version is not None:
                gen_left = gen_durations[step]
        else:
            gen_left -= 1
            if gen_left <= 0:
                used.append(version)
                shard_done_at[step] = t
                step, gen_left = step + 1, None
        t += 1
        assert t < 10_000, "lanes deadlocked"
    return used


@given(
    k=st.integers(0, 3),
    durations=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5)), min_size=1, max_size=12),
)
def test_every_step_respects_the_bound_and_never_deadlocks(k, durations):
    train = [d[0] for d in durations]
    gen = [d[1] for d in durations]
    used = simulate(len(durations), k, train, gen)
    for step, v in enumerate(used):
        assert v >= min_version(step, k)
        check_episodes(step, k, [[v]])


def test_synchronous_waits_for_the_previous_step():
    assert version_to_use(3, 0, 2) is None
    assert version_to_use(3, 0, 3) == 3


def test_async_uses_newest_available():
    assert version_to_use(3, 2, 1) == 1
    assert version_to_use(3, 2, 0) is None
    assert version_to_use(0, 1, None) is None


def test_check_episodes_rejects_old_turns():
    assert check_episodes(5, 1, [[4, 5], [5]]) == 1
    with pytest.raises(StalenessError, match="policy version 3"):
        check_episodes(5, 1, [[4, 3]])


def test_negative_async_level_is_refused():
    with pytest.raises(ValueError, match="async_level"):
        min_version(1, -1)


def _publish(store: Store, run: str, version: int) -> None:
    weights = Path(checkpoints.weights_uri(store, run, version))
    weights.mkdir(parents=True)
    checkpoints.publish(store, run, version, version - 1, str(weights))


def test_the_version_poll_reports_each_newer_version_once(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    published_before_each_poll = iter([None, 0, None, 1, 2, None])

    def running() -> bool:
        version = next(published_before_each_poll, "stopped")
        if isinstance(version, int):
            _publish(store, "r", version)
        return version != "stopped"

    seen: list[int] = []
    assert follow_versions(store, "r", running, seen.append, poll_s=0) == 2
    assert seen == [0, 1, 2]


def test_the_version_poll_of_a_run_without_weights_sees_none(tmp_path: Path) -> None:
    polls = iter([True, True, False])
    assert follow_versions(open_store(str(tmp_path)), "r", lambda: next(polls), print, poll_s=0) == -1


def test_a_run_context_makes_its_work_folder_and_records_settings_not_the_open_lake(tmp_path: Path) -> None:
    storage = StorageConfig(root=str(tmp_path / "lake"))
    store = open_store(storage)
    context = RunContext.open(storage, "r", store)
    assert context.work == work_dir(storage.root, "r") and context.work.is_dir()
    assert context.store is store  # the lake the process opened, not a second one
    record = context.model_dump(mode="json")
    assert set(record) == {"storage", "run", "work"}
    rebuilt = RunContext.model_validate(record)
    assert rebuilt.model_dump() == context.model_dump() and rebuilt.store == store  # reopened from its record
