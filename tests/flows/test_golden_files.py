"""The whole loop's golden files: one per CPU kernel family, each a full curve."""

import json

from tests.flows.whole_loop import ROLLOUT_KEYS, STEPS, TRAINER_KEYS, golden_path, kernel_family

AMX = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX512 = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw\n"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse avx avx2 fma\n"
AVX512_BF16 = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 avx512_vnni\n"


def test_kernel_family_from_the_cpu_flags():
    assert kernel_family(AMX) == "amx"
    assert kernel_family(AVX512) == "default"
    assert kernel_family(AVX512_BF16) == "avx512_bf16"
    assert kernel_family(AVX2) == "avx2"
    assert kernel_family("") == "default"


def test_every_family_has_a_whole_curve():
    for family in ("default", "amx", "avx512_bf16", "avx2"):
        curve = json.loads(golden_path(family).read_text())
        assert [s["policy_version"] for s in curve] == list(range(STEPS)), family
        for step in curve:
            assert set(ROLLOUT_KEYS) | set(TRAINER_KEYS) <= set(step), (family, step)
