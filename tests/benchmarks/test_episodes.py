"""benchmarks/episodes.py: the replayed turns are the episode's own requests."""

from benchmarks.episodes import turn_requests
from engines.inference.types import Episode


def test_each_model_turn_is_replayed_with_its_context_and_length():
    # prompt [1, 2]; turn one (10 11 12), an observation (20 21), turn two (13 14), a cut tail (22)
    episode = Episode(
        task_id="t",
        group_id="g",
        sample_index=0,
        prompt_ids=[1, 2],
        completion_ids=[10, 11, 12, 20, 21, 13, 14, 22],
        loss_mask=[True, True, True, False, False, True, True, False],
    )
    assert turn_requests(episode) == [([1, 2], 3), ([1, 2, 10, 11, 12, 20, 21], 2)]
    last_turn_open = Episode(
        task_id="t", group_id="g", sample_index=0, prompt_ids=[1], completion_ids=[5, 6], loss_mask=[True, True]
    )
    assert turn_requests(last_turn_open) == [([1], 2)]
