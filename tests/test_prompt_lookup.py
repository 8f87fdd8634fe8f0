"""Prompt lookup: which match it copies, its acceptance estimates, and the engine's cut."""

from __future__ import annotations

import math

import pytest
import torch

from verispec.drafters import DraftAsk, HybridDrafter, ModelDrafter, PromptLookupDrafter
from verispec.engine import SpeculativeDecoder
from verispec.engine.costs import PassCosts
from verispec.engine.kpolicy import KRows
from verispec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)


def started(prompts, **kw) -> PromptLookupDrafter:
    d = PromptLookupDrafter(**kw)
    d.start(prompts)
    return d


def ask(k: list[int]) -> DraftAsk:
    return DraftAsk.of(k, 100, GREEDY, dtype=torch.float64)


def test_match_prefers_the_longest_then_the_most_recent():
    #          0  1  2  3  4  5  6  7  8  9 10 11
    context = [5, 1, 2, 3, 9, 8, 2, 3, 7, 1, 2, 3]
    d = started([context])
    assert d.match(context) == (4, 3)  # "1 2 3" at 1..3 beats the more recent "2 3" at 6..7
    assert started([context], max_ngram=2).match(context) == (8, 2)  # capped at 2: the most recent "2 3"
    assert started([context], min_ngram=4).match(context) == (-1, 0)
    assert d.match([4, 4, 4]) == (2, 2)  # "4 4" at 0..1 overlaps the tail; it continues with context[2]
    assert d.match([1, 2]) == (-1, 0) and d.match([1]) == (-1, 0)


def test_proposal_carries_the_prior_then_learns_from_what_was_emitted():
    context = [1, 2, 3, 4, 5, 6, 7, 1, 2, 3]  # tail "1 2 3" matches: continuation 4 5 6 7 ...
    d = started([context], prior_strength=2.0)
    prior = torch.tensor(PromptLookupDrafter.ACCEPT_PRIOR, dtype=torch.float64)
    draft = d.propose(ask([4]))
    assert draft.tokens[0].tolist() == [4, 5, 6, 7] and draft.num_draft.tolist() == [4]
    assert draft.probs is None  # point masses
    torch.testing.assert_close(draft.accept_prob[0], prior[2:6])  # match lengths 3, 4, 5, 6 (index m - 1)

    d.update([[4, 5, 0]])  # 4 and 5 emitted as copied, then something else
    want = [(prior[2] * 2 + 1) / 3, (prior[3] * 2 + 1) / 3, (prior[4] * 2 + 0) / 3]  # 2 passes, 1 failure
    assert d.tried[0, 2:5].tolist() == [1, 1, 1] and d.passed[0, 2:5].tolist() == [1, 1, 0]
    assert d.tried[0, 5] == 0  # nothing known about the 4th token: the row stopped before it
    d.start([context])
    d.propose(ask([4]))
    assert d.tried.sum() == 0  # a new batch starts from the prior
    d2 = started([context], prior_strength=2.0)
    d2.propose(ask([4]))
    d2.update([[4, 5, 0]])
    d2.contexts[0][:] = context  # the same match again, to read the updated estimates
    again = d2.propose(ask([3])).accept_prob[0]
    torch.testing.assert_close(again, torch.stack(want).to(torch.float64))


def test_no_match_drafts_nothing():
    d = started([[1, 2, 3], [7, 7]])
    draft = d.propose(ask([4, 4]))
    assert draft.num_draft.tolist() == [0, 1]
    assert math.isnan(draft.accept_prob[0, 0]) and not math.isnan(draft.accept_prob[1, 0])


def _policy(costs: dict[int, float]) -> tuple[KRows, PassCosts]:
    policy = KRows(12)
    policy.add(["auto"] * 3)
    return policy, PassCosts(dict(costs))


def test_cut_keeps_the_prefix_with_the_best_expected_rate():
    # width 1 and 2 cost the same, every further slot +50%: only a near-certain token pays.
    policy, costs = _policy({1: 1.0, 2: 1.0, 3: 1.5, 4: 2.0, 5: 2.5})
    a = torch.tensor([[0.9, 0.99, 0.99, 0.99], [0.3, 0.3, 0.3, 0.3], [0.9, 0.1, float("nan"), 0.5]], dtype=torch.float64)
    n, cut = policy.cut(torch.tensor([4, 4, 2]), a, costs)
    # row 0: E = 1, 1.9, 2.78, 3.65, 4.51 over costs 1, 1, 1.5, 2, 2.5 -> K = 1 (1.9 per unit)
    # row 1: K = 1 (1.3 per unit beats 1.39/1.5); row 2: its NaN lies past its 2 drafts -> scored, K = 1
    assert n.tolist() == [1, 1, 1] and cut.tolist() == [True, True, True]
    flat, flat_costs = _policy({1: 1.0, 8: 1.0})
    n, _ = flat.cut(torch.tensor([4, 4, 0]), a, flat_costs)
    assert n.tolist() == [4, 4, 0]  # free verification: verify everything drafted (row 2: nothing)


def test_cut_leaves_unscored_rows_alone():
    policy, costs = _policy({1: 1.0, 2: 5.0})
    policy.keep(torch.tensor([0, 1]))
    a = torch.tensor([[float("nan"), 0.9], [0.0, 0.0]], dtype=torch.float64)
    n, cut = policy.cut(torch.tensor([2, 2]), a, costs)
    assert n.tolist() == [2, 0] and cut.tolist() == [False, True]  # a model row keeps its K


def test_auto_lets_a_long_copy_run_past_the_start_k(tiny_target):
    """A prompt that repeats itself: under "auto" the lookup drafts beyond K=4 once the match is long."""
    text = "one two three four five six seven eight nine ten " * 3
    ref = SpeculativeDecoder(tiny_target, None).generate([text], 40, GREEDY).token_ids
    for drafter in (PromptLookupDrafter(), HybridDrafter(ModelDrafter(tiny_target))):
        dec = SpeculativeDecoder(tiny_target, drafter, k="auto", max_k=12,  # costs fixed: timing-independent
                                 costs=PassCosts({w: 1.0 + 0.02 * (w - 1) for w in range(1, 17)}, draft_step=0.02))
        res = dec.generate([text], 40, GREEDY)
        assert res.token_ids == ref
        assert max(res.stats.k_history) > 4


@pytest.mark.parametrize("kw, match", [({"min_ngram": 0}, "min_ngram"), ({"max_ngram": 1, "min_ngram": 2}, "max_ngram"),
                                       ({"prior_strength": 0}, "prior_strength")])
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        PromptLookupDrafter(**kw)


def test_hybrid_copies_only_when_the_copy_is_the_likelier_draft(tiny_target):
    """model_prior sets the running model acceptance rate a copy's first token must reach."""
    from verispec.sampling import SamplingParams as SP

    prompt = tiny_target.tokenizer("abc abc abc ab")["input_ids"]  # the tail matches: a copy exists
    seeds = torch.zeros(1, dtype=torch.int64)
    kinds = {}
    for prior in (0.0, 1.0):
        h = HybridDrafter(ModelDrafter(tiny_target), model_prior=prior)
        h.bind(tiny_target)
        h.start([prompt])
        d = h.propose(DraftAsk.of([3], tiny_target.vocab_size, SP(temperature=0), seeds=seeds.tolist()))
        kinds[prior] = "copy" if not math.isnan(d.accept_prob[0, 0]) else "model"
        assert d.forwards == (0 if kinds[prior] == "copy" else 3)
        if kinds[prior] == "model":  # two drafts emitted as drafted, then another token: 2 of 3 accepted
            t = d.tokens[0].tolist()
            h.update([[t[0], t[1], (t[2] + 1) % tiny_target.vocab_size]])
            assert (float(h.model_passed[0]), float(h.model_tried[0])) == (5.0 * prior + 2, 5.0 + 3)
    assert kinds == {0.0: "copy", 1.0: "model"}
    with pytest.raises(ValueError, match="model_prior"):
        HybridDrafter(ModelDrafter(tiny_target), model_prior=1.5)


def test_agreement_and_repeated_buckets():
    """agreement: leading equal tokens and the slots compared; a long match's tokens all land in
    the last prior bucket, and each is counted."""
    from verispec.drafters import agreement

    assert agreement([1, 2, 3], [1, 2, 9, 4]) == (2, 3)
    assert agreement([1, 2], [1, 2, 5]) == (2, 2)  # all drafts accepted: the bonus is not a draft slot
    assert agreement([1, 2, 3], [1]) == (1, 1)  # the row stopped (EOS): nothing known past it
    assert agreement([], [4]) == (0, 0)
    context = list(range(20)) + list(range(20))  # the tail matches 20 tokens back
    d = started([context])
    d.propose(ask([3]))
    d.update([[0, 1, 2]])  # the copy continues 0, 1, 2 and all three are emitted
    last = len(PromptLookupDrafter.ACCEPT_PRIOR) - 1
    assert d.tried[0, last] == 3 and d.passed[0, last] == 3
