"""Block verification (verify(method="block"), verispec.verify.block): the target's law by enumeration,
the paper's worked example, never fewer accepted tokens than token by token, equal to the plain
reference, and the draws it reads."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from verispec.certify import reference_verify, reference_verify_block
from verispec.certify.trees import TreeCase, _block_outcomes, run_tree_case
from verispec.rng import COUNTER, STREAM_BLOCK, STREAM_EMIT, Draws
from verispec.verify import verify


@pytest.mark.parametrize("V, k, edge", [(2, 3, "random"), (3, 3, "random"), (4, 2, "random"), (3, 3, "p==q"),
                                        (4, 3, "point"), (4, 1, "random")])
def test_block_verification_emits_the_target_law(V, k, edge):
    res = run_tree_case(TreeCase("block", V, (), edge, k))
    assert res.passed, res
    assert res.tv <= 1e-12 and res.probe_mismatches == 0


def _expected_accepted(p: list[list[float]], q: list[list[float]], k: int, block: bool) -> float:
    """Exact expected accepted drafts of one pass on context-independent p and q (lists per slot)."""
    V = len(p[0])
    total = 0.0
    for x in itertools.product(range(V), repeat=k):
        w = math.prod(q[i][x[i]] for i in range(k))
        if w == 0:
            continue
        if block:
            total += w * sum(wt * (len(em) - 1) for wt, em, _, _ in _block_outcomes(p, q, x))
        else:
            keep = 1.0
            for i in range(k):
                keep *= min(1.0, p[i][x[i]] / q[i][x[i]])
                total += w * keep
    return total


def test_the_papers_example_eleven_ninths():
    """Sun et al.'s example: V = {a, b}, the draft says a with 2/3, the target b with 2/3, two drafts:
    token by token accepts 10/9 tokens per pass, block verification 11/9."""
    p = [[1 / 3, 2 / 3]] * 3
    q = [[2 / 3, 1 / 3]] * 2
    assert _expected_accepted(p, q, 2, block=False) == pytest.approx(10 / 9, abs=1e-12)
    assert _expected_accepted(p, q, 2, block=True) == pytest.approx(11 / 9, abs=1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_block_never_accepts_fewer_than_token_by_token(seed):
    gen = torch.Generator().manual_seed(seed)
    V, k = 3, 3
    p = torch.softmax(torch.randn(k + 1, V, generator=gen, dtype=torch.float64) * 2, -1).tolist()
    q = torch.softmax(torch.randn(k, V, generator=gen, dtype=torch.float64) * 2, -1).tolist()
    block, token = _expected_accepted(p, q, k, True), _expected_accepted(p, q, k, False)
    assert block >= token - 1e-12, (block, token)


def _batch(seed: int, B: int = 300, K: int = 4, V: int = 5, point: bool = False):
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(B, K + 1, V, generator=gen, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(B, K, V, generator=gen, dtype=torch.float64), -1)
    d = torch.multinomial(q.reshape(-1, V), 1, generator=gen).reshape(B, K)
    n = torch.randint(0, K + 1, (B,), generator=gen)
    seeds, pos = torch.arange(B) * 13 + seed, torch.randint(0, 500, (B,), generator=gen)
    return p, None if point else q, d, n, seeds, pos


@pytest.mark.parametrize("point", [False, True])
def test_block_equals_the_reference_row_by_row(point):
    p, q, d, n, seeds, pos = _batch(3, point=point)
    out = verify(p, q, d, num_draft=n, seeds=seeds, positions=pos, method="block")
    want = reference_verify_block(p, q, d, num_draft=n, seeds=seeds, positions=pos)
    assert [[t for t in row if t >= 0] for row in out.tokens.tolist()] == want
    assert torch.equal(out.num_emitted, out.num_accepted + 1)


def test_block_rows_share_a_call_with_exact_and_gumbel_rows():
    p, q, d, n, seeds, pos = _batch(4, B=60)
    methods = ["block", "exact", "gumbel"] * 20
    both = verify(p, q, d, num_draft=n, seeds=seeds, positions=pos, method=methods)
    for m in ("block", "exact", "gumbel"):
        rows = torch.tensor([i for i, x in enumerate(methods) if x == m])
        alone = verify(p[rows], q[rows], d[rows], num_draft=n[rows], seeds=seeds[rows], positions=pos[rows], method=m)
        assert torch.equal(both.tokens[rows], alone.tokens)
    exact_rows = torch.tensor([i for i, x in enumerate(methods) if x == "exact"])
    want = reference_verify(p[exact_rows], q[exact_rows], d[exact_rows], num_draft=n[exact_rows],
                            seeds=seeds[exact_rows], positions=pos[exact_rows])
    assert [[t for t in row if t >= 0] for row in both.tokens[exact_rows].tolist()] == want


def test_p_equal_q_keeps_every_draft():
    """w_i = 1 and Z_i = 0 at every slot (h_i = 0/0, defined 0): the block is kept whole."""
    p, q, d, n, seeds, pos = _batch(5, B=200)
    p[:, :-1] = q
    out = verify(p, q, d, num_draft=n, seeds=seeds, positions=pos, method="block")
    assert torch.equal(out.num_accepted, n)


def test_greedy_rows_take_the_greedy_path():
    p, q, d, n, seeds, pos = _batch(6, B=50)
    hot = torch.zeros_like(p).scatter_(-1, p.argmax(-1, keepdim=True), 1.0)
    a = verify(hot, q, d, num_draft=n, seeds=seeds, positions=pos, method="block")
    b = verify(hot, q, d, num_draft=n, seeds=seeds, positions=pos, method="exact")
    assert torch.equal(a.tokens, b.tokens)


class _Recording(Draws):
    def __init__(self):
        self.calls = []

    def uniform(self, seeds, positions, stream):
        self.calls.append((stream, torch.as_tensor(positions).clone()))
        return COUNTER.uniform(seeds, positions, stream)


def test_eta_is_keyed_by_the_pass_start_and_the_emit_draw_by_its_slot():
    """Every eta_i is read whatever tau comes out, so it is keyed by the position of slot 0 (the
    next pass starts later and never meets it); the emitted token's draw by its own slot."""
    p, q, d, n, seeds, pos = _batch(7, B=40, K=3)
    rec = _Recording()
    out = verify(p, q, d, num_draft=n, seeds=seeds, positions=pos, method="block", draws=rec)
    streams = {s for s, _ in rec.calls}
    assert {STREAM_BLOCK + i for i in (1, 2, 3)} <= streams and STREAM_EMIT in streams
    for s, at in rec.calls:
        if s >= STREAM_BLOCK:
            assert torch.equal(at, pos)
        elif s == STREAM_EMIT:
            assert torch.equal(at, pos + out.num_accepted)


def test_block_validates_every_slot_it_reads():
    p, q, d, n, seeds, pos = _batch(8, B=4, K=3)
    n = torch.full((4,), 3)
    q[2, 2, 1] = float("nan")  # the last draft slot of row 2: block reads it whatever tau is
    with pytest.raises(ValueError, match="draft_probs"):
        verify(p, q, d, num_draft=n, seeds=seeds, positions=pos, method="block")
    with pytest.raises(ValueError, match="method"):
        verify(p, q, d, num_draft=n, seeds=seeds, positions=pos, method=["block", "beam", "exact", "exact"])
