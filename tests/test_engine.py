"""The speculative loop on tiny float64 models: exactness, determinism, bookkeeping, edge cases."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats as sps

from verispec.drafters import EagleDrafter, HybridDrafter, ModelDrafter, PromptLookupDrafter
from verispec.engine import GenerationStats, SpeculativeDecoder
from verispec.engine.costs import PassCosts
from verispec.engine.stats import account
from verispec.sampling import SamplingParams, logits_to_probs
from verispec.testing import EOS_ID, tiny_eagle, tiny_llama

GREEDY = SamplingParams(temperature=0)
PROMPTS = ["hello world hello wor", "abc abc abc abc", "the cat sat on the mat. the cat", "x", "zz top"]


def drafters(draft_lm, target=None):
    """The drafters under test; with ``target``, also an EAGLE head over its features (with a
    reduced output vocabulary: every other token id, so q = 0 on half the vocabulary)."""
    out = {
        "model": ModelDrafter(draft_lm),
        "ngram": PromptLookupDrafter(),
        "hybrid": HybridDrafter(ModelDrafter(draft_lm)),
    }
    if target is not None:
        V = target.vocab_size
        vmap = torch.cat([torch.arange(0, V, 2), torch.tensor([EOS_ID])]).unique()
        out["eagle"] = EagleDrafter(tiny_eagle(target, seed=3))
        out["eagle-vmap"] = EagleDrafter(tiny_eagle(target, seed=4, vocab_map=vmap))
        out["eagle-hybrid"] = HybridDrafter(EagleDrafter(tiny_eagle(target, seed=3)))
    return out


ALL_KINDS = ["model", "ngram", "hybrid", "eagle", "eagle-vmap", "eagle-hybrid"]


@pytest.fixture(scope="module")
def greedy_reference(tiny_target):
    return SpeculativeDecoder(tiny_target, None).generate(PROMPTS, 24, GREEDY).token_ids


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, "heuristic", "auto"])
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_greedy_equals_target_only(tiny_target, tiny_draft, greedy_reference, kind, k):
    dec = SpeculativeDecoder(tiny_target, drafters(tiny_draft, tiny_target)[kind], k=k)
    batch = dec.generate(PROMPTS, 24, GREEDY)
    assert batch.token_ids == greedy_reference  # batch of 5, prompts of different lengths
    assert dec.generate(PROMPTS[:1], 24, GREEDY).token_ids[0] == greedy_reference[0]  # batch of 1


def test_target_as_its_own_draft_accepts_everything(tiny_target):
    k = 4
    dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_target), k=k)
    res = dec.generate(["hello there"], 26, SamplingParams(temperature=1.0, seed=2))
    st = res.stats
    assert res.finish_reasons == ["length"]  # this seed emits no EOS
    assert st.accepted == st.drafted > 0
    assert st.alpha == 1.0
    # 26 tokens = the prefill's first token, then 5 full iterations of K+1 = 5.
    assert st.target_forwards == 5 and res.stats.k_history == [4, 4, 4, 4, 4] and st.row_steps == 6
    assert len(res.token_ids[0]) == 26


def test_sampled_rows_alone_equal_rows_in_batch(tiny_target, tiny_draft):
    sp = SamplingParams(temperature=0.9, top_p=0.95, seed=11)
    for drafter in [None, *drafters(tiny_draft, tiny_target).values()]:
        dec = SpeculativeDecoder(tiny_target, drafter, k=3)
        batch = dec.generate(PROMPTS, 20, sp).token_ids
        alone = [dec.generate([p], 20, sp).token_ids[0] for p in PROMPTS]
        assert batch == alone
        assert dec.generate(PROMPTS, 20, sp).token_ids == batch  # rerun


def test_gumbel_text_equals_target_only_with_same_seed(tiny_target, tiny_draft):
    sp = SamplingParams(temperature=1.0, seed=1234)
    want = SpeculativeDecoder(tiny_target, None, method="gumbel").generate(PROMPTS, 20, sp).token_ids
    for kind, drafter in drafters(tiny_draft, tiny_target).items():
        for k in (1, 4, "heuristic"):
            got = SpeculativeDecoder(tiny_target, drafter, k=k, method="gumbel").generate(PROMPTS, 20, sp)
            assert got.token_ids == want, (kind, k)


def _first_tokens_law(lm, prompt_ids, sp, n=2):
    """Exact law of the first ``n`` generated tokens of target-only sampling (EOS ends the sequence)."""
    law = {(): 1.0}
    with torch.inference_mode():
        for _ in range(n):
            grow = [seq for seq in law if not seq or seq[-1] != EOS_ID]
            if not grow:
                break
            ctx = torch.tensor([list(prompt_ids) + list(seq) for seq in grow])
            p = logits_to_probs(lm.model(ctx).logits[:, -1], sp)  # [len(grow), V]
            for i, seq in enumerate(grow):
                mass = law.pop(seq)
                law.update({(*seq, x): mass * float(p[i, x]) for x in range(p.shape[1]) if p[i, x] > 0})
    return law


def _first_two_law(lm, prompt_ids, sp):
    """Exact law of the first two generated tokens of target-only sampling."""
    return _first_tokens_law(lm, prompt_ids, sp, 2)


def _g_test(samples, law, min_expected=5.0):
    """G-test of observed outcomes against an exact law; sparse cells pooled into one."""
    n = len(samples)
    counts = {}
    for s in samples:
        counts[s] = counts.get(s, 0) + 1
    assert set(counts) <= set(law), "an outcome with probability 0 was emitted"
    big = [o for o, p in law.items() if p * n >= min_expected]
    obs = [counts.get(o, 0) for o in big]
    exp = [law[o] * n for o in big]
    rest_obs, rest_exp = n - sum(obs), n - sum(exp)
    if rest_exp >= min_expected:
        obs.append(rest_obs)
        exp.append(rest_exp)
    exp = [e * sum(obs) / sum(exp) for e in exp]
    return sps.power_divergence(obs, exp, lambda_="log-likelihood").pvalue


# Costs of a CPU where wider passes cost little and drafts are cheap: fixed, so that what "auto"
# drafts does not depend on timings taken on the machine running the tests.
CHEAP_PASSES = PassCosts({w: 1.0 + 0.02 * (w - 1) for w in range(1, 17)}, draft_step=0.02)


# False-alarm rate: each configuration is tested at alpha = 1e-4 with fixed seeds, so a correct
# engine fails this test with probability < 1e-3 over the whole parametrisation (and never on
# rerun, as the seeds are fixed).
@pytest.mark.parametrize("kind", ["none", "model", "ngram", "hybrid", "eagle", "eagle-vmap", "gumbel-model",
                                  "gumbel-eagle-vmap", "ngram-auto", "hybrid-auto"])
def test_sampling_distribution_of_first_tokens(kind):
    """The first three tokens follow the target's law exactly: the first from the prefill, the
    next two from a step that verifies one draft (the room a 3-token request leaves) and adds the
    bonus, so the verifier's accept, residual and bonus draws all shape the outcome."""
    target = tiny_llama(vocab_size=16, seed=5, dtype=torch.float64, initializer_range=0.4)
    draft = tiny_llama(vocab_size=16, seed=6, layers=1, dtype=torch.float64, initializer_range=0.4)
    sp = SamplingParams(temperature=1.0)
    prompt = target.tokenizer("abcab")["input_ids"]
    law = _first_tokens_law(target, prompt, sp, 3)
    method = "gumbel" if kind.startswith("gumbel") else "exact"
    name = kind.replace("gumbel-", "").replace("-auto", "")
    drafter = None if kind == "none" else drafters(draft, target)[name]
    n = 6000
    # "-auto": lookup drafts are cut per row by their acceptance estimates (KRows.cut), against a
    # fixed cost table where drafting pays (a table measured on a busy machine may say it never does)
    dec = SpeculativeDecoder(target, drafter, k="auto" if kind.endswith("-auto") else 2, method=method,
                             costs=CHEAP_PASSES)
    res = dec.generate([prompt] * n, 3, sp, seeds=list(range(10_000, 10_000 + n)))
    samples = [tuple(t) for t in res.token_ids]
    assert _g_test(samples, law) > 1e-4
    if drafter is not None:
        assert res.stats.drafted > 0


def test_g_test_of_first_tokens_catches_a_verifier_that_accepts_every_draft(monkeypatch):
    """The three-token check above fails when the engine's verifier is wrong: here every draft
    is accepted (q taken as p at the drafted token), so the drafter's law leaks into token 2."""
    from dataclasses import replace

    from verispec.engine import step as step_mod

    target = tiny_llama(vocab_size=16, seed=5, dtype=torch.float64, initializer_range=0.4)
    draft = tiny_llama(vocab_size=16, seed=6, layers=1, dtype=torch.float64, initializer_range=0.4)
    sp = SamplingParams(temperature=1.0)
    prompt = target.tokenizer("abcab")["input_ids"]
    real = step_mod.verify_draft

    def accept_all(p, d, **kw):  # [B, N+1, V]: q := p, so min(1, p/q) = 1 for every draft
        return real(p, replace(d, probs=p[:, : d.tokens.shape[1]]), **kw)

    monkeypatch.setattr(step_mod, "verify_draft", accept_all)
    dec = SpeculativeDecoder(target, ModelDrafter(draft), k=2)
    n = 6000
    res = dec.generate([prompt] * n, 3, sp, seeds=list(range(10_000, 10_000 + n)))
    assert res.stats.drafted > 0 and res.stats.rejected == 0
    assert _g_test([tuple(t) for t in res.token_ids], _first_tokens_law(target, prompt, sp, 3)) < 1e-6


def test_g_test_has_power():
    """The same check rejects a drifted law (so passing above means something)."""
    target = tiny_llama(vocab_size=16, seed=5, dtype=torch.float64, initializer_range=0.4)
    prompt = target.tokenizer("abcab")["input_ids"]
    law = _first_two_law(target, prompt, SamplingParams(temperature=1.0))
    hotter = SamplingParams(temperature=1.3, seed=1)  # a slightly wrong distribution
    n = 6000
    res = SpeculativeDecoder(target, None).generate([prompt] * n, 2, hotter, seeds=list(range(n)))
    assert _g_test([tuple(t) for t in res.token_ids], law) < 1e-6


def test_eos_inside_draft_ends_the_row(tiny_target):
    """A draft containing EOS: nothing after an accepted EOS is emitted."""
    target = tiny_target
    ref = SpeculativeDecoder(target, None).generate(["abc"], 12, GREEDY).token_ids[0]

    class EosDrafter(PromptLookupDrafter):
        """Proposes the target's true next token, then EOS, then junk."""

        def propose(self, ask):
            d = super().propose(ask)
            for b, ctx in enumerate(self.contexts):
                n = len(ctx) - len(prompt)
                if n < 3 and d.tokens.shape[1] >= 3:
                    d.tokens[b, 0] = ref[n]
                    d.tokens[b, 1] = EOS_ID
                    d.tokens[b, 2] = 7
                    d.num_draft[b] = 3
            return d

    prompt = target.tokenizer("abc")["input_ids"]
    # Make EOS the greedy choice after the first token by biasing the target's lm_head row.
    biased = tiny_llama(vocab_size=64, seed=0, dtype=torch.float64)
    res_plain = SpeculativeDecoder(biased, EosDrafter(), k=3).generate([prompt], 12, GREEDY)
    assert res_plain.token_ids[0] == ref  # EOS draft rejected: output unchanged

    with torch.no_grad():
        biased.model.lm_head.weight[EOS_ID] = biased.model.lm_head.weight[ref[1]] * 1.0001 + 0  # EOS ties ref[1]
        biased.model.lm_head.weight[EOS_ID] *= 10
    want = SpeculativeDecoder(biased, None).generate([prompt], 12, GREEDY)
    got = SpeculativeDecoder(biased, EosDrafter(), k=3).generate([prompt], 12, GREEDY)
    assert got.token_ids == want.token_ids
    assert want.finish_reasons == ["eos"] and got.finish_reasons == ["eos"]
    assert got.token_ids[0][-1] == EOS_ID


def test_stop_strings(tiny_target, greedy_reference):
    text = tiny_target.tokenizer.decode(greedy_reference[0], skip_special_tokens=True)
    stop = text[5:7]
    res = SpeculativeDecoder(tiny_target, PromptLookupDrafter(), k=4).generate(PROMPTS[:1], 24, GREEDY, stop=[stop])
    assert res.finish_reasons == ["stop"]
    assert res.texts[0] == text[: text.find(stop)]
    assert stop not in res.texts[0]


def test_max_new_tokens_is_exact(tiny_target, tiny_draft):
    for n in (1, 2, 7):
        for k in (1, 4, 8):
            res = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k=k).generate(
                PROMPTS, n, SamplingParams(seed=0))
            for ids, why in zip(res.token_ids, res.finish_reasons):
                assert len(ids) == n or why == "eos"


def test_streaming_yields_the_same_text(tiny_target, tiny_draft):
    dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k=3)
    stream = dec.generate(PROMPTS[0], 20, GREEDY, stream=True)
    pieces = [d.text for d in stream]
    assert len(pieces) > 1
    assert "".join(pieces) == stream.result.texts[0]
    assert stream.result.token_ids[0] == SpeculativeDecoder(tiny_target, None).generate(
        PROMPTS[:1], 20, GREEDY).token_ids[0]


def test_stats_add_up(tiny_target, tiny_draft):
    res = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k=3).generate(PROMPTS, 16, SamplingParams(seed=2))
    st = res.stats
    assert st.emitted == sum(len(t) for t in res.token_ids)
    assert sum(st.slot_drafted) == st.drafted and sum(st.slot_accepted) == st.accepted
    assert st.emitted == st.accepted + st.row_steps  # every row step emits accepted + 1 tokens
    assert 0 <= st.alpha <= 1 and st.tau >= 1
    assert math.isclose(st.wall, st.time_prefill + st.time_target + st.time_draft + st.time_verify + st.time_other)
    pos = st.per_position_acceptance
    assert all(0 <= a <= 1 for a in pos)
    # Tested = drafted with every earlier draft accepted: one rejection per row-pass that stopped early.
    assert sum(st.slot_tested) == st.tested == st.accepted + st.rejected
    assert all(a <= t <= d for a, t, d in zip(st.slot_accepted, st.slot_tested, st.slot_drafted))
    assert st.alpha >= st.draft_acceptance
    assert sum(st.draft_lengths) == st.row_steps and sum(n * h for n, h in enumerate(st.draft_lengths)) == st.drafted


def test_alpha_estimates_leviathans_per_token_acceptance() -> None:
    """Drafts accepted independently with probability a, testing stopping at the first rejection
    (Leviathan's model): alpha recovers a, tau matches E(a, K), accepted / drafted does not."""
    from types import SimpleNamespace

    from verispec.bench.theory import expected_tokens

    B, K, a = 20_000, 4, 0.7
    passes = torch.rand(B, K, generator=torch.Generator().manual_seed(0)) < a  # [B, K]
    accepted = passes.to(torch.int64).cumprod(1).bool()  # [B, K] the accepted prefix
    st = GenerationStats()
    account(st, SimpleNamespace(accepted=accepted, num_accepted=accepted.sum(1)), torch.full((B,), K))
    st.emitted = st.accepted + st.row_steps
    assert st.alpha == pytest.approx(a, abs=0.01)
    assert st.per_position_acceptance == pytest.approx([a] * K, abs=0.02)
    assert st.tau == pytest.approx(expected_tokens(a, K), abs=0.02)
    assert st.draft_acceptance == pytest.approx((expected_tokens(a, K) - 1) / K, abs=0.01)  # ~0.48, not 0.7


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(prompts=[""]), "prompts\\[0\\] is empty"),
        (dict(prompts=[]), "prompts is empty"),
        (dict(prompts=["a" * 600]), "context"),
        (dict(prompts=[[1, 2, 999]]), "prompts\\[0\\] has token ids"),
        (dict(prompts=["ab"], max_new_tokens=0), "max_new_tokens"),
        (dict(prompts=["ab"], stop="x"), "stop"),
        (dict(prompts=["ab"], seeds=[1, 2]), "seeds"),
    ],
)
def test_bad_generate_arguments(tiny_target, kwargs, match):
    kwargs = {"max_new_tokens": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        SpeculativeDecoder(tiny_target, None).generate(**kwargs)


@pytest.mark.parametrize("k, match", [(0, "k must be in"), ("fast", "k must be"), (True, "k must be")])
def test_bad_k(tiny_target, k, match):
    with pytest.raises(ValueError, match=match):
        SpeculativeDecoder(tiny_target, None, k=k)


def test_draft_with_other_tokenizer_is_refused(tiny_target):
    other = tiny_llama(vocab_size=40, seed=3)
    with pytest.raises(ValueError, match="tokenizer"):
        SpeculativeDecoder(tiny_target, ModelDrafter(other))


def test_padded_draft_head_is_handled(tiny_target, greedy_reference):
    """A draft with a larger (padded) output head than the target's still gives exact greedy output."""
    padded = tiny_llama(vocab_size=80, tokenizer_size=64, seed=1, layers=1, dtype=torch.float64)
    res = SpeculativeDecoder(tiny_target, ModelDrafter(padded), k=3).generate(PROMPTS, 24, GREEDY)
    assert res.token_ids == greedy_reference


def test_auto_k_picks_long_drafts_for_a_free_perfect_drafter(tiny_target):
    """With alpha = 1 (the target as draft), 'auto' must move K up from its start value."""
    dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_target), k="auto", max_k=8, costs=CHEAP_PASSES)
    res = dec.generate(["hello"], 60, GREEDY)
    assert res.stats.alpha == 1.0
    assert len(res.stats.k_history) > 2


@pytest.mark.parametrize("method", ["exact", "gumbel"])
def test_greedy_draw_shortcut_matches_the_random_rules(method):
    """Greedy drafts skip the noise: for a one-hot q both the inverse CDF and Gumbel-max pick its token."""
    from verispec.drafters import sample_draft
    from verispec.rng import STREAM_DRAFT, sample
    from verispec.verify import gumbel_argmax

    q = torch.nn.functional.one_hot(torch.tensor([3, 0, 15, 7]), 16).to(torch.float64)  # [B, V]
    seeds, positions = torch.arange(4), torch.tensor([5, 9, 2, 40])
    want = (gumbel_argmax(torch.log(q)[:, None], seeds, positions)[:, 0] if method == "gumbel"
            else sample(q, seeds, positions, STREAM_DRAFT))
    d, q_greedy = sample_draft(torch.log(q), GREEDY, method, seeds, positions)
    assert d.tolist() == want.tolist() == [3, 0, 15, 7]
    assert torch.equal(q_greedy, q)


GREEDY_DRAFT_CASES = ["sorted-map", "unsorted-map", "no-map", "padded-head", "short-head"]


@pytest.mark.parametrize("case", GREEDY_DRAFT_CASES)
def test_greedy_draft_is_the_argmax_of_the_dense_q(case):
    """Greedy drafters pick ``greedy_draft(logits)`` instead of building q; it must be the token
    that ``logits_to_probs(to_target_vocab(logits))`` puts its one-hot on, ties to the lowest id."""
    from verispec.drafters import greedy_draft, to_target_vocab

    V = 40
    gen = torch.Generator().manual_seed(GREEDY_DRAFT_CASES.index(case))
    vmap, Vd = None, {"no-map": V, "padded-head": V + 8, "short-head": V - 10}.get(case, 12)
    if case.endswith("map"):
        vmap = torch.randperm(V, generator=gen)[:Vd]
        vmap = vmap.sort().values if case == "sorted-map" else vmap
    logits = torch.randint(0, 3, (64, Vd), generator=gen).to(torch.float64)  # many ties
    if case == "padded-head":
        logits[:, V:] = 9.0  # padding rows beyond the target's vocabulary never win
    want = logits_to_probs(to_target_vocab(logits, vmap, V, torch.float64), GREEDY).argmax(-1)
    assert greedy_draft(logits, vmap, V).tolist() == want.tolist()
    logits[3, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        greedy_draft(logits, vmap, V)


@pytest.mark.parametrize("kind", ["model", "eagle", "eagle-hybrid"])
def test_greedy_drafts_are_point_masses_and_sampled_drafts_carry_q(tiny_target, tiny_draft, kind):
    """Under greedy sampling a model draft's q is one-hot, so drafters pass none (``probs=None``,
    the verifier's point-mass case); sampled, each q row is a distribution over the target's
    vocabulary with the draft token in its support."""
    for sampling in (GREEDY, SamplingParams(temperature=0.9, seed=3)):
        dec = SpeculativeDecoder(tiny_target, drafters(tiny_draft, tiny_target)[kind], k=3)
        seen = []
        orig = dec.drafter.propose

        def spy(*a, **kw):
            seen.append(orig(*a, **kw))
            return seen[-1]

        dec.drafter.propose = spy
        dec.generate(PROMPTS[:2], 12, sampling)
        assert seen
        for d in seen:
            if sampling.greedy:
                assert d.probs is None
            elif d.probs is not None:
                B, K = d.tokens.shape
                assert d.probs.shape == (B, K, tiny_target.vocab_size)
                for b in range(B):
                    n = int(d.num_draft[b])
                    torch.testing.assert_close(d.probs[b, :n].sum(-1), torch.ones(n, dtype=d.probs.dtype))
                    assert bool((d.probs[b, torch.arange(n), d.tokens[b, :n]] > 0).all())
        if not sampling.greedy:
            assert any(d.probs is not None for d in seen)


# ----------------------------------------------------------------------------------------------
# Review fixes (issue 13): odd inputs, stop strings in a batch, stats of dropped tokens


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(seeds=[2**63]), ValueError, "seeds\\[0\\].*int64"),
        (dict(seeds=[-(2**63) - 1]), ValueError, "seeds\\[0\\].*int64"),
        (dict(seeds=[1.5]), TypeError, "seeds\\[0\\] must be an int"),  # was silently truncated to 1
        (dict(seeds=[True]), TypeError, "seeds\\[0\\] must be an int"),
        (dict(seeds=torch.tensor([1.0])), TypeError, "seeds must be a 1-D integer tensor"),
        (dict(seeds="a"), TypeError, "seeds must be a list"),
        (dict(prompts=[[1.5, 2]]), TypeError, "prompts\\[0\\]\\[0\\] must be an int token id"),  # was truncated
        (dict(prompts=[[True, 2]]), TypeError, "prompts\\[0\\]\\[0\\] must be an int token id"),
        (dict(prompts=[[[5], [6]]]), TypeError, "prompts\\[0\\]\\[0\\] must be an int token id"),
        (dict(prompts=[[5, None]]), TypeError, "prompts\\[0\\]\\[1\\] must be an int token id"),
        (dict(prompts=[torch.tensor([5.0, 6.0])]), TypeError, "prompts\\[0\\] must be a 1-D integer tensor"),
        (dict(prompts=[torch.tensor([[5, 6]])]), TypeError, "prompts\\[0\\] must be a 1-D integer tensor"),
        (dict(prompts=[b"ab"]), TypeError, "prompts\\[0\\] is bytes"),  # was read as token ids 97, 98
        (dict(prompts=b"ab"), TypeError, "prompts is bytes"),
        (dict(prompts=[5, 6]), TypeError, "prompts\\[0\\] must be a string or a list of token ids"),
        (dict(prompts=[None]), TypeError, "prompts\\[0\\] must be a string or a list of token ids"),
        (dict(stop=5), ValueError, "stop must be a list"),
    ],
)
def test_odd_generate_inputs_raise_clear_errors_naming_the_argument(tiny_target, kwargs, exc, match):
    kwargs = {"prompts": ["ab"], "max_new_tokens": 3, "sampling": SamplingParams(seed=1), **kwargs}
    with pytest.raises(exc, match=match):
        SpeculativeDecoder(tiny_target, PromptLookupDrafter(), k=2).generate(**kwargs)


def test_integer_tensors_arrays_and_numpy_ints_are_token_ids_and_seeds(tiny_target):
    import numpy as np

    dec = SpeculativeDecoder(tiny_target, PromptLookupDrafter(), k=2)
    ids = tiny_target.tokenizer("abcab")["input_ids"]
    sp = SamplingParams(seed=1)
    want = dec.generate([ids, ids], 6, sp, seeds=[3, -(2**63)]).token_ids
    for prompt, seeds in [(torch.tensor(ids), torch.tensor([3, -(2**63)])), (np.array(ids), np.array([3, -(2**63)])),
                          ([np.int64(t) for t in ids], [np.int32(3), -(2**63)])]:
        assert dec.generate([prompt, prompt], 6, sp, seeds=seeds).token_ids == want


class _WideTokenizer:
    """The tiny tokenizer, but every token decodes to its character twice ("a" -> "aa"): tokens
    wider than one character, as in BPE vocabularies, so a stop string can end inside a token."""

    def __init__(self, tok) -> None:
        self._tok = tok

    def __getattr__(self, name: str):
        return getattr(self._tok, name)

    def __call__(self, *args, **kwargs):
        return self._tok(*args, **kwargs)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(2 * self._tok.decode([i], skip_special_tokens=skip_special_tokens) for i in ids)


@pytest.mark.parametrize("drafter", ["none", "ngram"])
def test_stop_string_inside_a_token_stays_cut_while_other_rows_run(tiny_target, drafter):
    """A row stopped by a string that ends inside a token kept its text only until the next
    pass re-decoded it (bringing the token's whole text back) while another row still ran."""
    from verispec.models import CausalLM

    wide = CausalLM(model=tiny_target.model, tokenizer=_WideTokenizer(tiny_target.tokenizer), name="wide")
    prompts = ["hello world hello wor", "x"]  # greedy texts that never emit EOS in 24 tokens
    dec = SpeculativeDecoder(wide, None if drafter == "none" else PromptLookupDrafter(), k=3)
    full = dec.generate(prompts, 24, GREEDY)
    assert full.finish_reasons == ["length", "length"]
    text0, text1 = full.texts
    # A stop string that first occurs in row 0 early, starting in the middle of a token (odd
    # offset), and never in row 1: row 0 stops after a few passes, row 1 runs to the end.
    cut, stop = next((i, text0[i:i + 2]) for i in range(5, 30, 2)
                     if text0.find(text0[i:i + 2]) == i and text0[i:i + 2] not in text1)
    res = dec.generate(prompts, 24, GREEDY, stop=[stop])
    assert res.finish_reasons == ["stop", "length"]
    assert res.texts == [text0[:cut], text1]  # before the fix: text0[:cut + 1], the stop string's start
    assert res.token_ids == [full.token_ids[0][: cut // 2 + 1], full.token_ids[1]]


def test_streaming_holds_back_what_may_start_a_stop_string(tiny_target):
    """A streamed piece cannot be taken back: text that may be the start of a stop string waits
    until the next tokens show whether it is. Before, the stream sent "...,," for a final "...,"."""
    from verispec.models import CausalLM

    wide = CausalLM(model=tiny_target.model, tokenizer=_WideTokenizer(tiny_target.tokenizer), name="wide")
    dec = SpeculativeDecoder(wide, PromptLookupDrafter(), k=3)
    prompt = "hello world hello wor"
    text = dec.generate([prompt], 24, GREEDY).texts[0]
    for cut in (5, 7, 9):  # inside a token
        stop = text[cut:cut + 2]
        assert text.find(stop) == cut
        stream = dec.generate(prompt, 24, GREEDY, stop=["qqq", stop], stream=True)
        pieces = [d.text for d in stream]
        assert "".join(pieces) == stream.result.texts[0] == text[:cut]


def _accepted_drafts_among(n_tokens: int, k: int) -> int:
    """With a drafter that is always accepted at fixed K, the prefill emits token 0 and every pass
    K drafts then a bonus: of the first n tokens of a row, those at index 0, K + 1, 2K + 2, ...
    are not drafts, the rest are."""
    return n_tokens - (n_tokens + k) // (k + 1)


@pytest.mark.parametrize("cut", [5, 7])  # 5: the stop string starts at the previous pass's bonus
def test_drafts_cut_by_a_stop_string_are_not_counted_accepted(tiny_target, cut):
    k = 4
    dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_target), k=k)  # the target drafts for itself
    full = dec.generate(["x"], 20, GREEDY)
    text = full.texts[0]
    stop = next(text[cut:cut + n] for n in range(2, 8) if text.find(text[cut:cut + n]) == cut)
    res = dec.generate(["x"], 20, GREEDY, stop=[stop])
    st = res.stats
    assert res.finish_reasons == ["stop"] and len(res.token_ids[0]) == cut  # one character per token
    assert st.accepted == _accepted_drafts_among(cut, k)  # before the fix: 4 per pass, trimmed ones too
    assert sum(st.slot_accepted) == st.accepted and sum(st.slot_tested) == st.tested == st.accepted
    assert st.rejected == 0 and st.alpha == 1.0
    assert st.emitted == cut and st.drafted == k * st.target_forwards


def test_drafts_after_an_eos_are_not_counted_accepted(tiny_target):
    """Rows ending at an EOS inside an accepted draft: the drafts after it are not returned,
    so they are not accepted (nor tested); every slot count stays consistent."""
    k, n = 4, 300
    dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_target), k=k)
    # 21 tokens: the prefill's token, then 4 passes of K + 1 (no pass cut short by the length limit)
    res = dec.generate(["hello there"] * n, 21, SamplingParams(temperature=1.5), seeds=list(range(n)))
    st = res.stats
    lengths = [len(t) for t in res.token_ids]
    ended_in_draft = sum((len(t) - 1) % (k + 1) != 0 and t[-1] == EOS_ID for t in res.token_ids)
    assert ended_in_draft >= 10  # the case under test occurs
    assert st.rejected == 0  # p == q: every draft passes
    assert st.accepted == sum(_accepted_drafts_among(m, k) for m in lengths)  # before the fix: drafts after EOS too
    assert sum(st.slot_accepted) == st.accepted and sum(st.slot_tested) == st.tested
    assert all(a <= t <= d for a, t, d in zip(st.slot_accepted, st.slot_tested, st.slot_drafted))
    assert st.alpha == 1.0 and st.emitted == sum(lengths)
