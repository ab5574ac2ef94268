"""The reward curve is a real picture."""

import io

from flows.artifacts import curve_png, slug


def test_curve_is_a_png_of_the_steps():
    from PIL import Image

    png = curve_png([{"step": s, "reward_mean": s / 10, "pass_rate": s / 20} for s in range(10)])
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.size == (700, 350)
    # not blank: the two curves put several colours on the canvas
    assert len(image.convert("RGB").getcolors(maxcolors=100000)) > 10


def test_artifact_keys_are_valid():
    assert slug("Tiny_MoE.v2") == "tiny-moe-v2"
