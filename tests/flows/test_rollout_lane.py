from collections import namedtuple

from flows.rollout_lane import busy_share

Times = namedtuple("Times", "user system idle iowait")


def test_busy_share_counts_idle_and_iowait_as_free():
    start, end = Times(10, 5, 80, 5), Times(30, 15, 90, 5)
    assert busy_share(start, end) == 0.75  # 30 of 40 core-seconds busy
    assert busy_share(start, Times(10, 5, 90, 15)) == 0.0
    assert busy_share(start, start) == 0.0  # no time elapsed: nothing to divide
