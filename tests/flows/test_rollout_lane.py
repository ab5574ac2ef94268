from collections import namedtuple

from flows.rollout_lane import busy_share

Times = namedtuple("Times", "user system idle iowait")


def test_busy_share_counts_idle_and_iowait_as_free():
    start, end = Times(10, 5, 80, 5), Times(30, 15, 90, 5)
    assert busy_share(start, end) == 0.75  # 30 of 40 core-seconds busy
    assert busy_share(start, Times(10, 5, 90, 15)) == 0.0
    assert busy_share(start, start) == 0.0  # no time elapsed: nothing to divide


def test_prefect_passes_a_lane_to_its_tasks_without_walking_it():
    """Why no task argument needs quote(): Prefect looks for futures inside dataclass,
    list and dict arguments (about 1 s per call with thousands of tasks), not inside
    a plain object such as the lane."""
    from prefect.utilities.collections import visit_collection

    from engines.rollout.lane import RolloutLane, RolloutSettings

    tasks = [object()] * 1000
    lane = RolloutLane(
        None, "r", None, None, None, None, None, RolloutSettings(1, 2, 0, 1), train_tasks=tasks, weights=None
    )
    seen = []
    visit_collection(lane, lambda x: seen.append(x) or x, return_data=False)
    assert seen == [lane]


def test_a_step_of_infra_failures_only_shows_no_reward():
    from flows.rollout_lane import step_line

    m = dict(policy_version=3, reward_mean=None, pass_rate=None, completion_tokens=0)
    m.update(generation_s=1.0, grading_s=0.0, weight_update_s=0.0, wait_s=0.0)
    assert step_line(m).startswith("v3 reward=n/a pass=n/a gen=1.0s")


def test_the_step_line_shows_the_hack_rate_only_when_an_episode_was_flagged():
    from flows.rollout_lane import step_line

    m = dict(policy_version=3, reward_mean=0.5, pass_rate=0.25, completion_tokens=9)
    m.update(generation_s=1.0, grading_s=0.0, weight_update_s=0.0, wait_s=0.0)
    assert step_line({**m, "hack_rate": 0.125}).startswith("v3 reward=0.500 pass=0.250 hack=0.125 gen=1.0s")
    for clean in (0.0, None):  # none flagged, or not recorded (shards before schema version 3)
        assert "hack" not in step_line({**m, "hack_rate": clean})
    assert "hack" not in step_line(m)
