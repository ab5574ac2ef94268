import numpy as np
import pyarrow as pa
import pytest

from engines.trainer.advantages import advantages_record, group_advantages, step_advantages, with_group_advantages


def test_reward_minus_group_mean_by_hand():
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    groups = ["a", "a", "a", "b", "b", "b"]
    out = group_advantages(np.array(rewards), np.array(groups, dtype=object))
    np.testing.assert_allclose(out.advantage, [2 / 3, -1 / 3, -1 / 3, 0, 0, 0])
    assert out.keep.tolist() == [True, True, True, False, False, False]  # group b: no signal


def test_std_scaling_by_hand():
    out = group_advantages(np.array([1.0, 0.0]), np.array(["g", "g"], dtype=object), std_scale=True)
    np.testing.assert_allclose(out.advantage, [1.0, -1.0], atol=1e-5)  # (r - 0.5) / 0.5


def test_negative_advantages_scaled_and_groups_kept_by_their_signal():
    rewards = [1.0, 0.0, 0.0, 0.0, 0.0]
    groups = ["a", "a", "a", "b", "b"]
    out = group_advantages(np.array(rewards), np.array(groups, dtype=object), negative_scale=0.25)
    np.testing.assert_allclose(out.advantage, [2 / 3, -1 / 12, -1 / 12, 0, 0])
    assert out.keep.tolist() == [True, True, True, False, False]
    only_positive = group_advantages(np.array(rewards), np.array(groups, dtype=object), negative_scale=0.0)
    np.testing.assert_allclose(only_positive.advantage, [2 / 3, 0, 0, 0, 0])


def test_infra_failures_left_out_of_statistics_and_training():
    rewards = np.array([1.0, 0.0, 0.0, np.nan])
    failed = np.array([False, False, True, True])
    out = group_advantages(rewards, np.array(["g"] * 4, dtype=object), failed)
    np.testing.assert_allclose(out.advantage[:2], [0.5, -0.5])  # mean over the 2 good episodes only
    assert np.isnan(out.advantage[2:]).all()
    assert out.keep.tolist() == [True, True, False, False]


def test_group_of_one_is_dropped():
    out = group_advantages(np.array([1.0]), np.array(["solo"], dtype=object))
    assert not out.keep.any()


def test_nan_reward_without_infra_flag_is_an_error():
    with pytest.raises(ValueError, match="episode 1.*infra failure"):
        group_advantages(np.array([1.0, np.nan]), np.array(["g", "g"], dtype=object))


def test_arrow_table_filtered_and_advantage_replaced():
    t = pa.table(
        {
            "group_id": ["a", "a", "b", "b", None],
            "reward": [1.0, 0.0, 1.0, 1.0, 1.0],
            "infra_failure": [False, False, False, False, None],
            "advantage": [9.0] * 5,
        }
    )
    out = with_group_advantages(t)
    assert out.column("group_id").to_pylist() == ["a", "a"]
    assert out.column("advantage").to_pylist() == [0.5, -0.5]


def test_the_record_holds_every_episode_with_its_advantage_and_whether_it_trained():
    t = pa.table(
        {
            "task_id": ["t1"] * 3 + ["t2"] * 2,
            "group_id": ["a", "a", "a", "b", "b"],
            "sample_index": [0, 1, 2, 0, 1],
            "reward": [1.0, 0.0, float("nan"), 1.0, 1.0],
            "infra_failure": [False, False, True, False, False],
            "advantage": [9.0] * 5,  # stored values are never read
        }
    )
    adv = step_advantages(t, negative_scale=0.5)
    record = advantages_record(t, adv, "replay", 4, "source").to_pylist()
    assert [r["advantage"] for r in record] == [0.5, -0.25, None, 0.0, 0.0]
    assert [r["trained"] for r in record] == [True, True, False, False, False]
    assert {(r["run_id"], r["step"], r["rollouts_run"]) for r in record} == {("replay", 4, "source")}
    assert with_group_advantages(t, negative_scale=0.5)["advantage"].to_pylist() == [0.5, -0.25]
