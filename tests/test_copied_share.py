"""Which drafts the target accepted came from prompt lookup (copied from the context) and which
from a model: ``GenerationStats.copied_*``, counted through the engine and taken back with the
tokens an EOS or a stop string drops."""

from __future__ import annotations

import math

import torch

from verispec.drafters import HybridDrafter, ModelDrafter, PromptLookupDrafter
from verispec.engine import SpeculativeDecoder, accepted_slot
from verispec.engine.stats import BONUS, GenerationStats, copied_origin, residual_origin, uncount
from verispec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)
REPEAT = "one two three four five six seven eight nine ten " * 3


def test_lookup_alone_copies_every_draft_and_a_model_none(tiny_target, tiny_draft) -> None:
    lookup = SpeculativeDecoder(tiny_target, PromptLookupDrafter(), k=4).generate([REPEAT], 40, GREEDY).stats
    assert lookup.accepted > 0
    assert (lookup.copied_accepted, lookup.copied_drafted) == (lookup.accepted, lookup.drafted)
    assert lookup.copied_share == 1.0
    # a stop string in the middle of the text drops the accepted copies after it, from both counts
    dec = SpeculativeDecoder(tiny_target, PromptLookupDrafter(), k=4)
    text = dec.generate([REPEAT], 40, GREEDY).texts[0]
    cut = dec.generate([REPEAT], 40, GREEDY, stop=[text[len(text) // 2:][:4]]).stats
    assert 0 < cut.accepted < lookup.accepted and cut.copied_accepted == cut.accepted
    model = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k=4).generate([REPEAT], 40, GREEDY).stats
    assert model.drafted > 0 and (model.copied_accepted, model.copied_drafted) == (0, 0)


class _Recorder(HybridDrafter):
    """The hybrid, keeping each proposal (the engine cuts it in place) to recount its outcome."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.proposals = []
        self.recount = {"copy": 0, "model": 0}

    def propose(self, ask):
        d = super().propose(ask)
        self.proposals.append(d)
        return d

    def update(self, emitted, features=None) -> None:
        d = self.proposals[-1]
        for b, new in enumerate(emitted):  # greedy: a draft passed iff it is the token emitted there
            n = int(d.num_draft[b])
            passed = next((i for i in range(n) if i >= len(new) or int(d.tokens[b, i]) != new[i]), n)
            # a copied row's drafts carry the lookup's estimates, a model row's none (NaN)
            copy = n > 0 and not math.isnan(float(d.accept_prob[b, 0]))
            self.recount["copy" if copy else "model"] += passed
        super().update(emitted, features)


def test_hybrid_counts_equal_a_recount_of_each_pass(tiny_target, tiny_draft) -> None:
    h = _Recorder(ModelDrafter(tiny_draft), model_prior=0.3)
    prompts = [REPEAT, "a b c d e f g", "ten nine eight " * 4]
    st = SpeculativeDecoder(tiny_target, h, k=4).generate(prompts, 48, GREEDY).stats
    assert h.recount["copy"] > 0 and h.recount["model"] > 0  # both sources drafted accepted tokens
    assert st.copied_accepted == h.recount["copy"]
    assert st.accepted == h.recount["copy"] + h.recount["model"]
    assert 0 < st.copied_share < 1 and st.as_dict()["copied_accepted"] == st.copied_accepted


def test_dropped_copied_drafts_are_taken_back() -> None:
    st = GenerationStats(accepted=5, rejected=1, copied_accepted=3, slot_tested=[2, 2, 2], slot_accepted=[2, 2, 1])
    # a row ends inside a pass: copied drafts at slots 1 and 2 (codes), then the bonus
    uncount(st, [copied_origin(1), copied_origin(2), BONUS])
    assert (st.accepted, st.copied_accepted, st.slot_accepted, st.slot_tested) == (3, 1, [2, 1, 0], [2, 1, 1])
    uncount(st, [0, residual_origin(1)])  # a model draft and a residual: nothing copied
    assert (st.accepted, st.copied_accepted, st.rejected) == (2, 1, 0)


def test_accepted_slot_reads_both_codes() -> None:
    assert [accepted_slot(o) for o in (0, 3, copied_origin(0), copied_origin(5), BONUS, residual_origin(2))] == \
        [0, 3, 0, 5, None, None]
