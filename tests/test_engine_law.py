"""The engine end to end: the law of whole generations equals the target's own sequence law.

Every drafter kind, draft lengths 3-6 and "auto", ragged rows (two prompts of different
lengths, interleaved in one batch), 7 new tokens (EOS may end a row earlier), temperature 1
and one top-k / top-p case, on tiny float64 models with a 10-token vocabulary so that the
generations concentrate on few sequences. The target's exact sequence law is enumerated with
the model itself (see :func:`sequence_law`), and each configuration's 2,000 generations are
G-tested against it. The same test must reject engines whose verifier is wrong.

Deterministic: every row has a fixed seed, and "auto" weighs a fixed cost table, so its draft
lengths (which change which text a seed gives, never its law) are the same on every run. At ALPHA = 1e-4 per
configuration a correct engine would fail with probability < 1e-3 over fresh seeds.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from collections.abc import Callable, Sequence

import pytest
import torch
from scipy import stats as sps

from verispec.engine.costs import PassCosts
from verispec.drafters import EagleDrafter, HybridDrafter, ModelDrafter, PromptLookupDrafter
from verispec.engine import GenerationResult, SpeculativeDecoder
from verispec.models import CausalLM
from verispec.rng import STREAM_EMIT, sample
from verispec.sampling import SamplingParams, logits_to_probs
from verispec.testing import EOS_ID, tiny_eagle, tiny_llama

verify_module = sys.modules["verispec.verify.chain"]  # where the engine's verify_draft finds `verify`

pytestmark = pytest.mark.slow  # about a minute on 2 cores

V = 10  # 4 special tokens (EOS among them) + 6 characters
N_NEW = 7
PROMPTS = ("abcab", "ba")  # rows alternate between them: ragged lengths in every batch
ROWS = 1000  # generations per prompt and configuration
MIN_EXPECTED = 5.0  # G-test cells with fewer expected counts are pooled
ALPHA = 1e-4
T1 = SamplingParams(temperature=1.0)
FILTERED = SamplingParams(temperature=0.8, top_k=6, top_p=0.9)


# ----------------------------------------------------------------------------------------------
# The exact law, by enumeration


@dataclasses.dataclass
class SequenceLaw:
    """The target's exact law over a partition of the generations into cells: every whole
    generation of probability >= ``thr`` is a cell, and each enumerated prefix ``u`` has a
    remainder cell ("rest", u) for its generations that are not (remainders below ``thr``
    are merged into their parent's)."""

    probs: dict[tuple, float]  # cell -> probability (sums to 1)
    leaves: set[tuple]
    nodes: set[tuple]
    up: dict[tuple, tuple]  # merged remainder -> the prefix whose remainder took it

    def cell_of(self, seq: Sequence[int]) -> tuple:
        seq = tuple(seq)
        if seq in self.leaves:
            return ("seq", seq)
        u = next(seq[:n] for n in range(len(seq) - 1, -1, -1) if seq[:n] in self.nodes)
        while u in self.up:
            u = self.up[u]
        return ("rest", u)


def sequence_law(lm: CausalLM, prompt: list[int], sp: SamplingParams, n_new: int, thr: float) -> SequenceLaw:
    """Enumerate target-only sampling from ``prompt`` (EOS or ``n_new`` tokens end a generation),
    expanding only prefixes of probability >= ``thr``; each level is one batched float64 forward
    of the whole context (no cache), through the engine's own transform ``logits_to_probs``."""
    nodes, leaves = {(): 1.0}, {}
    frontier: list[tuple] = [()]
    for step in range(n_new):
        if not frontier:
            break
        ctx = torch.tensor([prompt + list(u) for u in frontier])
        with torch.inference_mode():
            probs = logits_to_probs(lm.model(ctx).logits[:, -1].to(torch.float64), sp).tolist()
        nxt = []
        for u, row in zip(frontier, probs):
            for t, pt in enumerate(row):
                s, ps = u + (t,), nodes[u] * pt
                if ps < thr:
                    continue  # stays in u's remainder
                if t == EOS_ID or step == n_new - 1:
                    leaves[s] = ps
                else:
                    nodes[s] = ps
                    nxt.append(s)
        frontier = nxt
    rest = dict(nodes)
    for s, ps in [*((s, nodes[s]) for s in nodes if s), *leaves.items()]:
        rest[s[:-1]] -= ps
    up = {}
    for u in sorted((u for u in nodes if u), key=len, reverse=True):
        if rest[u] < thr:
            rest[u[:-1]] += rest.pop(u)
            up[u] = u[:-1]
    probs = {("seq", s): p for s, p in leaves.items()}
    probs.update({("rest", u): max(p, 0.0) for u, p in rest.items()})
    return SequenceLaw(probs, set(leaves), set(nodes), up)


def g_test(samples: Sequence[Sequence[Sequence[int]]], laws: Sequence[SequenceLaw]) -> float:
    """p-value of the G-test of each prompt's generations against its law, the G statistics and
    degrees of freedom summed over the prompts (independent rows)."""
    G, df = 0.0, 0
    for seqs, law in zip(samples, laws):
        n = len(seqs)
        for s in seqs:  # well-formed: N_NEW tokens, or fewer ending at the first EOS
            assert 1 <= len(s) <= N_NEW and (len(s) == N_NEW or s[-1] == EOS_ID) and EOS_ID not in s[:-1], s
        counts = Counter(law.cell_of(s) for s in seqs)
        big = [c for c, p in law.probs.items() if p * n >= MIN_EXPECTED]
        obs = [counts.get(c, 0) for c in big]
        exp = [law.probs[c] * n for c in big]
        if n - sum(exp) >= MIN_EXPECTED:  # the small cells, pooled
            obs.append(n - sum(obs))
            exp.append(n - sum(exp))
        exp = [e * sum(obs) / sum(exp) for e in exp]
        G += float(sps.power_divergence(obs, exp, lambda_="log-likelihood").statistic)
        df += len(obs) - 1
    return float(sps.chi2.sf(G, df))


# ----------------------------------------------------------------------------------------------
# Models, drafters, and the engine runs


@pytest.fixture(scope="module")
def target() -> CausalLM:
    return tiny_llama(vocab_size=V, seed=5, dtype=torch.float64, initializer_range=0.7)


@pytest.fixture(scope="module")
def draft_lm() -> CausalLM:
    """The target with noise on every weight: a real q near p (acceptance ~0.5-0.7)."""
    lm = tiny_llama(vocab_size=V, seed=5, dtype=torch.float64, initializer_range=0.7)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in lm.model.parameters():
            p.add_(0.35 * p.std() * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return lm


@pytest.fixture(scope="module")
def prompt_ids(target) -> list[list[int]]:
    return [target.tokenizer(p)["input_ids"] for p in PROMPTS]


@pytest.fixture(scope="module")
def laws(target, prompt_ids) -> dict[SamplingParams, list[SequenceLaw]]:
    thr = MIN_EXPECTED / ROWS
    return {sp: [sequence_law(target, p, sp, N_NEW, thr) for p in prompt_ids] for sp in (T1, FILTERED)}


def make_drafter(kind: str, target: CausalLM, draft_lm: CausalLM):
    vmap = torch.cat([torch.arange(0, V, 2), torch.tensor([EOS_ID])]).unique()  # q = 0 off the map
    return {
        "none": lambda: None,
        "ngram": lambda: PromptLookupDrafter(),
        "model": lambda: ModelDrafter(draft_lm),
        "hybrid": lambda: HybridDrafter(ModelDrafter(draft_lm)),
        "eagle": lambda: EagleDrafter(tiny_eagle(target, seed=3)),
        "eagle-vmap": lambda: EagleDrafter(tiny_eagle(target, seed=4, vocab_map=vmap)),
        "eagle-hybrid": lambda: HybridDrafter(EagleDrafter(tiny_eagle(target, seed=3))),
    }[kind]()


# "auto" weighs a fixed cost table (never live timings): cheap drafts and gently wider passes,
# so that drafts run deep where the drafter is confident and stop where it is not.
COSTS = PassCosts({w: 1.0 + 0.03 * (w - 1) for w in range(1, 16)}, draft_step=0.03)


def generate(target: CausalLM, drafter, k, sp: SamplingParams, prompt_ids: list[list[int]], seed0: int,
             monkeypatch: pytest.MonkeyPatch) -> tuple[list[list[list[int]]], GenerationResult]:
    """ROWS generations per prompt in ONE batch, prompts interleaved; returns them per prompt."""
    P = len(prompt_ids)
    rows = [prompt_ids[i % P] for i in range(P * ROWS)]
    res = SpeculativeDecoder(target, drafter, k=k, costs=COSTS).generate(rows, N_NEW, sp, seeds=range(seed0, seed0 + len(rows)))
    return [res.token_ids[i::P] for i in range(P)], res


# (drafter, K, sampling): every drafter kind, K 3-6 and "auto" (with and without scored drafts)
CASES = [
    ("none", 1, T1),
    ("ngram", 3, T1),
    ("model", 4, T1),
    ("eagle", 5, T1),
    ("eagle-vmap", 6, T1),
    ("hybrid", 6, T1),
    ("eagle-hybrid", "auto", T1),
    ("ngram", "auto", T1),
    ("model", "auto", T1),
    ("hybrid", 3, FILTERED),
    ("eagle", "tree", T1),  # draft trees: children drawn without replacement, cut by the policy
    ("eagle-vmap", "tree", FILTERED),
]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{d}-k{k}-{'T1' if s is T1 else 'filtered'}"
                                                        for d, k, s in CASES])
def test_whole_generations_follow_the_target_law(target, draft_lm, prompt_ids, laws, monkeypatch, case):
    kind, k, sp = CASES[case]
    drafter = make_drafter(kind, target, draft_lm)
    samples, res = generate(target, drafter, k, sp, prompt_ids, 100_000 * (case + 1), monkeypatch)
    pvalue = g_test(samples, laws[sp])
    assert pvalue > ALPHA, (kind, k, pvalue)
    if drafter is not None:  # the cases under test occur: runs of accepted drafts, then a bonus or residual
        st = res.stats
        deep = 1 if kind == "ngram" else 2  # prompt lookup rarely gets 3 copies in a row accepted here
        assert st.rejected > 100 and len(st.slot_accepted) > deep and st.slot_accepted[deep] > 20, st.slot_accepted
        if k == "auto":
            assert len(set(st.k_history)) > 1 or len(st.draft_lengths) > 2
        if k == "tree":  # trees were verified: passes wider than any path (N_NEW = 7 tokens per row)
            assert max(st.verify_width_seconds) > N_NEW + 1, st.verify_width_seconds.keys()


def _accept_every_draft(real: Callable) -> Callable:
    """A wrong verifier: every draft passes, then the bonus token from p."""

    def wrong(p, q, d, *, num_draft, seeds, positions, **kw):
        out = real(p, q, d, num_draft=num_draft, seeds=seeds, positions=positions, **kw)
        B, K = d.shape
        rows, slots = torch.arange(B), torch.arange(K)[None]
        tokens = torch.cat([torch.where(slots < num_draft[:, None], d, -1), torch.full((B, 1), -1)], 1)
        tokens[rows, num_draft] = sample(p[rows, num_draft], seeds, positions + num_draft, STREAM_EMIT)
        return dataclasses.replace(out, tokens=tokens, num_accepted=num_draft.clone(), num_emitted=num_draft + 1,
                                   accepted=slots < num_draft[:, None])

    return wrong


def _residual_is_p(real: Callable) -> Callable:
    """A wrong verifier: the right accept test, but the token after a rejection is drawn from p
    instead of the residual max(0, p - q)."""

    def wrong(p, q, d, *, num_draft, seeds, positions, **kw):
        out = real(p, q, d, num_draft=num_draft, seeds=seeds, positions=positions, **kw)
        rows, j = torch.arange(d.shape[0]), out.num_accepted
        redo = j < num_draft
        x = sample(p[rows, j], seeds, positions + j, STREAM_EMIT)
        tokens = out.tokens.clone()
        tokens[rows[redo], j[redo]] = x[redo]
        return dataclasses.replace(out, tokens=tokens)

    return wrong


@pytest.mark.parametrize("kind, k, mutant", [("ngram", 3, _accept_every_draft), ("model", 4, _residual_is_p),
                                             ("eagle-hybrid", "auto", _residual_is_p)])
def test_the_law_test_rejects_an_engine_with_a_wrong_verifier(target, draft_lm, prompt_ids, laws, monkeypatch,
                                                              kind, k, mutant):
    """Power: the same test, on the same configuration, fails when the engine verifies with a
    wrong rule (so passing above means something)."""
    monkeypatch.setattr(verify_module, "verify", mutant(verify_module.verify))
    samples, _ = generate(target, make_drafter(kind, target, draft_lm), k, T1, prompt_ids, 7, monkeypatch)
    pvalue = g_test(samples, laws[T1])
    assert pvalue < 1e-8, pvalue  # measured: 0.0 (accept all), 1e-77 to 1e-86 (residual = p)


def test_the_law_test_rejects_a_policy_that_cuts_a_draft_by_its_own_probability(target, draft_lm, prompt_ids, laws,
                                                                                 monkeypatch):
    """Power for the draft-length policy: deciding whether token i is verified from token i's own
    probability (here: a row's draft ends before its first token the drafter gave less than 0.5)
    biases the output, which is why "auto" decides token i + 1 from the tokens up to i only."""
    from verispec.engine import step as engine_step

    real = engine_step.draft

    def biased(dec, state):
        d = real(dec, state)
        if d.confidence is None or d.width == 0:
            return d
        low = d.confidence.cpu() < 0.5  # [B, N]
        first_low = torch.where(low.any(1), low.to(torch.int64).argmax(1), d.width)
        d.num_draft = torch.minimum(d.num_draft, first_low)
        return d

    monkeypatch.setattr(engine_step, "draft", biased)
    samples, _ = generate(target, make_drafter("model", target, draft_lm), 4, T1, prompt_ids, 11, monkeypatch)
    pvalue = g_test(samples, laws[T1])
    assert pvalue < 1e-8, pvalue  # measured: 1.7e-31


def test_the_law_test_rejects_tree_children_verified_as_if_drawn_independently(target, draft_lm, prompt_ids, laws,
                                                                               monkeypatch):
    """Power for trees: children drawn without replacement but verified by the i.i.d. rule (the
    residual carried, q not renormalised) bias the output."""
    from verispec.drafters import tree_growth

    real = tree_growth._keep_best

    def as_iid(*args, **kw):
        d = real(*args, **kw)
        if d.child_draw == "without_replacement":
            d.child_draw = "iid"
        return d

    monkeypatch.setattr(tree_growth, "_keep_best", as_iid)
    samples, _ = generate(target, make_drafter("eagle", target, draft_lm), "tree", T1, prompt_ids, 13, monkeypatch)
    pvalue = g_test(samples, laws[T1])
    assert pvalue < ALPHA, pvalue  # measured: 8.7e-7 (a subtler bias than the chain mutants')
