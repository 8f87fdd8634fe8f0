"""Tree verification (verispec.verify.tree): exact by enumeration, the fast walk equal to the plain
reference on random trees, the Gumbel text equal to target-only's, validation naming the argument."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verispec.certify import reference_verify_tree
from verispec.certify.trees import TreeCase, run_tree_case
from verispec.draft import Draft
from verispec.rng import gumbel_noise
from verispec.certify.reference import gumbel_choice
from verispec.verify import verify, verify_draft, verify_tree


def random_trees(gen: torch.Generator, rnd: random.Random, B: int, N: int, V: int, child_draw: str,
                 sharp: float = 2.0):
    """B random trees of N node slots (ragged: num_draft in [0, N]) with p, q and tokens drawn as the
    child draw says: q of node i is its parent's law (siblings share it)."""
    p = torch.softmax(torch.randn(B, N + 1, V, generator=gen, dtype=torch.float64) * sharp, -1)
    law = torch.softmax(torch.randn(B, N + 1, V, generator=gen, dtype=torch.float64), -1)  # q after each slot
    parents = torch.tensor([[rnd.randrange(-1, i) for i in range(N)] for _ in range(B)], dtype=torch.int64)
    q = law.gather(1, (parents + 1)[..., None].expand(B, N, V)).contiguous()
    tokens = torch.zeros(B, N, dtype=torch.int64)
    for b in range(B):
        taken: dict[int, list[int]] = {}
        for i in range(N):
            par = int(parents[b, i])
            w = law[b, par + 1].clone()
            if child_draw == "without_replacement":
                for par in [par] + list(range(-1, i)):  # a parent with a token left (every one taken: the next)
                    w = law[b, par + 1].clone()
                    w[taken.get(par, [])] = 0
                    if bool((w > 0).any()):
                        break
                parents[b, i] = par
            tokens[b, i] = int(torch.multinomial(w, 1, generator=gen))
            taken.setdefault(par, []).append(int(tokens[b, i]))
    q = law.gather(1, (parents + 1)[..., None].expand(B, N, V)).contiguous()
    num_draft = torch.randint(0, N + 1, (B,), generator=gen)
    return p, q, tokens, parents, num_draft


def emitted(out) -> list[list[int]]:
    return [[t for t in row if t >= 0] for row in out.tokens.tolist()]


# ----------------------------------------------------------------------------------------------
# Exactness by enumeration of the shipped code (certify.trees), each mode


@pytest.mark.parametrize("mode, V, shapes, edge", [
    ("iid", 3, ("broom", "fork", "chain3", "fan3"), "random"),
    ("iid", 2, ("bush", "fan3"), "p==q"),
    ("without_replacement", 3, ("broom", "fan3", "fork", "leaf"), "random"),
    ("without_replacement", 3, ("fan3", "fork"), "p==q"),
    ("point", 3, ("broom", "bush"), "random"),
    ("top_k", 3, ("broom", "fork", "chain3"), "random"),
    ("greedy", 3, ("broom", "fan3"), "random"),
    ("gumbel", 3, ("broom", "fork", "fan3"), "random"),
])
def test_every_tree_mode_emits_the_target_law(mode, V, shapes, edge):
    res = run_tree_case(TreeCase(mode, V, shapes, edge))
    assert res.passed, res
    assert res.tv <= 1e-12 and res.probe_mismatches == 0 and res.rows > 0


# ----------------------------------------------------------------------------------------------
# The fast walk against the plain reference, token for token


@pytest.mark.parametrize("child_draw", ["iid", "without_replacement", "top_k"])
@pytest.mark.parametrize("method", ["exact", "gumbel"])
def test_fast_walk_equals_the_reference_on_random_trees(child_draw, method):
    gen, rnd = torch.Generator().manual_seed(11), random.Random(11)
    B, N, V = 96, 7, 5
    p, q, tokens, parents, num_draft = random_trees(gen, rnd, B, N, V, child_draw)
    seeds, positions = torch.arange(B) * 7 + 3, torch.randint(0, 200, (B,), generator=gen)
    out = verify_tree(p, q, tokens, parents, num_draft=num_draft, child_draw=child_draw, seeds=seeds,
                      positions=positions, method=method)
    want = reference_verify_tree(p, q, tokens, parents, num_draft=num_draft, seeds=seeds, positions=positions,
                                 child_draw=child_draw, method=method)
    assert emitted(out) == want
    assert out.num_accepted.float().mean() > 0.2  # the trees are tested, not only rejected
    # the path: nodes of the row, each a child of the one before, their tokens first in tokens
    for b in range(B):
        nodes = [n for n in out.path[b].tolist() if n >= 0]
        assert len(nodes) == int(out.num_accepted[b])
        assert [int(parents[b, n]) for n in nodes] == ([-1] + nodes)[: len(nodes)]
        assert [int(tokens[b, n]) for n in nodes] == want[b][:-1]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), V=st.integers(2, 6), N=st.integers(0, 6),
       child_draw=st.sampled_from(["iid", "without_replacement", "top_k"]), greedy_rows=st.booleans())
def test_fast_walk_equals_the_reference_hypothesis(seed, V, N, child_draw, greedy_rows):
    gen, rnd = torch.Generator().manual_seed(seed), random.Random(seed)
    B = 6
    p, q, tokens, parents, num_draft = random_trees(gen, rnd, B, N, V, child_draw, sharp=rnd.choice([0.5, 3.0]))
    if greedy_rows:  # one-hot rows (temperature 0) in the same batch
        p[::2] = torch.zeros_like(p[::2]).scatter_(-1, p[::2].argmax(-1, keepdim=True), 1.0)
    seeds, positions = torch.arange(B) + seed, torch.randint(0, 50, (B,), generator=gen)
    out = verify_tree(p, q, tokens, parents, num_draft=num_draft, child_draw=child_draw, seeds=seeds,
                      positions=positions)
    assert emitted(out) == reference_verify_tree(p, q, tokens, parents, num_draft=num_draft, seeds=seeds,
                                                 positions=positions, child_draw=child_draw)


def test_a_row_alone_and_in_a_ragged_batch_emits_the_same():
    gen, rnd = torch.Generator().manual_seed(3), random.Random(3)
    p, q, tokens, parents, num_draft = random_trees(gen, rnd, 12, 6, 4, "iid")
    seeds, positions = torch.arange(12), torch.arange(12) * 5
    both = verify_tree(p, q, tokens, parents, num_draft=num_draft, seeds=seeds, positions=positions,
                       method=["exact", "gumbel"] * 6)
    for b in range(12):
        alone = verify_tree(p[b:b + 1], q[b:b + 1], tokens[b:b + 1], parents[b:b + 1], num_draft=num_draft[b:b + 1],
                            seeds=seeds[b:b + 1], positions=positions[b:b + 1],
                            method="exact" if b % 2 == 0 else "gumbel")
        assert emitted(alone)[0] == emitted(both)[b]


# ----------------------------------------------------------------------------------------------
# Gumbel: the text is target-only Gumbel sampling whatever the tree


def test_gumbel_tree_text_is_target_only_gumbel_text():
    """A target that depends on the context only through the last token (a table), drafts of every
    shape: the tree's emitted tokens are argmax(log p + G(seed, position)) position by position,
    exactly what target-only sampling with that seed writes, and what the chain verifier writes."""
    gen, rnd = torch.Generator().manual_seed(5), random.Random(5)
    V, N, B = 6, 7, 64
    table = torch.softmax(torch.randn(V + 1, V, generator=gen, dtype=torch.float64) * 1.5, -1)  # row V: the root
    parents = torch.tensor([[rnd.randrange(-1, i) for i in range(N)] for _ in range(B)])
    tokens = torch.randint(0, V, (B, N), generator=gen)
    seeds, positions = torch.arange(B) * 31 + 1, torch.randint(0, 100, (B,), generator=gen)
    # the tree contains, for half the rows, the target-only text itself as a branch
    for b in range(0, B, 2):
        last, node, pos = V, -1, int(positions[b])
        for i in range(N):
            t = gumbel_choice(table[last].tolist(), gumbel_noise(seeds[b:b + 1], torch.tensor([pos]), V)[0].tolist())
            if rnd.random() < 0.6:
                parents[b, i], tokens[b, i] = node, t
                last, node, pos = t, i, pos + 1
    last_tok = torch.full((B, N + 1), V)
    for b in range(B):
        for i in range(N):
            last_tok[b, i + 1] = tokens[b, i]
    p = table[last_tok]  # [B, N+1, V]: p after the root and after each node
    out = verify_tree(p, None, tokens, parents, child_draw="top_k", seeds=seeds, positions=positions, method="gumbel")
    for b in range(B):
        want, last = [], V
        for k in range(int(out.num_emitted[b])):  # target-only Gumbel sampling with this seed
            t = gumbel_choice(table[last].tolist(),
                              gumbel_noise(seeds[b:b + 1], torch.tensor([int(positions[b]) + k]), V)[0].tolist())
            want.append(t)
            last = t
        assert emitted(out)[b] == want
    assert int(out.num_accepted[::2].min()) >= 1  # rows with the target's branch do walk down it
    # a chain of the tree's path, through the chain verifier, writes the same tokens
    path_tokens = torch.where(out.path >= 0, tokens.gather(1, out.path.clamp_min(0)), 0)
    chain_p = table[torch.cat([torch.full((B, 1), V), path_tokens], 1)]
    chained = verify(chain_p, None, path_tokens, num_draft=out.num_accepted, seeds=seeds, positions=positions,
                     method="gumbel")
    assert torch.equal(chained.tokens, out.tokens)


def test_a_chain_as_a_tree_draws_what_the_chain_verifier_draws():
    """Rank 0 reads STREAM_ACCEPT at each depth, the emit draw STREAM_EMIT: a chain verified as a tree
    (iid, one child each) emits what verify() emits, token for token."""
    gen = torch.Generator().manual_seed(8)
    B, K, V = 200, 4, 5
    p = torch.softmax(torch.randn(B, K + 1, V, generator=gen, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(B, K, V, generator=gen, dtype=torch.float64), -1)
    d = torch.multinomial(q.reshape(-1, V), 1, generator=gen).reshape(B, K)
    n = torch.randint(0, K + 1, (B,), generator=gen)
    seeds, pos = torch.arange(B), torch.randint(0, 99, (B,), generator=gen)
    chain_parents = (torch.arange(K) - 1).expand(B, K)
    for qq in (q, None):
        tree = verify_tree(p, qq, d, chain_parents, num_draft=n, seeds=seeds, positions=pos)
        flat = verify(p, qq, d, num_draft=n, seeds=seeds, positions=pos)
        assert torch.equal(tree.tokens, flat.tokens)
        assert torch.equal(tree.num_accepted, flat.num_accepted)


def test_verify_draft_routes_trees_and_treats_top_k_as_point_masses():
    gen, rnd = torch.Generator().manual_seed(9), random.Random(9)
    p, q, tokens, parents, num_draft = random_trees(gen, rnd, 16, 5, 4, "iid")
    seeds, positions = torch.arange(16), torch.zeros(16, dtype=torch.int64)
    draft = Draft(tokens, q, num_draft, parents=parents, child_draw="iid")
    assert not draft.is_chain
    assert torch.equal(verify_draft(p, draft, seeds=seeds, positions=positions).tokens,
                       verify_tree(p, q, tokens, parents, num_draft=num_draft, seeds=seeds, positions=positions).tokens)
    top = Draft(tokens, q, num_draft, parents=parents, child_draw="top_k")
    assert torch.equal(verify_draft(p, top, seeds=seeds, positions=positions).tokens,
                       verify_tree(p, None, tokens, parents, num_draft=num_draft, seeds=seeds,
                                   positions=positions).tokens)


# ----------------------------------------------------------------------------------------------
# Validation: malformed trees and rows, named


def _valid_tree():
    gen = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(2, 4, 5, generator=gen, dtype=torch.float64), -1)
    qrow = torch.softmax(torch.randn(2, 5, generator=gen, dtype=torch.float64), -1)
    parents = torch.tensor([[-1, -1, 0], [-1, 0, 0]])
    q = torch.stack([qrow[0].expand(3, 5), qrow[1].expand(3, 5)]).clone()  # one law per row: every node's
    q[0, 2] = torch.softmax(torch.randn(5, generator=gen, dtype=torch.float64), -1)  # node 2 hangs under node 0
    q[1, 1:] = torch.softmax(torch.randn(5, generator=gen, dtype=torch.float64), -1)
    tokens = torch.tensor([[1, 2, 3], [4, 0, 1]])
    return p, q, tokens, parents


def test_a_valid_tree_passes_validation():
    p, q, tokens, parents = _valid_tree()
    verify_tree(p, q, tokens, parents, seeds=torch.tensor([1, 2]), child_draw="without_replacement")


@pytest.mark.parametrize("breakage, match", [
    ("parent_after_child", r"parents must point to an earlier node.*parents\[0, 1\] = 2"),
    ("parent_self", r"parents must point to an earlier node"),
    ("parent_out_of_range", r"parents must be node indices"),
    ("parent_below_root", r"parents must be node indices"),
    ("parents_shape", r"parents must be \[B, N\]"),
    ("parents_float", r"parents must have an integer dtype"),
    ("tokens_shape", r"draft_tokens must be \[B, K\]"),
    ("token_out_of_range", r"draft_tokens must be ids in \[0, V=5\)"),
    ("p_nan", r"target_probs contains NaN"),
    ("p_negative", r"target_probs has negative entries"),
    ("p_sum", r"target_probs rows must sum to 1"),
    ("q_nan", r"draft_probs"),
    ("q_shape", r"draft_probs must be \[B, K, V\]"),
    ("q_zero_at_token", r"draft_probs gives probability 0"),
    ("q_siblings_differ", r"draft_probs must hold the same row for every child of one node"),
    ("wor_repeat", r"repeats a token among siblings"),
    ("num_draft", r"num_draft must lie in \[0, N=3\]"),
    ("child_draw", r"child_draw must be one of"),
    ("block", r"method 'block' verifies chains only"),
])
def test_malformed_trees_name_the_argument(breakage, match):
    p, q, tokens, parents = _valid_tree()
    kw: dict = dict(seeds=torch.tensor([1, 2]), child_draw="without_replacement")
    if breakage == "parent_after_child":
        parents[0, 1] = 2
    elif breakage == "parent_self":
        parents[1, 2] = 2
    elif breakage == "parent_out_of_range":
        parents[1, 2] = 7
    elif breakage == "parent_below_root":
        parents[0, 0] = -3
    elif breakage == "parents_shape":
        parents = parents[:, :2]
    elif breakage == "parents_float":
        parents = parents.double()
    elif breakage == "tokens_shape":
        tokens = tokens[:, :2]
    elif breakage == "token_out_of_range":
        tokens[1, 1] = 5
    elif breakage == "p_nan":
        p[1, 3, 0] = float("nan")
    elif breakage == "p_negative":
        p[0, 2] = torch.tensor([1.5, -0.5, 0.0, 0.0, 0.0], dtype=torch.float64)
    elif breakage == "p_sum":
        p[0, 1] *= 1.01
    elif breakage == "q_nan":
        q[0, 0, 4] = float("nan")
    elif breakage == "q_shape":
        q = q[:, :, :4]
    elif breakage == "q_zero_at_token":
        q[1, 0] = torch.tensor([0.25, 0.25, 0.25, 0.25, 0.0], dtype=torch.float64)  # node 0 drew token 4
    elif breakage == "q_siblings_differ":
        q[1, 2] = torch.tensor([0.2] * 5, dtype=torch.float64)  # node 2 is node 1's sibling
    elif breakage == "wor_repeat":
        tokens[1, 2] = 0  # node 2 repeats its sibling's token
    elif breakage == "num_draft":
        kw["num_draft"] = torch.tensor([3, 4])
    elif breakage == "child_draw":
        kw["child_draw"] = "beam"
    elif breakage == "block":
        kw["method"] = "block"
    with pytest.raises((ValueError, TypeError), match=match):
        verify_tree(p, q, tokens, parents, **kw)


def test_padded_slots_are_not_read():
    """Nodes past num_draft may hold anything (NaN rows, bad parents, -1 tokens)."""
    p, q, tokens, parents = _valid_tree()
    p[0, 3], q[0, 2], tokens[0, 2], parents[0, 2] = float("nan"), float("nan"), -1, 9
    out = verify_tree(p, q, tokens, parents, num_draft=torch.tensor([2, 3]), seeds=torch.tensor([1, 2]))
    assert 2 not in out.path[0].tolist()


def test_merge_rows_keeps_the_tree_paths():
    """The engine verifies greedy rows apart (chains, from the argmax) and merges: tree rows keep
    their accepted nodes, chain rows get 0..num_accepted-1."""
    from verispec.verify import merge_rows, verify_argmax

    gen, rnd = torch.Generator().manual_seed(12), random.Random(12)
    p, q, tokens, parents, num_draft = random_trees(gen, rnd, 8, 5, 4, "iid")
    tree_rows, chain_rows = torch.tensor([0, 2, 4, 6]), torch.tensor([1, 3, 5, 7])
    by_tree = verify_tree(p[tree_rows], q[tree_rows], tokens[tree_rows], parents[tree_rows],
                          num_draft=num_draft[tree_rows], seeds=tree_rows)
    by_argmax = verify_argmax(p[chain_rows].argmax(-1), tokens[chain_rows], num_draft[chain_rows])
    out = merge_rows(8, (tree_rows, by_tree), (chain_rows, by_argmax), num_draft=num_draft)
    assert torch.equal(out.accepted_nodes()[tree_rows], by_tree.path)
    assert torch.equal(out.accepted_nodes()[chain_rows], by_argmax.accepted_nodes())
    assert torch.equal(out.tokens[tree_rows], by_tree.tokens)


def test_every_tensor_the_tree_and_block_rules_build_is_on_the_inputs_device(monkeypatch, torch_without_device):
    """As for the chain (tests/test_verify.py): every torch factory verify/tree.py and verify/block.py
    call gets a device, on calls with validation, q, ragged trees and every rule."""
    import importlib

    fake, missing = torch_without_device
    for module in ("verispec.verify.tree", "verispec.verify.block"):
        monkeypatch.setattr(importlib.import_module(module), "torch", fake)
    gen, rnd = torch.Generator().manual_seed(2), random.Random(2)
    p, q, tokens, parents, num_draft = random_trees(gen, rnd, 6, 5, 4, "without_replacement")
    p[0] = torch.zeros_like(p[0]).scatter_(-1, p[0].argmax(-1, keepdim=True), 1.0)  # a greedy row
    kw = dict(num_draft=num_draft, seeds=torch.arange(6), positions=torch.arange(6))
    verify_tree(p, q, tokens, parents, child_draw="without_replacement", method=["exact"] * 4 + ["gumbel"] * 2, **kw)
    verify_tree(p, None, tokens, parents, **kw)
    chain_p = torch.softmax(torch.randn(6, 4, 4, generator=gen, dtype=torch.float64), -1)
    chain_q = torch.softmax(torch.randn(6, 3, 4, generator=gen, dtype=torch.float64), -1)
    d = torch.multinomial(chain_q.reshape(-1, 4), 1, generator=gen).reshape(6, 3)
    verify(chain_p, chain_q, d, num_draft=torch.tensor([0, 1, 2, 3, 3, 2]), seeds=torch.arange(6), method="block")
    verify(chain_p, None, d, seeds=torch.arange(6), method="block")
    assert missing == [], f"torch factories called without device= in verify/tree.py or block.py: {missing}"


def test_the_argmax_walk_equals_the_tree_rule_on_one_hot_p() -> None:
    """verify_argmax_tree (the engine's greedy fast path) against verify_tree on p = one-hot(argmax):
    random ragged trees with repeated tokens, many rows at once."""
    from verispec.draft import Draft
    from verispec.verify import verify_argmax_tree

    g = torch.Generator().manual_seed(0)
    B, N, V = 64, 7, 3  # few tokens: matches, repeats and misses all occur
    parents = torch.stack([torch.tensor([torch.randint(-1, i, (1,), generator=g).item() for i in range(N)])
                           for _ in range(B)])
    tokens = torch.randint(0, V, (B, N), generator=g)
    num = torch.randint(0, N + 1, (B,), generator=g)
    top = torch.randint(0, V, (B, N + 1), generator=g)
    p = torch.nn.functional.one_hot(top, V).double()
    want = verify_tree(p, None, tokens, parents, num_draft=num, child_draw="top_k",
                       seeds=torch.arange(B), positions=torch.zeros(B, dtype=torch.int64))
    got = verify_argmax_tree(top, Draft(tokens, None, num, parents=parents, child_draw="top_k"))
    assert torch.equal(got.num_accepted, want.num_accepted)
    assert torch.equal(got.tokens, want.tokens)
    assert torch.equal(got.accepted_nodes(), want.accepted_nodes())
    assert int(want.num_accepted.max()) >= 2  # deep paths were walked
