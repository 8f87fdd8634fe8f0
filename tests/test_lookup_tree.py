"""Prompt lookup's trees (several earlier matches as sibling branches) and the hybrid's composed
trees: the trie against a plain reference, the node order the engine cuts by, the estimates,
the budget and depth caps, the chain behaviour when no tree is asked for, and the engine end to
end (greedy and Gumbel text equal to target-only decoding; sampled "exact" rows G-tested
against the target's exact sequence law, in tests/test_engine_law.py's harness).
"""

from __future__ import annotations

import math
import random
import sys

import pytest
import torch

from verispec.draft import Draft
from verispec.drafters import DraftAsk, DrafterBase, EagleDrafter, HybridDrafter, ModelDrafter, PromptLookupDrafter
from verispec.drafters.lookup import order_by_reach
from verispec.engine import SpeculativeDecoder
from verispec.engine import step as engine_step
from verispec.engine.costs import PassCosts
from verispec.sampling import RowParams, SamplingParams
from verispec.testing import tiny_eagle

pytestmark = pytest.mark.usefixtures("trees_always")  # these tests are about the trees themselves

GREEDY = SamplingParams(temperature=0)
T1 = SamplingParams(temperature=1.0)
V = 100


def started(prompts, **kw) -> PromptLookupDrafter:
    d = PromptLookupDrafter(**kw)
    d.start([list(p) for p in prompts])
    return d


def ask(k, nodes=None, params=None, gumbel=None, k_cap=None) -> DraftAsk:
    a = DraftAsk.of(k, V, GREEDY, dtype=torch.float64, k_cap=k_cap)
    if params is not None:
        a.params = RowParams.of(params)
    if gumbel is not None:
        a.gumbel = torch.tensor(gumbel)
    a.nodes = None if nodes is None else torch.tensor(nodes, dtype=torch.int64)
    return a


def paths(d: Draft, b: int) -> list[tuple[int, ...]]:
    """The token path from the root to each node of row b, in node order."""
    par, tok = d.parent_index()[b].tolist(), d.tokens[b].tolist()
    out: list[tuple[int, ...]] = []
    for i in range(int(d.num_draft[b])):
        out.append((out[par[i]] if par[i] >= 0 else ()) + (tok[i],))
    return out


def reaches(d: Draft, b: int) -> list[float]:
    par, acc = d.parent_index()[b].tolist(), d.accept_prob[b].tolist()
    out: list[float] = []
    for i in range(int(d.num_draft[b])):
        out.append((out[par[i]] if par[i] >= 0 else 1.0) * acc[i])
    return out


# ----------------------------------------------------------------------------------------------
# Plain references


def reference_branches(ctx: list[int], max_ngram: int, branches: int, depth: int, scan: int
                       ) -> list[tuple[list[int], int]]:
    """The continuations a trie holds, by brute force: every earlier copy of the last token, its
    match length by walking back, ranked longest then most recent; the first ``scan`` looked at,
    kept while they add a path, up to ``branches``."""
    L = len(ctx)
    cands = []
    for e in range(L - 1):
        m = 0
        while m < max_ngram and e - m >= 0 and ctx[e - m] == ctx[L - 1 - m]:
            m += 1
        if m >= 1:
            cands.append((m, e))
    cands.sort(reverse=True)
    out, have = [], set()
    for m, e in cands[:scan]:
        cont = ctx[e + 1 : e + 1 + depth]
        prefixes = {tuple(cont[: j + 1]) for j in range(len(cont))}
        if prefixes - have:
            out.append((cont, m))
            have |= prefixes
        if len(out) == branches:
            break
    return out


def reference_order(tokens: list[int], parents: list[int], accept: list[float]) -> list[int]:
    """Old node indices by decreasing reach, ties shallower then earlier (a plain sort)."""
    reach, depth = [], []
    for i, p in enumerate(parents):
        reach.append((reach[p] if p >= 0 else 1.0) * accept[i])
        depth.append((depth[p] if p >= 0 else 0) + 1)
    return sorted(range(len(tokens)), key=lambda i: (-reach[i], depth[i], i))


# ----------------------------------------------------------------------------------------------
# The trie


#         0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18
CONTEXT = [1, 2, 3, 4, 5, 9, 2, 3, 6, 7, 9, 1, 2, 3, 4, 8, 9, 2, 3]
# tail "9 2 3": matches "9 2 3" at 5..7 (m 3, continues 6 7 9 1), "2 3" at 12..13 (m 2, 4 8 9 2)
# and "2 3" at 1..2 (m 2, 4 5 9 2): the last two share "4", then split into 8 / 5.


def test_the_trie_merges_shared_prefixes_and_keeps_siblings_distinct():
    d = started([CONTEXT], max_branches=3)
    draft = d.propose(ask([4], nodes=[32]))
    assert draft.child_draw == "top_k" and draft.probs is None and draft.parents is not None
    got = sorted(paths(draft, 0))
    want = sorted({tuple(c[: j + 1]) for c, _ in reference_branches(CONTEXT, 32, 3, 4, 24) for j in range(len(c))})
    assert got == want
    assert len(got) == 4 + 4 + 3  # "4" is one node for two branches
    for b_paths in [paths(draft, 0)]:
        assert len(set(b_paths)) == len(b_paths)  # siblings distinct: no two nodes with one path


def test_trie_equals_the_brute_force_reference_on_random_contexts():
    rng = random.Random(0)
    for trial in range(60):
        B = 3
        ctxs = [[rng.randrange(4) for _ in range(rng.randrange(2, 40))] for _ in range(B)]
        branches, depth = rng.randrange(1, 5), rng.randrange(1, 7)
        max_ngram = rng.choice([2, 3, 32])
        d = started(ctxs, max_branches=max(branches, 2), max_ngram=max_ngram)
        d.max_branches = branches  # the tree rows' branch count (2.. to pass the check; 1 too)
        draft = d.propose(ask([depth] * B, nodes=[1000] * B))
        for b, ctx in enumerate(ctxs):
            want = {tuple(c[: j + 1]) for c, _ in reference_branches(ctx, max_ngram, branches, depth,
                                                                     PromptLookupDrafter.SCAN * branches)
                    for j in range(len(c))}
            got = paths(draft, b)
            assert len(got) == len(set(got)) and set(got) == want, (trial, b, ctx)
            assert max((len(p) for p in got), default=0) <= depth


def test_nodes_are_topological_by_decreasing_reach_and_capped_by_the_budget():
    rng = random.Random(1)
    for trial in range(40):
        B = 4
        ctxs = [[rng.randrange(3) for _ in range(rng.randrange(5, 50))] for _ in range(B)]
        budget = [rng.randrange(0, 12) for _ in range(B)]
        depth = [rng.randrange(1, 6) for _ in range(B)]
        d = started(ctxs, max_branches=4)
        full = d.propose(ask(depth, nodes=[1000] * B))
        cut = d.propose(ask(depth, nodes=budget))
        for b in range(B):
            par = cut.parent_index()[b].tolist()
            n = int(cut.num_draft[b])
            whole = int(full.num_draft[b])
            if not budget[b]:  # a row with no budget is a chain row: today's continuation, not a trie
                assert par[:n] == list(range(-1, n - 1)) and n <= depth[b]
                continue
            assert n == min(whole, budget[b])
            assert all(-1 <= par[i] < i for i in range(n))  # topological
            r = reaches(cut, b)
            assert all(r[i] >= r[i + 1] for i in range(n - 1))  # any prefix is the best tree of its size
            assert paths(cut, b) == paths(full, b)[:n]  # the budget keeps the full tree's first nodes
            assert max((len(p) for p in paths(cut, b)), default=0) <= depth[b]


def test_order_by_reach_equals_a_plain_sort():
    gen = torch.Generator().manual_seed(2)
    B, M = 6, 9
    parents = torch.full((B, M), -1, dtype=torch.int64)
    for i in range(1, M):  # random trees in topological order
        parents[:, i] = (torch.rand(B, generator=gen) * (i + 1)).long() - 1
    tokens = torch.randint(0, 50, (B, M), generator=gen)
    accept = torch.rand(B, M, generator=gen, dtype=torch.float64)
    accept[0, 3] = 0.0  # zero reach below node 3: ties broken by depth, then index
    accept[1, :] = 0.5  # many ties
    parents[2, :4], accept[2, :4] = torch.tensor([-1, 0, -1, 1]), 0.0  # zero reach everywhere: the shallower first
    num = torch.tensor([9, 9, 4, 0, 1, 7])
    tok, par, acc, perm = order_by_reach(tokens, parents, accept, num)
    assert perm[2, :4].tolist() == [0, 2, 1, 3]
    for b in range(B):
        n = int(num[b])
        want = reference_order(tokens[b, :n].tolist(), parents[b, :n].tolist(), accept[b, :n].tolist())
        assert perm[b, :n].tolist() == want
        assert tok[b, :n].tolist() == [int(tokens[b, i]) for i in want]
        old_par = [int(parents[b, i]) for i in want]
        assert par[b, :n].tolist() == [want.index(p) if p >= 0 else -1 for p in old_par]
        assert par[b, n:].tolist() == list(range(n - 1, M - 1))  # padded slots: chain-like


def test_accept_prob_top_branch_as_the_chain_siblings_discounted():
    chain = started([CONTEXT]).propose(ask([4]))
    d = started([CONTEXT], max_branches=3)
    tree = d.propose(ask([4], nodes=[32]))
    p, acc = paths(tree, 0), tree.accept_prob[0].tolist()
    top = tuple(chain.tokens[0].tolist())
    for j in range(4):  # the best match's nodes carry the chain's estimates
        assert acc[p.index(top[: j + 1])] == chain.accept_prob[0, j].item()
    prior = PromptLookupDrafter.ACCEPT_PRIOR
    a6, a4 = acc[p.index((6,))], acc[p.index((4,))]
    assert a6 == prior[2]  # m = 3
    assert a4 == pytest.approx(prior[1] * (1 - a6))  # m = 2, times what the better sibling leaves
    assert acc[p.index((4, 8))] == prior[2] and acc[p.index((4, 5))] == pytest.approx(prior[2] * (1 - prior[2]))
    # siblings' estimates are of disjoint events: they never sum past 1
    rng = random.Random(3)
    for _ in range(30):
        ctx = [rng.randrange(3) for _ in range(60)]
        t = started([ctx], max_branches=6).propose(ask([5], nodes=[100]))
        par, a = t.parent_index()[0].tolist(), t.accept_prob[0].tolist()
        for parent in set(par[: int(t.num_draft[0])]):
            assert sum(a[i] for i in range(int(t.num_draft[0])) if par[i] == parent) <= 1 + 1e-12


def test_without_trees_the_chain_is_exactly_as_before():
    rng = random.Random(4)
    ctxs = [[rng.randrange(5) for _ in range(30)] for _ in range(4)] + [[1, 2], [7]]
    chain = started(ctxs).propose(ask([3, 4, 5, 6, 2, 3]))
    for kw, nodes in [({"max_branches": 4}, None), ({"max_branches": 4}, [0] * 6), ({}, [8] * 6)]:
        other = started(ctxs, **kw).propose(ask([3, 4, 5, 6, 2, 3], nodes=nodes))
        assert other.parents is None and other.child_draw == "single"
        assert torch.equal(other.tokens, chain.tokens) and torch.equal(other.num_draft, chain.num_draft)
        assert torch.equal(other.accept_prob.nan_to_num(-1), chain.accept_prob.nan_to_num(-1))


def test_rows_without_a_budget_keep_their_chain_beside_tree_rows():
    chain = started([CONTEXT, CONTEXT]).propose(ask([4, 4]))
    mixed = started([CONTEXT, CONTEXT], max_branches=3).propose(ask([4, 4], nodes=[0, 32]))
    assert mixed.parents is not None
    n = int(mixed.num_draft[0])
    assert mixed.tokens[0, :n].tolist() == chain.tokens[0].tolist() and mixed.parents[0, :n].tolist() == [-1, 0, 1, 2]
    assert int(mixed.num_draft[1]) == 11


def test_block_rows_get_chains():
    a = ask([4, 4], nodes=[32, 32])
    a.block = torch.tensor([True, False])
    d = started([CONTEXT, CONTEXT], max_branches=3).propose(a)
    assert d.parent_index()[0, : int(d.num_draft[0])].tolist() == [-1, 0, 1, 2] and int(d.num_draft[1]) == 11


def test_update_scores_the_top_branch_as_a_chain():
    emitted = [[4, 8, 9]]  # the target took the second branch: the top branch fails at its first token
    chain = started([CONTEXT], prior_strength=2.0)
    chain.propose(ask([4]))
    chain.update([list(e) for e in emitted])
    tree = started([CONTEXT], prior_strength=2.0, max_branches=3)
    tree.propose(ask([4], nodes=[32]))
    tree.update([list(e) for e in emitted])
    assert torch.equal(tree.tried, chain.tried) and torch.equal(tree.passed, chain.passed)
    assert tree.tried.sum() == 1 and tree.passed.sum() == 0


def test_bad_max_branches_is_a_value_error():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_branches"):
            PromptLookupDrafter(max_branches=bad)
    assert PromptLookupDrafter(max_branches=2).drafts_trees and not PromptLookupDrafter().drafts_trees


# ----------------------------------------------------------------------------------------------
# The hybrid's composed trees


class FixedModel(DrafterBase):
    """A model drafter stand-in: per row a fixed chain (or tree), q a fixed law per node."""

    name = "fixed"

    def __init__(self, tokens: list[list[int]], parents: list[list[int]] | None = None,
                 child_draw: str = "single", accept: list[list[float]] | None = None) -> None:
        self.fixed, self.fixed_parents, self.child_draw, self.accept = tokens, parents, child_draw, accept
        self.asks: list[DraftAsk] = []

    def add(self, prompts, features=None) -> None:
        pass

    def keep(self, rows) -> None:
        pass

    def update(self, emitted, features=None) -> None:
        pass

    def propose(self, a: DraftAsk) -> Draft:
        self.asks.append(a)
        B, N = len(self.fixed), max(len(t) for t in self.fixed)
        tokens = torch.tensor([t + [0] * (N - len(t)) for t in self.fixed])
        num = torch.minimum(torch.tensor([len(t) for t in self.fixed]), a.k)
        probs = None
        if not a.all_greedy:
            probs = torch.full((B, N, V), 0.5 / (V - 1), dtype=a.dtype)
            probs.scatter_(2, tokens[..., None], 0.5)
        parents = None if self.fixed_parents is None else \
            torch.tensor([p + list(range(len(p) - 1, N - 1)) for p in self.fixed_parents])
        accept = None if self.accept is None else torch.tensor(self.accept, dtype=torch.float64)
        return Draft(tokens, probs, num, parents, self.child_draw, forwards=N, accept_prob=accept,
                     confidence=torch.full((B, N), 0.5, dtype=torch.float64))


def test_hybrid_grafts_the_model_draft_beside_the_lookup_trie():
    model = FixedModel([[6, 7, 50, 51], [4, 60]])  # row 0 merges with the top branch, then leaves it
    h = HybridDrafter(model, PromptLookupDrafter(max_branches=3))
    h.start([CONTEXT, CONTEXT])
    d = h.propose(ask([4, 4], nodes=[32, 32], params=[GREEDY, T1], gumbel=[False, True]))
    assert d.child_draw == "top_k" and d.probs is None  # no sampled "exact" row: point masses
    trie = started([CONTEXT], max_branches=3).propose(ask([4], nodes=[32]))
    copy_paths = set(paths(trie, 0))
    model_paths = [{(6,), (6, 7), (6, 7, 50), (6, 7, 50, 51)}, {(4,), (4, 60)}]
    for b in range(2):
        got = paths(d, b)
        assert len(got) == len(set(got)) and set(got) == copy_paths | model_paths[b]
        r = reaches(d, b)
        assert all(r[i] >= r[i + 1] for i in range(len(r) - 1))
    # estimates: a merged node keeps the lookup's; a new model node gets the model rate times
    # what the lookup's siblings leave
    p0, a0 = paths(d, 0), d.accept_prob[0].tolist()
    pt, at = paths(trie, 0), trie.accept_prob[0].tolist()
    assert a0[p0.index((6, 7))] == at[pt.index((6, 7))]
    rate = 0.3  # model_prior: nothing observed yet
    assert a0[p0.index((6, 7, 50))] == pytest.approx(rate * (1 - at[pt.index((6, 7, 9))]))
    assert a0[p0.index((6, 7, 50, 51))] == pytest.approx(rate)
    p1, a1 = paths(d, 1), d.accept_prob[1].tolist()
    assert a1[p1.index((4, 60))] == pytest.approx(rate * (1 - at[pt.index((4, 8))] - at[pt.index((4, 5))]))
    assert model.asks[0].k.tolist() == [4, 4]  # both rows drafted by the model too


def test_hybrid_budget_and_sampled_rows_either_or():
    model = FixedModel([[6, 7, 50, 51], [8, 8, 8], [30, 31, 32]])
    h = HybridDrafter(model, PromptLookupDrafter(max_branches=3))
    h.start([CONTEXT, CONTEXT, [40, 41]])
    d = h.propose(ask([4, 4, 3], nodes=[5, 32, 32], params=[GREEDY, T1, T1], gumbel=[False, False, False]))
    assert int(d.num_draft[0]) == 5  # the budget
    # sampled "exact" rows: the copy's chain where it is likely enough (row 1), else the model's (row 2)
    assert paths(d, 1) == [(6,), (6, 7), (6, 7, 9), (6, 7, 9, 1)]
    assert paths(d, 2) == [(30,), (30, 31), (30, 31, 32)]
    assert model.asks[0].k.tolist() == [4, 0, 3]
    assert d.child_draw == "iid" and d.probs is not None  # row 2 verifies the model's q
    q = d.probs
    assert torch.equal(q[2, :3], model.propose(ask([3, 3, 3], params=[T1] * 3)).probs[2, :3])
    assert torch.equal(q[1, :4].argmax(-1), d.tokens[1, :4]) and bool((q[1, :4].max(-1).values == 1).all())


def test_hybrid_keeps_a_model_tree_for_sampled_rows_in_its_order():
    # a model tree drawn without replacement: siblings must stay in drawing order for its verifier
    model = FixedModel([[30, 31, 32, 33]], parents=[[-1, -1, 0, 0]], child_draw="without_replacement",
                       accept=[[0.2, 0.6, 0.5, 0.4]])  # by reach, node 1 would come first
    h = HybridDrafter(model, PromptLookupDrafter(max_branches=3))
    h.start([[40, 41]])
    d = h.propose(ask([4], nodes=[8], params=[T1]))
    assert d.child_draw == "without_replacement"
    assert d.tokens[0].tolist() == [30, 31, 32, 33] and d.parents[0].tolist() == [-1, -1, 0, 0]
    assert torch.equal(d.probs[0], model.propose(ask([4], params=[T1])).probs[0])


def test_hybrid_without_nodes_is_exactly_as_before():
    rng = random.Random(5)
    ctxs = [CONTEXT, [rng.randrange(5) for _ in range(30)], [40, 41], [1, 2, 3, 1, 2]]
    model_tokens = [[6, 7, 50], [1, 2, 3], [30, 31, 32], [9, 9, 9]]
    params = [GREEDY, T1, T1, GREEDY]
    outs = []
    for copy, nodes in [(PromptLookupDrafter(), None), (None, None), (None, [0, 0, 0, 0])]:
        h = HybridDrafter(FixedModel(model_tokens), copy)
        h.start(ctxs)
        outs.append(h.propose(ask([3, 3, 3, 3], nodes=nodes, params=params, gumbel=[False, False, True, False])))
    for o in outs[1:]:
        assert o.parents is None and o.child_draw == "single"
        for name in ("tokens", "num_draft", "probs", "accept_prob", "confidence"):
            assert torch.equal(getattr(o, name).nan_to_num(-1), getattr(outs[0], name).nan_to_num(-1)), name


# ----------------------------------------------------------------------------------------------
# The engine end to end

COSTS = PassCosts({w: 1.0 + 0.03 * (w - 1) for w in range(1, 40)}, draft_step=0.03)
PROMPTS = ["abcab abcab abd abc", "hello hello help hel", "xyz", "the cat the cap the ca"]


class Recorder:
    """Wraps the engine's verify step: counts the tree drafts verified and the accepted nodes
    that were not their parent's first child (a sibling branch paid)."""

    def __init__(self, monkeypatch) -> None:
        self.trees = self.sibling_accepted = 0
        real = engine_step.verify_step

        def verify_step(m, state, d, logits):
            out = real(m, state, d, logits)
            if not d.is_chain:
                self.trees += 1
                par, path = d.parent_index().cpu(), out.accepted_nodes().cpu()
                for b in range(path.shape[0]):
                    for i in path[b][path[b] >= 0].tolist():
                        self.sibling_accepted += bool((par[b, :i] == par[b, i]).any())
            return out

        monkeypatch.setattr(engine_step, "verify_step", verify_step)


def tree_drafters(tiny_target, tiny_draft):
    return {"ngram-tree": lambda: PromptLookupDrafter(max_branches=4),
            "hybrid-tree": lambda: HybridDrafter(ModelDrafter(tiny_draft)),
            "eagle-hybrid-tree": lambda: HybridDrafter(EagleDrafter(tiny_eagle(tiny_target, seed=3)))}


KINDS = ["ngram-tree", "hybrid-tree", "eagle-hybrid-tree"]


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_trees_give_the_target_only_text(tiny_target, tiny_draft, monkeypatch, kind):
    want = SpeculativeDecoder(tiny_target, None).generate(PROMPTS, 40, GREEDY).token_ids
    rec = Recorder(monkeypatch)
    dec = SpeculativeDecoder(tiny_target, tree_drafters(tiny_target, tiny_draft)[kind](), k="tree", costs=COSTS)
    assert dec.generate(PROMPTS, 40, GREEDY).token_ids == want
    assert rec.trees > 5 and rec.sibling_accepted > 0, (rec.trees, rec.sibling_accepted)


@pytest.mark.parametrize("kind", KINDS)
def test_gumbel_trees_give_the_target_only_text(tiny_target, tiny_draft, monkeypatch, kind):
    prompts, seeds, sp = PROMPTS * 2, list(range(21, 29)), SamplingParams(temperature=0.7)
    want = SpeculativeDecoder(tiny_target, None, method="gumbel").generate(prompts, 64, sp, seeds=seeds).token_ids
    rec = Recorder(monkeypatch)
    dec = SpeculativeDecoder(tiny_target, tree_drafters(tiny_target, tiny_draft)[kind](), k="tree", costs=COSTS,
                             method="gumbel")
    assert dec.generate(prompts, 64, sp, seeds=seeds).token_ids == want
    assert rec.trees > 5 and rec.sibling_accepted > 0, (rec.trees, rec.sibling_accepted)


# Sampled "exact" rows: the whole generations' law, by tests/test_engine_law.py's G-test.


@pytest.fixture(scope="module")
def law_harness():
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    import test_engine_law as law

    target = law.tiny_llama(vocab_size=law.V, seed=5, dtype=torch.float64, initializer_range=0.7)
    prompt_ids = [target.tokenizer(p)["input_ids"] for p in law.PROMPTS]
    thr = law.MIN_EXPECTED / law.ROWS
    laws = [law.sequence_law(target, p, law.T1, law.N_NEW, thr) for p in prompt_ids]
    return law, target, prompt_ids, laws


def _law_drafter(law, target, kind: str):
    if kind == "ngram-tree":
        return PromptLookupDrafter(max_branches=4)
    if kind == "eagle-hybrid-tree":  # the head's trees drawn without replacement, beside copied chains
        return HybridDrafter(EagleDrafter(tiny_eagle(target, seed=3)))
    lm = law.tiny_llama(vocab_size=law.V, seed=5, dtype=torch.float64, initializer_range=0.7)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # test_engine_law's draft_lm: the target with noise, q near p
        for p in lm.model.parameters():
            p.add_(0.35 * p.std() * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return HybridDrafter(ModelDrafter(lm))


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_sampled_exact_rows_with_trees_follow_the_target_law(law_harness, monkeypatch, kind):
    law, target, prompt_ids, laws = law_harness
    rec = Recorder(monkeypatch)
    drafter = _law_drafter(law, target, kind)
    asked = []
    propose = drafter.propose
    monkeypatch.setattr(drafter, "propose", lambda a: (asked.append(a.nodes is not None and bool(a.nodes.any())),
                                                       propose(a))[1])
    samples, _ = law.generate(target, drafter, "tree", law.T1, prompt_ids, 900_000, monkeypatch)
    pvalue = law.g_test(samples, laws)
    assert pvalue > law.ALPHA, (kind, pvalue)
    assert sum(asked) >= 4  # the tree mode ran (sampled hybrid rows: either/or inside it)
    if kind != "hybrid-tree":  # the trees were verified, and siblings were accepted
        assert rec.trees > 3 and rec.sibling_accepted > 50, (rec.trees, rec.sibling_accepted)


@pytest.mark.slow
def test_the_law_test_rejects_trees_verified_without_removing_rejected_candidates(law_harness, monkeypatch):
    """Power: a tree verifier that keeps a rejected point mass's probability (law not renormalised
    without it) must fail the same test with the lookup's trees."""
    law, target, prompt_ids, laws = law_harness
    monkeypatch.setattr(sys.modules["verispec.verify.tree"], "_carry", lambda law_, q: law_)
    samples, _ = law.generate(target, PromptLookupDrafter(max_branches=4), "tree", law.T1, prompt_ids, 7, monkeypatch)
    assert law.g_test(samples, laws) < 1e-8
