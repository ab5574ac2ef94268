"""Evaluation's progress lines: one at every tenth of a pass and one at its end."""

from engines.rollout.evaluate import episode_counter


def test_progress_is_reported_at_every_tenth_and_at_the_end() -> None:
    lines: list[str] = []
    count = episode_counter("v0 greedy", 25, lines.append)
    assert count is not None
    for _ in range(25):
        count(None)  # the episode itself is not read
    assert lines == [f"[eval] v0 greedy {n}/25 episodes" for n in (2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 25)]


def test_no_callback_without_a_listener_or_episodes() -> None:
    assert episode_counter("v0 greedy", 25, None) is None
    assert episode_counter("v0 sampled", 0, print) is None
