"""Growing draft trees (drafters/tree_growth.py): shape, order, and the draws the exact rule needs.

The drafter here is a table: the logits after a node depend on the node's token only, so every
node's law is known in closed form and the grower can be checked against a plain reference that
builds the same EAGLE-2 tree with Python loops, one row at a time.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from scipy import stats as sps

from verispec.drafters import DraftAsk
from verispec.drafters.drawing import sample_draft
from verispec.drafters.tree_growth import draft_tree
from verispec.sampling import RowParams, SamplingParams

V = 12
GREEDY = SamplingParams(temperature=0.0)
T1 = SamplingParams(temperature=1.0)


def table(seed: int = 0, scale: float = 2.0) -> torch.Tensor:
    """``[V, V]`` logits after a node holding token x: row x."""
    return scale * torch.randn(V, V, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def grow(tab: torch.Tensor, root: torch.Tensor, ask: DraftAsk, width: int):
    """Run the grower with the table as the drafter; also returns the nodes each expand call got."""
    fed: list[tuple[torch.Tensor, torch.Tensor]] = []

    def expand(tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        fed.append((tokens.clone(), parents.clone()))
        return tab[tokens]  # [B, m, V]

    d, calls = draft_tree(root, expand, ask, None, torch.zeros(len(root), dtype=torch.int64), width=width)
    return d, calls, fed


def ask_of(k: list[int], nodes: list[int], params: SamplingParams, seeds: list[int] | None = None,
           method: str = "exact") -> DraftAsk:
    a = DraftAsk.of(k, V, params, seeds=seeds, method=method, dtype=torch.float64)
    a.nodes = torch.tensor(nodes, dtype=torch.int64)
    return a


def reference_greedy_tree(tab: torch.Tensor, root: torch.Tensor, k: int, nodes: int, width: int) -> list[tuple]:
    """EAGLE-2's tree for one greedy row, plainly: per depth, the ``width`` best (value, parent,
    rank) children of the frontier (value = the product of softmax probabilities along the path,
    at most ``width`` per node), then the ``nodes`` best of all by (value desc, depth, drafting
    order). Returns ``(token, parent index in the result, value)`` per kept node."""
    drafted: list[dict] = []
    frontier = [dict(id=-1, value=1.0, probs=torch.softmax(root, -1))]
    for depth in range(1, k + 1):
        cands = []
        for f in frontier:
            s, top = f["probs"].topk(width)
            for r in range(width):
                cands.append((f["value"] * float(s[r]), f["id"], int(top[r]), r))
        cands.sort(key=lambda c: -c[0])  # stable: drafting order (frontier, then rank) among equals
        chosen = [c for c in cands[:width] if c[0] > 0]
        chosen.sort(key=lambda c: (-c[0]))
        frontier = []
        for value, parent, token, _ in chosen:
            node = dict(id=len(drafted), value=value, parent=parent, token=token, depth=depth,
                        probs=torch.softmax(tab[token], -1))
            drafted.append(node)
            frontier.append(node)
        kth = sorted((n["value"] for n in drafted), reverse=True)[min(nodes, len(drafted)) - 1]
        if len(drafted) >= nodes and max(n["value"] for n in frontier) <= kth:
            break
    kept = sorted(drafted, key=lambda n: (-n["value"], n["depth"], n["id"]))[:nodes]
    index = {n["id"]: i for i, n in enumerate(kept)}
    return [(n["token"], index.get(n["parent"], -1), n["value"]) for n in kept]


@pytest.mark.parametrize("seed, k, nodes, width", [(0, 4, 7, 3), (1, 3, 12, 4), (2, 5, 5, 2), (3, 2, 8, 4)])
def test_a_greedy_tree_is_eagle2s_tree(seed, k, nodes, width) -> None:
    tab = table(seed)
    root = torch.randn(2, V, generator=torch.Generator().manual_seed(seed + 10), dtype=torch.float64)
    d, _, _ = grow(tab, root, ask_of([k, k], [nodes, nodes], GREEDY), width)
    assert d.child_draw == "top_k" and d.probs is None  # greedy: point masses, no dense q
    for b in range(2):
        want = reference_greedy_tree(tab, root[b], k, nodes, width)
        n = int(d.num_draft[b])
        assert n == len(want)
        assert d.tokens[b, :n].tolist() == [w[0] for w in want]
        assert d.parents[b, :n].tolist() == [w[1] for w in want]


def test_every_prefix_of_a_tree_is_a_tree_in_rank_order() -> None:
    """Nodes come best first: a parent before its children, and a node's children in the order
    they were drawn (so cutting a tree to its first W nodes keeps a prefix of every node's draws)."""
    tab = table(4, scale=1.0)
    root = torch.randn(3, V, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    for params in (GREEDY, T1):
        d, _, _ = grow(tab, root, ask_of([5, 4, 3], [10, 6, 9], params, seeds=[1, 2, 3]), 3)
        for b in range(3):
            par = d.parents[b, : int(d.num_draft[b])].tolist()
            assert all(p < i for i, p in enumerate(par))
            est = d.accept_prob[b, : int(d.num_draft[b])]
            if params is T1:  # each node's law: its parent's q (the root's: the root logits')
                for i, p in enumerate(par):
                    law = torch.softmax(root[b] if p < 0 else tab[int(d.tokens[b, p])], -1)
                    torch.testing.assert_close(d.probs[b, i], law)
            for p in set(par):  # siblings: rank values non-increasing in index order
                kids = [i for i, q in enumerate(par) if q == p]
                assert all(est[x] >= est[y] for x, y in zip(kids, kids[1:]))


def test_budgets_and_depths_are_kept() -> None:
    tab = table(6)
    root = torch.randn(3, V, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    d, _, _ = grow(tab, root, ask_of([3, 0, 6], [5, 8, 2], GREEDY), 4)
    assert d.num_draft.tolist()[1] == 0  # k = 0: no draft at all
    assert int(d.num_draft[0]) <= 5 and int(d.num_draft[2]) <= 2
    depth = d.depth()
    assert int(depth[0, : int(d.num_draft[0])].max()) <= 3


def test_a_depth_is_fed_once_with_its_parents() -> None:
    """``expand`` gets each depth's new nodes once, their parents among the earlier ones."""
    tab = table(8)
    root = torch.randn(1, V, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    _, calls, fed = grow(tab, root, ask_of([4], [16], GREEDY), 3)
    assert calls == len(fed) == 3  # depths 1-3 fed; depth 4 is the last and needs no logits
    seen = 0
    for tokens, parents in fed:
        assert bool((parents < seen).all())
        seen += tokens.shape[1]


def test_sampled_children_are_drawn_without_replacement_from_q() -> None:
    """The root's first two children over many seeds: P(c0 = a, c1 = b) = q(a) q(b) / (1 - q(a)),
    and how many children the root gets does not depend on the draws."""
    tab = table(10, scale=0.7)
    root = torch.randn(V, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    q = torch.softmax(root, -1)
    n = 6000
    ask = ask_of([1] * n, [2] * n, T1, seeds=list(range(n)))
    d, _, _ = grow(tab, root.expand(n, V).clone(), ask, 2)
    assert d.child_draw == "without_replacement"
    assert set(d.num_draft.tolist()) == {2} and bool((d.parents[:, :2] == -1).all())
    torch.testing.assert_close(d.probs[:, 0], q.expand(n, V))  # each child's law: its parent's q
    counts = Counter(zip(d.tokens[:, 0].tolist(), d.tokens[:, 1].tolist()))
    cells = [(a, b) for a in range(V) for b in range(V) if a != b]
    expected = torch.tensor([float(q[a] * q[b] / (1 - q[a])) for a, b in cells]) * n
    observed = torch.tensor([counts.get(c, 0) for c in cells], dtype=torch.float64)
    assert sum(counts.get((a, a), 0) for a in range(V)) == 0  # never twice the same token
    big = expected >= 5  # pool the small cells
    obs = torch.cat([observed[big], observed[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    assert sps.chisquare(obs.numpy(), exp.numpy()).pvalue > 1e-4


def test_a_sampled_tree_is_a_pure_function_of_the_seeds() -> None:
    tab = table(12, scale=1.0)
    root = torch.randn(2, V, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    a, _, _ = grow(tab, root, ask_of([4, 4], [9, 9], T1, seeds=[5, 6]), 3)
    b, _, _ = grow(tab, root, ask_of([4, 4], [9, 9], T1, seeds=[5, 6]), 3)
    c, _, _ = grow(tab, root, ask_of([4, 4], [9, 9], T1, seeds=[7, 8]), 3)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents)
    assert not torch.equal(a.tokens, c.tokens)


def test_the_first_child_of_a_gumbel_row_is_the_chains_gumbel_draft() -> None:
    tab = table(14, scale=1.0)
    root = torch.randn(4, V, generator=torch.Generator().manual_seed(15), dtype=torch.float64)
    seeds = [21, 22, 23, 24]
    d, _, _ = grow(tab, root, ask_of([2] * 4, [6] * 4, T1, seeds=seeds, method="gumbel"), 3)
    first = [int(d.tokens[b][(d.parents[b] == -1).nonzero()[0, 0]]) for b in range(4)]
    chain, _ = sample_draft(root, RowParams.of([T1] * 4), "gumbel", torch.tensor(seeds), torch.zeros(4, dtype=torch.int64))
    assert first == chain.tolist()


def test_no_row_asks_for_a_tree_then_the_root_children_only() -> None:
    """k = 1: one depth, up to ``width`` children of the root, no expand call."""
    tab = table(16)
    root = torch.randn(1, V, generator=torch.Generator().manual_seed(17), dtype=torch.float64)
    d, calls, _ = grow(tab, root, ask_of([1], [4], GREEDY), 4)
    assert calls == 0 and int(d.num_draft[0]) == 4
    assert d.tokens[0, :4].tolist() == torch.softmax(root[0], -1).topk(4).indices.tolist()
    assert math.isclose(float(d.accept_prob[0, 0]), float(torch.softmax(root[0], -1).max()), rel_tol=1e-6)
