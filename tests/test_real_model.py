"""The engine on the real default target, SmolLM2-135M-Instruct (slow: loads ~540 MB of weights)."""

from __future__ import annotations

import pytest

from verispec import SamplingParams, SpeculativeDecoder, load_causal_lm
from verispec.drafters import HybridDrafter, ModelDrafter, PromptLookupDrafter, load_drafter

pytestmark = pytest.mark.slow

PROMPT = "def fibonacci(n):\n    if n < 2:\n        return n\n    return"


@pytest.fixture(scope="module")
def smollm2():
    return load_causal_lm("smollm2-135m")


def test_greedy_speculative_equals_target_only(smollm2):
    greedy = SamplingParams(temperature=0)
    want = SpeculativeDecoder(smollm2, None).generate([PROMPT], 24, greedy)
    for drafter, k in [(PromptLookupDrafter(), 4), (ModelDrafter(smollm2), 3)]:
        got = SpeculativeDecoder(smollm2, drafter, k=k).generate([PROMPT], 24, greedy)
        assert got.token_ids == want.token_ids
        assert got.stats.drafted > 0
    # The target as its own draft accepts every draft token.
    assert got.stats.accepted == got.stats.drafted


def test_chat_prompt_and_gumbel_drafter_invariance(smollm2):
    sp = SamplingParams(temperature=0.8, top_p=0.95, seed=7)
    base = SpeculativeDecoder(smollm2, None, method="gumbel").generate(["Name three colours."], 16, sp, chat=True)
    for drafter in (PromptLookupDrafter(), HybridDrafter(load_drafter("eagle"))):  # point masses; sampled q
        spec = SpeculativeDecoder(smollm2, drafter, k=4, method="gumbel").generate(
            ["Name three colours."], 16, sp, chat=True)
        assert spec.token_ids == base.token_ids
    assert spec.stats.drafted > 0
    assert base.texts[0].strip() != ""
