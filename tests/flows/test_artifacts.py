"""The run's own report: the reward curve is a real picture that marks the held-out
evaluations, and the summary shows p-values as numbers, not 0.0."""

import io

from flows.artifacts import EVAL_COLOR, curve_png, evaluation_marks, slug, summary_markdown


def test_curve_is_a_png_of_the_steps():
    from PIL import Image

    png = curve_png([{"step": s, "reward_mean": s / 10, "pass_rate": s / 20} for s in range(10)])
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.size == (700, 350)
    # not blank: the two curves put several colours on the canvas
    assert len(image.convert("RGB").getcolors(maxcolors=100000)) > 10


def test_artifact_keys_are_valid():
    assert slug("Tiny_MoE.v2") == "tiny-moe-v2"


def _eval_pixels(png: bytes) -> int:
    """Pixels drawn in the evaluations' colour (flows/artifacts.py: EVAL_COLOR)."""
    from PIL import Image

    rgb = tuple(int(EVAL_COLOR[i : i + 2], 16) for i in (1, 3, 5))
    return sum(
        n for n, colour in Image.open(io.BytesIO(png)).convert("RGB").getcolors(maxcolors=100000) if colour == rgb
    )


def test_the_curve_marks_the_evaluations_before_and_after_rl():
    steps = [{"step": s, "reward_mean": s / 10, "pass_rate": s / 20} for s in range(10)]
    assert evaluation_marks(steps, 0.188, 0.358) == [
        ("held-out before RL 0.188", 0.0, 0.188),
        ("held-out after RL 0.358", 10.0, 0.358),  # the last version, one past the last step
    ]
    assert evaluation_marks(steps, 0.188) == [("held-out before RL 0.188", 0.0, 0.188)]  # a run under way
    plain, before, both = curve_png(steps), curve_png(steps, 0.188), curve_png(steps, 0.188, 0.358)
    assert _eval_pixels(plain) == 0
    assert 0 < _eval_pixels(before) < _eval_pixels(both)


def test_the_summary_shows_p_values_in_scientific_notation():
    summary = {
        "pass@1 gain (points)": 17.0,
        "p-value (exact McNemar, paired)": 3.9e-14,
        "p-value on held-out projects (exact McNemar, paired)": 0.23,
        "cpu busy share": 0.123456,
    }
    table = summary_markdown("r", "runs", summary)
    assert "| p-value (exact McNemar, paired) | 3.90e-14 |" in table  # not rounded to 0.0
    assert "| p-value on held-out projects (exact McNemar, paired) | 2.30e-01 |" in table
    assert "| cpu busy share | 0.1235 |" in table and "| pass@1 gain (points) | 17.0 |" in table
