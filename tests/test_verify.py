"""The vectorised verifier (verispec.verify): input validation, exactness, determinism.

Exactness is shown here in two of the three ways of the project (the third, enumeration, is in
test_certify.py):

* pathwise: for float64 inputs ``verify`` emits exactly the tokens of the plain per-row
  float64 reference ``certify.reference_verify`` (same seeds, same positions), over many random
  configurations;
* statistically: G-tests on 1e5 draws per configuration compare the law of the first emitted
  token (and, for one configuration, of the first two tokens of an engine-like loop) with the
  target's law, and the same G-tests reject deliberately wrong verifiers.

Determinism: a row's output is a function of its own inputs, seed and position only: alone or
in batches of 4 and 16, on reruns, and with 1 or 2 torch threads.
"""

from __future__ import annotations

import contextlib
import importlib
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from verispec import certify, verify
from verispec.rng import COUNTER, STREAM_ACCEPT, STREAM_DRAFT, STREAM_EMIT, sample, uniform
from verispec.verify import SUM_TOLERANCE, Verification, gumbel_argmax

V_MOD = importlib.import_module("verispec.verify.chain")

F64 = torch.float64


# ----------------------------------------------------------------------------------------------
# Random inputs


def rand_probs(gen: torch.Generator, shape, *, dtype=F64, zero_frac=0.3, power=3.0) -> torch.Tensor:
    """Random distributions over the last dim, with some exact zeros (at least one token kept)."""
    w = torch.rand(shape, generator=gen, dtype=F64) ** power
    w = w.masked_fill(torch.rand(shape, generator=gen) < zero_frac, 0.0)
    keep = torch.randint(0, shape[-1], (*shape[:-1], 1), generator=gen)
    w = w.scatter(-1, keep, 0.5 + torch.rand((*shape[:-1], 1), generator=gen, dtype=F64))
    return (w / w.sum(-1, keepdim=True)).to(dtype)


def one_hot(tokens: torch.Tensor, V: int, dtype=F64) -> torch.Tensor:
    return torch.zeros(*tokens.shape, V, dtype=dtype).scatter_(-1, tokens[..., None], 1.0)


def slot_positions(positions: torch.Tensor, K: int) -> torch.Tensor:
    return positions[:, None] + torch.arange(K, dtype=torch.int64)


def draw_drafts(q: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Draft tokens sampled from q [B, K, V] with the drafter's counter-based stream."""
    return sample(q, seeds[:, None], slot_positions(positions, q.shape[1]), STREAM_DRAFT)


def make_batch(
    gen: torch.Generator,
    B: int,
    K: int,
    V: int,
    *,
    dtype=F64,
    drafts: str = "q",  # "q": sampled from draft_probs; "point": point masses (draft_probs=None)
    greedy_frac: float = 0.0,
    near: bool = False,  # q close to p (high acceptance)
    ragged: bool = True,
    num_draft: torch.Tensor | None = None,
) -> dict:
    p = rand_probs(gen, (B, K + 1, V))
    greedy = torch.rand(B, generator=gen) < greedy_frac
    if bool(greedy.any()):
        p[greedy] = one_hot(torch.randint(0, V, (int(greedy.sum()), K + 1), generator=gen), V)
    if near:
        q = p[:, :K] * (1 + 0.2 * torch.rand(B, K, V, generator=gen, dtype=F64))
        q = q + 1e-3 * rand_probs(gen, (B, K, V), zero_frac=0.0)
        q = q / q.sum(-1, keepdim=True)
    else:
        q = rand_probs(gen, (B, K, V))
    seeds = torch.randint(-(2**62), 2**62, (B,), generator=gen)
    positions = torch.randint(0, 10_000, (B,), generator=gen)
    if num_draft is None:
        num_draft = torch.randint(0, K + 1, (B,), generator=gen) if ragged else torch.full((B,), K)
    if drafts == "q":
        d = draw_drafts(q, seeds, positions)
    else:
        d = torch.randint(0, V, (B, K), generator=gen)
        # make long accepted runs likely: often draft the target's most likely token
        likely = torch.rand(B, K, generator=gen) < 0.5
        d = torch.where(likely, p[:, :K].argmax(-1), d)
    d = torch.where(torch.arange(K) < num_draft[:, None], d, -1)  # placeholders past num_draft
    return dict(
        target_probs=p.to(dtype),
        draft_probs=None if drafts == "point" else q.to(dtype),
        draft_tokens=d,
        num_draft=num_draft,
        seeds=seeds,
        positions=positions,
    )


def emitted(out: Verification) -> list[list[int]]:
    return [out.tokens[b, : int(out.num_emitted[b])].tolist() for b in range(out.tokens.shape[0])]


def take_rows(batch: dict, rows) -> dict:
    rows = torch.as_tensor(rows)
    return {k: (None if v is None else v[rows]) for k, v in batch.items()}


def cat_batches(*batches: dict) -> dict:
    out = {}
    for k in batches[0]:
        vals = [b[k] for b in batches]
        out[k] = None if vals[0] is None else torch.cat(vals)
    return out


# ----------------------------------------------------------------------------------------------
# Input validation: one bad argument at a time, the error names it


def _valid(dtype=F64) -> dict:
    """Three rows drafting 2, 1 and 0 tokens with q = p, so every draft is accepted and every slot up
    to the bonus is read (validation checks the rows the rules read)."""
    gen = torch.Generator().manual_seed(0)
    b = make_batch(gen, 3, 2, 5, dtype=dtype, ragged=False)
    b["num_draft"] = torch.tensor([2, 1, 0])
    b["draft_probs"] = b["target_probs"][:, :2].clone()
    return b


def _call(b: dict, **kw) -> Verification:
    b = dict(b)
    return verify(b.pop("target_probs"), b.pop("draft_probs"), b.pop("draft_tokens"), **b, **kw)


def test_valid_base_case_passes():
    out = _call(_valid())
    assert out.tokens.shape == (3, 3)


def _set(name, index, value):
    def edit(b):
        x = b[name].clone()
        x[index] = value
        b[name] = x

    return edit


def _replace(name, fn):
    def edit(b):
        b[name] = fn(b[name])

    return edit


def _scale_row(name, index, factor):
    def edit(b):
        x = b[name].clone()
        x[index] = x[index] * factor
        b[name] = x

    return edit


BAD_INPUTS = {
    # NaN / inf
    "target_nan": (_set("target_probs", (0, 0, 1), math.nan), ValueError, "target_probs"),
    "target_inf": (_set("target_probs", (1, 1, 0), math.inf), ValueError, "target_probs"),
    "target_neginf": (_set("target_probs", (0, 1, 3), -math.inf), ValueError, "target_probs"),
    "draft_nan": (_set("draft_probs", (0, 1, 2), math.nan), ValueError, "draft_probs"),
    "draft_inf": (_set("draft_probs", (1, 0, 4), math.inf), ValueError, "draft_probs"),
    # negative entries (the row still sums to 1)
    "target_negative": (_set("target_probs", (0, 0), torch.tensor([-0.2, 0.6, 0.2, 0.2, 0.2])), ValueError,
                        "target_probs"),
    "draft_negative": (_set("draft_probs", (0, 1), torch.tensor([0.3, 0.3, 0.3, 0.3, -0.2])), ValueError,
                       "draft_probs"),
    # rows not summing to 1
    "target_sum": (_scale_row("target_probs", (2, 0), 1.1), ValueError, "target_probs"),
    "target_sum_bonus_slot": (_scale_row("target_probs", (0, 2), 0.5), ValueError, "target_probs"),
    "draft_sum": (_scale_row("draft_probs", (1, 0), 0.9), ValueError, "draft_probs"),
    # ranks and shapes
    "target_rank2": (_replace("target_probs", lambda p: p[:, 0]), ValueError, "target_probs"),
    "target_rank4": (_replace("target_probs", lambda p: p[None]), ValueError, "target_probs"),
    "target_no_slots": (_replace("target_probs", lambda p: p[:, :0]), ValueError, "target_probs"),
    "draft_probs_rank2": (_replace("draft_probs", lambda q: q[:, 0]), ValueError, "draft_probs"),
    "draft_probs_B": (_replace("draft_probs", lambda q: q[:2]), ValueError, "draft_probs"),
    "draft_probs_K": (_replace("draft_probs", lambda q: q[:, :1]), ValueError, "draft_probs"),
    "draft_probs_V": (_replace("draft_probs", lambda q: q[..., :4]), ValueError, "draft_probs"),
    "draft_tokens_rank1": (_replace("draft_tokens", lambda d: d[:, 0]), ValueError, "draft_tokens"),
    "draft_tokens_B": (_replace("draft_tokens", lambda d: torch.cat([d, d[:1]])), ValueError, "draft_tokens"),
    "draft_tokens_K": (_replace("draft_tokens", lambda d: torch.cat([d, d[:, :1]], 1)), ValueError, "draft_tokens"),
    "num_draft_shape": (_replace("num_draft", lambda n: n[:2]), ValueError, "num_draft"),
    "seeds_shape": (_replace("seeds", lambda s: s[:, None]), ValueError, "seeds"),
    "positions_shape": (_replace("positions", lambda s: s[:1]), ValueError, "positions"),
    # token ids
    "token_negative": (_set("draft_tokens", (0, 1), -1), ValueError, "draft_tokens"),
    "token_too_big": (_set("draft_tokens", (1, 0), 5), ValueError, "draft_tokens"),
    # num_draft range
    "num_draft_too_big": (_set("num_draft", 2, 3), ValueError, "num_draft"),
    "num_draft_negative": (_set("num_draft", 1, -1), ValueError, "num_draft"),
    "positions_negative": (_set("positions", 0, -1), ValueError, "positions"),
    # dtypes
    "token_float": (_replace("draft_tokens", lambda d: d.double()), TypeError, "draft_tokens"),
    "token_bool": (_replace("draft_tokens", lambda d: d > 0), TypeError, "draft_tokens"),
    "num_draft_float": (_replace("num_draft", lambda n: n.float()), TypeError, "num_draft"),
    "seeds_float": (_replace("seeds", lambda s: s.double()), TypeError, "seeds"),
    "target_int": (_replace("target_probs", lambda p: (p > 0.5).long()), TypeError, "target_probs"),
    "target_not_tensor": (_replace("target_probs", lambda p: p.tolist()), TypeError, "target_probs"),
    "draft_probs_not_tensor": (_replace("draft_probs", lambda q: q.numpy()), TypeError, "draft_probs"),
    "draft_tokens_not_tensor": (_replace("draft_tokens", lambda d: d.tolist()), TypeError, "draft_tokens"),
    "dtype_mismatch": (_replace("draft_probs", lambda q: q.float()), TypeError, "draft_probs"),
    # devices: the "meta" device exists on every build, so mixing it with CPU is testable here
    "device_draft_tokens": (_replace("draft_tokens", lambda d: d.to("meta")), ValueError, "draft_tokens"),
    "device_draft_probs": (_replace("draft_probs", lambda q: q.to("meta")), ValueError, "draft_probs"),
    "device_num_draft": (_replace("num_draft", lambda n: n.to("meta")), ValueError, "num_draft"),
    "device_seeds": (_replace("seeds", lambda s: s.to("meta")), ValueError, "seeds"),
    "device_positions": (_replace("positions", lambda s: s.to("meta")), ValueError, "positions"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_raises_naming_the_argument(case):
    edit, exc, name = BAD_INPUTS[case]
    b = _valid()
    edit(b)
    with pytest.raises(exc, match=rf"^{name}\b"):
        _call(b)


def test_target_on_other_device_is_refused():
    b = _valid()
    b["target_probs"] = b["target_probs"].to("meta")
    with pytest.raises(ValueError, match=r"^draft_tokens is on cpu but target_probs is on meta"):
        _call(b)


def test_draft_token_with_zero_draft_probability_raises_for_exact_only():
    b = _valid()
    q = b["draft_probs"].clone()
    d = int(b["draft_tokens"][1, 0])
    q[1, 0] = torch.where(torch.arange(5) == d, 0.0, q[1, 0])
    q[1, 0] /= q[1, 0].sum()
    b["draft_probs"] = q
    with pytest.raises(ValueError, match=r"^draft_probs gives probability 0 to a drafted token"):
        _call(b)
    _call(b, method="gumbel")  # gumbel ignores draft_probs: the draft is just a guess


def test_bad_method():
    with pytest.raises(ValueError, match=r"^method"):
        _call(_valid(), method="typical")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ["target_probs", "draft_probs"])
def test_sum_tolerance_boundary(dtype, name):
    """Rows may be off by less than SUM_TOLERANCE[dtype], and no more."""
    tol = SUM_TOLERANCE[dtype]
    ok, bad = _valid(dtype), _valid(dtype)
    _scale_row(name, (0, 0), 1 + tol / 4)(ok)
    _scale_row(name, (0, 0), 1 + 4 * tol)(bad)
    _call(ok)
    with pytest.raises(ValueError, match=rf"^{name} rows must sum to 1"):
        _call(bad)


def test_validate_false_skips_value_checks_but_not_shapes():
    b = _valid()
    _scale_row("target_probs", (2, 0), 1.1)(b)
    _call(b, validate=False)
    _replace("draft_tokens", lambda d: d[:, 0])(b)
    with pytest.raises(ValueError, match=r"^draft_tokens"):
        _call(b, validate=False)


def test_values_past_num_draft_are_ignored():
    """Placeholder tokens and garbage distributions at undrafted slots do not matter."""
    b = _valid()
    base = _call(b)
    d, q, p = b["draft_tokens"].clone(), b["draft_probs"].clone(), b["target_probs"].clone()
    d[1, 1], d[2, :] = 10**6, -7  # row 1 drafts 1 token, row 2 none
    q[1, 1], q[2] = math.nan, -1.0
    p[2, 2] = math.nan  # row 2 uses only slot 0
    out = verify(p, q, d, num_draft=b["num_draft"], seeds=b["seeds"], positions=b["positions"])
    assert torch.equal(out.tokens, base.tokens)


def test_garbage_draft_probs_past_num_draft_do_not_reach_the_bonus():
    """Regression: the bonus slot j = n < K used to compute q[:, j] * 0, and NaN * 0 = NaN turned
    the bonus distribution into NaN (torch.empty padding can hold NaN)."""
    gen = torch.Generator().manual_seed(2)
    B, K, V = 200, 3, 6
    b = make_batch(gen, B, K, V, num_draft=torch.full((B,), 1))
    p = b["target_probs"].clone()
    p[:, 0] = one_hot(b["draft_tokens"][:, 0], V)  # the single draft is always accepted
    q = b["draft_probs"].clone()
    q[:, 1:] = math.nan
    out = verify(p, q, b["draft_tokens"], num_draft=b["num_draft"], seeds=b["seeds"], positions=b["positions"])
    assert bool((out.num_accepted == 1).all())
    want = sample(p[:, 1], b["seeds"], b["positions"] + 1, STREAM_EMIT)  # the bonus: p at slot 1
    assert torch.equal(out.tokens[:, 1], want)


def test_validate_true_and_false_agree_on_valid_inputs():
    gen = torch.Generator().manual_seed(5)
    for kind in ("q", "point"):
        b = make_batch(gen, 20, 4, 9, drafts=kind, greedy_frac=0.3)
        for method in ("exact", "gumbel"):
            a = _call(b, method=method)
            c = _call(b, method=method, validate=False)
            assert torch.equal(a.tokens, c.tokens)


def test_default_seeds_follow_torch_manual_seed():
    gen = torch.Generator().manual_seed(1)
    b = make_batch(gen, 64, 3, 6)
    b.pop("seeds")
    runs = []
    for s in (7, 7, 8):
        torch.manual_seed(s)
        runs.append(_call(b).tokens)
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])


def test_explicit_seeds_do_not_touch_torch_global_generator():
    gen = torch.Generator().manual_seed(1)
    b = make_batch(gen, 8, 3, 6)
    state = torch.get_rng_state()
    _call(b)
    _call(b, method="gumbel")
    assert torch.equal(state, torch.get_rng_state())


# ----------------------------------------------------------------------------------------------
# Well-formed output, against the float64 reference, and special cases


def check_well_formed(out: Verification, b: dict, method: str) -> None:
    p, q, d = b["target_probs"], b["draft_probs"], b["draft_tokens"]
    n = b["num_draft"]
    B, K1, V = p.shape
    K = K1 - 1
    assert out.tokens.shape == (B, K1) and out.tokens.dtype == torch.int64
    assert out.accepted.shape == (B, K) and out.accepted.dtype == torch.bool
    assert torch.equal(out.num_emitted, out.num_accepted + 1)
    assert torch.equal(out.num_draft, n.to(torch.int64))
    assert bool((out.num_accepted >= 0).all()) and bool((out.num_accepted <= n).all())
    assert torch.equal(out.accepted, torch.arange(K) < out.num_accepted[:, None])
    for row in range(B):
        a, toks = int(out.num_accepted[row]), out.tokens[row]
        assert toks[:a].tolist() == d[row, :a].tolist()  # the accepted prefix is the draft
        assert bool((toks[a + 1 :] == -1).all())  # -1 after the last emitted token
        x = int(toks[a])
        assert 0 <= x < V
        for i in range(a):  # accepted drafts are possible under the target
            assert float(p[row, i, d[row, i]]) > 0
        p_a = p[row, a]
        if method == "gumbel":
            t = gumbel_argmax(torch.log(p[row : row + 1]), b["seeds"][row : row + 1], b["positions"][row : row + 1])
            assert x == int(t[0, a])
            if a < n[row]:
                assert int(d[row, a]) != x
        if a == int(n[row]) or method == "gumbel":  # bonus (or gumbel's choice) has p > 0
            assert float(p_a[x]) > 0
        else:  # a rejection: the residual max(0, p - q) has mass at x (or, if it has none, p)
            q_a = one_hot(d[row, a], V, p.dtype) if q is None else q[row, a]
            residual = (p_a - q_a).clamp_min(0)
            assert float(residual[x]) > 0 or (float(residual.sum()) == 0 and float(p_a[x]) > 0)


REFERENCE_CONFIGS = [
    # (B, K, V, drafts, greedy_frac, near, method)
    (40, 1, 2, "q", 0.0, False, "exact"),
    (40, 3, 5, "q", 0.0, False, "exact"),
    (40, 4, 7, "q", 0.3, False, "exact"),
    (40, 2, 16, "q", 0.0, True, "exact"),
    (40, 5, 3, "q", 0.5, True, "exact"),
    (40, 3, 6, "point", 0.0, False, "exact"),
    (40, 4, 11, "point", 0.4, False, "exact"),
    (40, 0, 4, "point", 0.0, False, "exact"),
    (40, 2, 1, "q", 0.0, False, "exact"),
    (40, 3, 5, "point", 0.0, False, "gumbel"),
    (40, 4, 8, "q", 0.3, False, "gumbel"),
    (40, 2, 30, "point", 0.0, True, "gumbel"),
]


@pytest.mark.parametrize("config", REFERENCE_CONFIGS, ids=lambda c: "-".join(map(str, c)))
def test_matches_float64_reference_token_for_token(config):
    B, K, V, drafts, greedy_frac, near, method = config
    gen = torch.Generator().manual_seed(hash(config) % 2**31)
    for rep in range(3):
        b = make_batch(gen, B, K, V, drafts=drafts, greedy_frac=greedy_frac, near=near)
        out = _call(b, method=method)
        check_well_formed(out, b, method)
        ref = certify.reference_verify(
            b["target_probs"], b["draft_probs"], b["draft_tokens"],
            num_draft=b["num_draft"], seeds=b["seeds"], positions=b["positions"], method=method,
        )
        assert emitted(out) == ref


@pytest.mark.parametrize("drafts", ["q", "point"])
def test_large_vocabulary_matches_reference(drafts):
    """B * V above verify's block size (rows are processed in blocks): still token for token."""
    gen = torch.Generator().manual_seed(21)
    b = make_batch(gen, 48, 2, 50_000, drafts=drafts)
    out = _call(b)
    ref = certify.reference_verify(
        b["target_probs"], b["draft_probs"], b["draft_tokens"],
        num_draft=b["num_draft"], seeds=b["seeds"], positions=b["positions"],
    )
    assert emitted(out) == ref
    assert int((out.num_accepted < out.num_draft).sum()) > 5  # rejections (residual draws) occur


def test_p_equal_q_accepts_every_draft():
    """Rejection has probability 0 when p == q (u < 1 strictly), in float32 and float64."""
    gen = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, F64):
        b = make_batch(gen, 2000, 4, 6, dtype=dtype, ragged=False)
        b["draft_probs"] = b["target_probs"][:, :4].clone()
        b["draft_tokens"] = draw_drafts(b["draft_probs"], b["seeds"], b["positions"])
        out = _call(b)
        assert bool((out.num_accepted == 4).all())


def test_disjoint_supports_reject_at_slot_zero_and_emit_from_p():
    gen = torch.Generator().manual_seed(4)
    b = make_batch(gen, 500, 3, 8, ragged=False)
    even = torch.arange(8) % 2 == 0
    p = rand_probs(gen, (500, 4, 8), zero_frac=0.0) * even
    q = rand_probs(gen, (500, 3, 8), zero_frac=0.0) * ~even
    b["target_probs"] = p / p.sum(-1, keepdim=True)
    b["draft_probs"] = q / q.sum(-1, keepdim=True)
    b["draft_tokens"] = draw_drafts(b["draft_probs"], b["seeds"], b["positions"])
    out = _call(b)
    assert bool((out.num_accepted == 0).all())
    assert bool((out.tokens[:, 0] % 2 == 0).all())


def test_point_mass_draft_with_target_certainty_is_always_accepted():
    gen = torch.Generator().manual_seed(6)
    b = make_batch(gen, 200, 3, 5, drafts="point", ragged=False)
    p = b["target_probs"].clone()
    p[:, 0] = one_hot(b["draft_tokens"][:, 0], 5)  # p(d_0) = 1
    b["target_probs"] = p
    out = _call(b)
    assert bool((out.num_accepted >= 1).all())
    # and a draft the target gives probability 0 is always rejected, the residual is p
    p[:, 0] = 0.5 * one_hot((b["draft_tokens"][:, 0] + 1) % 5, 5) + 0.5 * one_hot((b["draft_tokens"][:, 0] + 2) % 5, 5)
    out = _call(b)
    assert bool((out.num_accepted == 0).all())
    assert bool((out.tokens[:, 0] != b["draft_tokens"][:, 0]).all())


def test_zero_residual_mass_falls_back_to_p():
    """With p' <= q' everywhere (p' = q' up to rounding, where a rejection has probability ~0) a
    rejection has no residual mass; the correct fallback is p itself, never a zero-probability
    token (a 'clamp to tiny' residual would give near-uniform garbage). The rows verify() reads
    are normalised first, so the fallback is reached through the rule's own step."""
    gen = torch.Generator().manual_seed(8)
    B, K, V = 40, 1, 6
    q = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0], dtype=F64).expand(B, K, V).clone()
    p = torch.cat([q * 0.5, rand_probs(gen, (B, 1, V))], 1)  # p_0 = q / 2: p' = q', residual 0
    d = torch.ones(B, K, dtype=torch.int64)
    rows, j, rejected = torch.arange(B), torch.zeros(B, dtype=torch.int64), torch.ones(B, dtype=torch.bool)
    residual = V_MOD._residual(p, q, d, rows, j, rejected)
    assert torch.equal(residual, p[:, 0])
    # and verify() reads p_0 = q (1 - 0.9e-9) (within float64's tolerance) as q: it accepts every draft
    seeds, positions = torch.arange(4000), torch.zeros(4000, dtype=torch.int64)
    qb, pb = q[:1].expand(4000, K, V), torch.cat([q[:1] * (1 - 0.9e-9), p[:1, 1:]], 1).expand(4000, K + 1, V)
    out = verify(pb, qb, draw_drafts(qb, seeds, positions), seeds=seeds, positions=positions, validate=False)
    assert bool((out.num_accepted == 1).all())


def _law_of_verify(p: torch.Tensor, q: torch.Tensor) -> list[float]:
    """The exact law of the token verify() emits at slot 0 (K = 1, one row ``p [2, V]``, ``q [1, V]``),
    measured on the code: every draft d (drafted with probability q(d) / sum(q), the inverse-CDF
    law), its accept cell [0, a_d) found by bisection of u on the real verify(), and the emitted
    token's CDF cells on rejection found the same way."""
    from verispec.certify import CellDraws
    from verispec.certify.cells import POS0

    V = p.shape[-1]
    qn = (q[0].double() / q[0].double().sum()).tolist()

    def run(d: int, u_accept: float, u_emit: float) -> int:
        draws = CellDraws({STREAM_ACCEPT: torch.tensor([[u_accept, 0.5]], dtype=F64),
                           STREAM_EMIT: torch.tensor([[u_emit, 0.5]], dtype=F64)})
        out = verify(p[None], q[None], torch.tensor([[d]]), seeds=torch.tensor([0]), positions=torch.tensor([POS0]),
                     draws=draws)
        return int(out.tokens[0, 0])

    def bisect(pred) -> float:  # the u in (0, 1) where pred turns from True to False
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if pred(mid) else (lo, mid)
        return lo

    law = [0.0] * V
    for d in range(V):
        if qn[d] == 0:
            continue
        a = bisect(lambda u: run(d, u, 0.5) == d and run(d, u, 0.999999) == d)
        law[d] += qn[d] * a
        if a >= 1 - 1e-15:
            continue
        lo = 0.0
        for x in range(V):  # the emitted token's cell on rejection: tokens < x up to bisect(...)
            hi = bisect(lambda u: run(d, 1 - 1e-12, u) <= x)
            law[x] += qn[d] * (1 - a) * (hi - lo)
            lo = hi
    return law


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_rows_off_by_the_tolerance_emit_the_normalised_target(dtype):
    """A row within the sum tolerance of its dtype (float16/bfloat16: 1e-2, float32: 1e-3) is read
    as p / sum(p), the law the inverse-CDF draws give it: the emitted law, measured on the code by
    its cells, is p / sum(p) (before the fix the accept test used p unnormalised while the residual
    normalised: 0.3025 emitted against 0.2972 on a float16 case)."""
    tol = SUM_TOLERANCE.get(dtype, V_MOD._LOW_PRECISION_SUM_TOLERANCE)
    p0 = torch.tensor([0.3, 0.5, 0.2], dtype=F64) * (1 + 0.9 * tol)
    q0 = torch.tensor([0.45, 0.25, 0.3], dtype=F64) * (1 - 0.9 * tol)
    p = torch.stack([p0, torch.tensor([1 / 3] * 3, dtype=F64)]).to(dtype)  # [2, V]: slot 0 and the bonus
    q = q0[None].to(dtype)  # [1, V]
    want = (p[0].double() / p[0].double().sum()).tolist()
    got = _law_of_verify(p, q)
    assert got == pytest.approx(want, abs=1e-12), (got, want)


def test_every_tensor_verify_builds_is_on_the_inputs_device(monkeypatch, torch_without_device):
    """Index tensors made without ``device=`` land on the CPU and break a GPU call (the check of
    draft_probs' rows built one); no GPU here, so every torch factory verify.py calls is checked for
    a device argument (or a device-carrying source), on a call with validation, q and every rule."""
    fake, missing = torch_without_device
    monkeypatch.setattr(V_MOD, "torch", fake)
    gen = torch.Generator().manual_seed(2)
    b = make_batch(gen, 6, 3, 5, drafts="q", ragged=True)
    p = b["target_probs"].clone()
    p[0] = one_hot(p[0].argmax(-1), 5)  # a greedy row
    kw = dict(num_draft=b["num_draft"].tolist(), seeds=b["seeds"].tolist(), positions=b["positions"].tolist())
    verify(p, b["draft_probs"], b["draft_tokens"], method=["exact"] * 4 + ["gumbel"] * 2, **kw)
    V_MOD.verify_argmax(p.argmax(-1), b["draft_tokens"], b["num_draft"])
    V_MOD.verify_argmax(p[:, :1].argmax(-1), b["draft_tokens"][:, :0], b["num_draft"] * 0)
    assert missing == [], f"torch factories called without device= in verify/chain.py: {missing}"


def test_greedy_rows_accept_while_draft_equals_argmax():
    gen = torch.Generator().manual_seed(9)
    B, K, V = 300, 4, 7
    target = torch.randint(0, V, (B, K + 1), generator=gen)
    p = one_hot(target, V)
    d = torch.where(torch.rand(B, K, generator=gen) < 0.7, target[:, :K], torch.randint(0, V, (B, K), generator=gen))
    n = torch.randint(0, K + 1, (B,), generator=gen)
    q = rand_probs(gen, (B, K, V), zero_frac=0.0)
    match = (d == target[:, :K]) & (torch.arange(K) < n[:, None])
    a = match.long().cumprod(-1).sum(-1)
    for method, qq in (("exact", q), ("exact", None), ("gumbel", None)):
        out = verify(p, qq, d, num_draft=n, seeds=torch.arange(B), positions=torch.zeros(B, dtype=torch.int64),
                     method=method)
        assert torch.equal(out.num_accepted, a)
        assert torch.equal(out.tokens.gather(1, a[:, None])[:, 0], target.gather(1, a[:, None])[:, 0])


# ----------------------------------------------------------------------------------------------
# Determinism


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("method, drafts", [("exact", "q"), ("exact", "point"), ("gumbel", "point")])
def test_row_alone_equals_row_in_batches_of_4_and_16(dtype, method, drafts):
    gen = torch.Generator().manual_seed(10)
    V, K = 257, 5
    num_draft = torch.randint(0, K + 1, (16,), generator=gen)
    num_draft[:3] = torch.tensor([0, K, 1])
    pool = make_batch(gen, 16, K, V, dtype=dtype, drafts=drafts, greedy_frac=0.25, num_draft=num_draft)
    full = _call(pool, method=method)
    rerun = _call(pool, method=method)
    assert torch.equal(full.tokens, rerun.tokens)
    for r in range(16):
        alone = _call(take_rows(pool, [r]), method=method)
        others = [(r + 5) % 16, (r + 9) % 16, (r + 2) % 16]
        in4 = _call(take_rows(pool, [others[0], r, others[1], others[2]]), method=method)
        perm = torch.randperm(16, generator=gen)
        in16 = _call(take_rows(pool, perm), method=method)
        where16 = int((perm == r).nonzero())
        for res, i in ((alone, 0), (in4, 1), (full, r), (in16, where16)):
            assert torch.equal(res.tokens[i], alone.tokens[0])
            assert int(res.num_accepted[i]) == int(alone.num_accepted[0])


def test_row_output_depends_only_on_its_own_inputs():
    """Changing every other row (content, lengths, seeds, positions) leaves a row's result alone."""
    gen = torch.Generator().manual_seed(11)
    a = make_batch(gen, 8, 4, 33)
    c = make_batch(gen, 8, 4, 33)
    for keep in range(8):
        mixed = cat_batches(take_rows(a, [keep]), take_rows(c, [i for i in range(8) if i != keep]))
        assert torch.equal(_call(mixed).tokens[0], _call(a).tokens[keep])


@contextlib.contextmanager
def _threads(n: int):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("method, drafts", [("exact", "q"), ("exact", "point"), ("gumbel", "point")])
def test_thread_count_does_not_change_results(method, drafts):
    gen = torch.Generator().manual_seed(12)
    b = make_batch(gen, 8, 3, 20_000, dtype=torch.float32, drafts=drafts, greedy_frac=0.25)
    results = []
    for n in (1, 2, 1):
        with _threads(n):
            results.append(_call(b, method=method).tokens)
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])


@pytest.mark.parametrize("drafts", ["q", "point"])
def test_row_without_drafts_emits_target_sample_at_its_position(drafts):
    """num_draft = 0: the row is target-only sampling: sample(p[:, 0], seed, pos, STREAM_EMIT)."""
    gen = torch.Generator().manual_seed(13)
    b = make_batch(gen, 64, 4, 10, drafts=drafts)
    b["num_draft"] = torch.where(torch.arange(64) % 2 == 0, 0, b["num_draft"])
    b["draft_tokens"] = torch.where(torch.arange(4) < b["num_draft"][:, None], b["draft_tokens"], -1)
    out = _call(b)
    zero = b["num_draft"] == 0
    want = sample(b["target_probs"][:, 0], b["seeds"], b["positions"], STREAM_EMIT)
    assert bool((out.num_emitted[zero] == 1).all())
    assert torch.equal(out.tokens[zero, 0], want[zero])


def test_gumbel_equals_target_only_gumbel_sampling():
    """Drafter-invariant mode: whatever the drafts, the emitted tokens are target-only
    Gumbel sampling's (gumbel_argmax on log p) for the same seed and positions."""
    gen = torch.Generator().manual_seed(14)
    B, K, V = 400, 5, 9
    for dtype in (torch.float32, F64):
        b = make_batch(gen, B, K, V, dtype=dtype, drafts="point")
        target_only = gumbel_argmax(torch.log(b["target_probs"]), b["seeds"], b["positions"])  # [B, K+1]
        # drafts that often agree with the target for a while, then diverge
        agree = torch.rand(B, K, generator=gen) < 0.8
        d = torch.where(agree, target_only[:, :K], torch.randint(0, V, (B, K), generator=gen))
        b["draft_tokens"] = torch.where(torch.arange(K) < b["num_draft"][:, None], d, -1)
        out = _call(b, method="gumbel")
        assert int((out.num_accepted > 1).sum()) > 50
        for row in range(B):
            e = int(out.num_emitted[row])
            assert out.tokens[row, :e].tolist() == target_only[row, :e].tolist()
        # drafts equal to the target's choice are all accepted and the bonus follows
        b["draft_tokens"] = target_only[:, :K]
        b["num_draft"] = torch.full((B,), K)
        out = _call(b, method="gumbel")
        assert torch.equal(out.tokens, target_only)


# ----------------------------------------------------------------------------------------------
# Statistics: G-tests of the emitted law, and their power against wrong verifiers
#
# Each configuration draws 1e5 rows in one batched verify call (same tables, different seeds)
# and G-tests (log-likelihood ratio, scipy.stats.power_divergence) the emitted counts against
# the target's law. The seeds are fixed, so the suite is deterministic; over fresh seeds the
# false-alarm rate of the whole family is ALPHA = 1e-4 (Bonferroni: each configuration is
# tested at ALPHA / number of configurations).

ALPHA = 1e-4
N_DRAWS = 100_000


def g_test_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """p-value of the G-test of ``counts`` against ``probs``; 0 if a zero-probability cell is hit."""
    support = probs > 0
    if counts[~support].sum() > 0:
        return 0.0
    expected = probs[support] / probs[support].sum() * counts.sum()
    return float(stats.power_divergence(counts[support], expected, lambda_="log-likelihood").pvalue)


def _copy_verify(p, q, d, num_draft, seeds, positions, *, residual="max", bonus_from_q=False) -> torch.Tensor:
    """A plain vectorised copy of the exact rule (first emitted token and whole block), with
    switches that break it: ``residual`` "max" (correct), "p" (no subtraction), "abs" (|p - q|);
    ``bonus_from_q`` samples the bonus token from the draft's q instead of p."""
    B, K1, V = p.shape
    K = K1 - 1
    rows = torch.arange(B)
    qq = one_hot(d.clamp(min=0), V, p.dtype) if q is None else q
    dd = d.clamp(min=0)
    drafted = torch.arange(K) < num_draft[:, None]
    u = uniform(seeds[:, None], slot_positions(positions, K), STREAM_ACCEPT)
    p_d = p[:, :K].gather(-1, dd[..., None])[..., 0].double()
    q_d = qq.gather(-1, dd[..., None])[..., 0].double()
    passes = drafted & (u * q_d < p_d)
    j = passes.long().cumprod(-1).sum(-1)
    bonus = j == num_draft
    p_j, q_j = p[rows, j], qq[rows, j.clamp(max=K - 1)]
    r = {"max": (p_j - q_j).clamp_min(0), "p": p_j, "abs": (p_j - q_j).abs()}[residual]
    r = torch.where(r.sum(-1, keepdim=True) > 0, r, p_j)
    dist = torch.where(bonus[:, None], q_j if bonus_from_q else p_j, r)
    x = sample(dist, seeds, positions + j, STREAM_EMIT)
    tokens = torch.where(torch.arange(K1) < j[:, None], torch.cat([dd, dd[:, :1]], 1), -1)
    return tokens.scatter(1, j[:, None], x[:, None])


G_CONFIGS = [
    # (name, K, V, drafts, method)
    ("exact-q-V4-K1", 1, 4, "q", "exact"),
    ("exact-q-V6-K3", 3, 6, "q", "exact"),
    ("exact-q-V8-K4", 4, 8, "q", "exact"),
    ("exact-point-V5-K2", 2, 5, "point", "exact"),
    ("exact-near-V7-K4", 4, 7, "near", "exact"),
    ("gumbel-V6-K3", 3, 6, "gumbel", "gumbel"),
]


def _g_batch(name: str, K: int, V: int, drafts: str):
    """1e5 rows sharing one (p, q) table per slot, with ragged lengths and distinct seeds."""
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    p_tab = rand_probs(gen, (K + 1, V), zero_frac=0.2, power=2.0)
    if drafts == "near":
        q_tab = p_tab[:K] * (1 + 0.3 * torch.rand(K, V, generator=gen, dtype=F64)) + 0.01
        q_tab = q_tab / q_tab.sum(-1, keepdim=True)
    else:  # half a random table, half p: a fair mix of acceptances and rejections
        q_tab = 0.5 * rand_probs(gen, (K, V), zero_frac=0.2, power=2.0) + 0.5 * p_tab[:K]
    B = N_DRAWS
    p, q = p_tab.expand(B, -1, -1), q_tab.expand(B, -1, -1)
    seeds = torch.arange(B, dtype=torch.int64) * 7919 + sum(map(ord, name))
    positions = torch.randint(0, 10**6, (B,), generator=gen)
    num_draft = torch.randint(0, K + 1, (B,), generator=gen)
    if drafts == "gumbel":  # the drafter-invariant drafter: argmax(log q + G) with the shared noise
        d = gumbel_argmax(torch.log(q), seeds, positions)
    else:
        d = draw_drafts(q, seeds, positions)
    return p, (None if drafts == "point" else q), d, num_draft, seeds, positions, p_tab


@pytest.mark.parametrize("config", G_CONFIGS, ids=lambda c: c[0])
def test_first_token_law_g_test(config):
    """G-test: the first emitted token follows p at slot 0. alpha = 1e-4 / len(G_CONFIGS)."""
    name, K, V, drafts, method = config
    p, q, d, n, seeds, positions, p_tab = _g_batch(name, K, V, drafts)
    out = verify(p, q, d, num_draft=n, seeds=seeds, positions=positions, method=method)
    counts = torch.bincount(out.tokens[:, 0], minlength=V).numpy()
    assert g_test_pvalue(counts, p_tab[0].numpy()) > ALPHA / len(G_CONFIGS)
    # the batch is not degenerate: both accepted and rejected first drafts occur
    assert 0.05 < float((out.num_accepted > 0).double().mean()) < 0.95


@pytest.mark.parametrize("residual", ["p", "abs"])
def test_g_test_rejects_a_wrong_residual(residual):
    """Power: the same G-test on a verifier with the wrong residual rejects (p-value < alpha).
    The correct copy of the rule, run alongside, emits verify's tokens exactly."""
    name, K, V, drafts, _ = G_CONFIGS[1]
    p, q, d, n, seeds, positions, p_tab = _g_batch(name, K, V, drafts)
    right = _copy_verify(p, q, d, n, seeds, positions)
    assert torch.equal(right, verify(p, q, d, num_draft=n, seeds=seeds, positions=positions).tokens)
    wrong = _copy_verify(p, q, d, n, seeds, positions, residual=residual)
    counts = torch.bincount(wrong[:, 0], minlength=V).numpy()
    assert g_test_pvalue(counts, p_tab[0].numpy()) < ALPHA / len(G_CONFIGS)


# The two-token law through an engine-like loop: p and q at slot 1 depend on the token at slot 0.
PAIR_K, PAIR_V = 2, 4


def _pair_tables():
    gen = torch.Generator().manual_seed(2024)
    V = PAIR_V
    return dict(
        p0=rand_probs(gen, (V,), zero_frac=0.0, power=2.0),
        q0=rand_probs(gen, (V,), zero_frac=0.0, power=2.0),
        P1=rand_probs(gen, (V, V), zero_frac=0.0, power=2.0),  # p at slot 1 given token 0
        Q1=rand_probs(gen, (V, V), zero_frac=0.0, power=2.0),
        P2=rand_probs(gen, (V, V), zero_frac=0.0, power=2.0),  # any later slot given token 1
        Q2=rand_probs(gen, (V, V), zero_frac=0.0, power=2.0),
    )


def _pair_counts(verifier) -> np.ndarray:
    """Counts of the first two emitted tokens over 1e5 rows of a two-iteration decoding loop."""
    t = _pair_tables()
    gen = torch.Generator().manual_seed(77)
    B, K, V = N_DRAWS, PAIR_K, PAIR_V
    seeds = torch.arange(B, dtype=torch.int64) + 10**9
    pos = torch.randint(0, 10**6, (B,), generator=gen)

    def draft(qa, qb_given, start):  # two-slot draft from q0-like table then conditional table
        d0 = sample(qa, seeds, start, STREAM_DRAFT)
        d1 = sample(qb_given[d0], seeds, start + 1, STREAM_DRAFT)
        return torch.stack([d0, d1], 1)

    # iteration 1 at position pos: context-free slot 0, slot 1 conditioned on the draft d0
    d = draft(t["q0"].expand(B, V), t["Q1"], pos)
    p = torch.stack([t["p0"].expand(B, V), t["P1"][d[:, 0]], t["P2"][d[:, 1]]], 1)
    q = torch.stack([t["q0"].expand(B, V), t["Q1"][d[:, 0]]], 1)
    n = torch.randint(1, K + 1, (B,), generator=gen)
    first = verifier(p, q, d, n, seeds, pos)
    x0 = first[:, 0]
    pair = first[:, :2].clone()
    # iteration 2 for rows that emitted one token: context x0, starting at position pos + 1
    one = first[:, 1] < 0
    d2 = draft(t["Q1"][x0], t["Q2"], pos + 1)
    p2 = torch.stack([t["P1"][x0], t["P2"][d2[:, 0]], t["P2"][d2[:, 1]]], 1)
    q2 = torch.stack([t["Q1"][x0], t["Q2"][d2[:, 0]]], 1)
    n2 = torch.randint(0, K + 1, (B,), generator=gen)
    second = verifier(p2, q2, d2, n2, seeds, pos + 1)
    pair[one, 1] = second[one, 0]
    return torch.bincount(pair[:, 0] * V + pair[:, 1], minlength=V * V).numpy()


def _pair_law() -> np.ndarray:
    t = _pair_tables()
    return (t["p0"][:, None] * t["P1"]).flatten().numpy()  # target-only: p0(a) P1[a](b)


def _verify_tokens(p, q, d, n, seeds, pos):
    return verify(p, q, d, num_draft=n, seeds=seeds, positions=pos).tokens


def test_first_two_tokens_law_g_test():
    """G-test of the joint law of the first two emitted tokens of a two-iteration loop
    (which also reuses position pos+1's draws after a rejection at pos): alpha = 1e-4."""
    assert g_test_pvalue(_pair_counts(_verify_tokens), _pair_law()) > ALPHA


def test_pair_g_test_rejects_bonus_from_q():
    """Power: a verifier that samples the bonus token from q is rejected by the same test."""

    def wrong(p, q, d, n, seeds, pos):
        return _copy_verify(p, q, d, n, seeds, pos, bonus_from_q=True)

    assert g_test_pvalue(_pair_counts(wrong), _pair_law()) < ALPHA


# ----------------------------------------------------------------------------------------------
# Property tests over shapes, ragged lengths and dtypes


@settings(max_examples=50, deadline=None)
@given(
    B=st.integers(1, 6),
    K=st.integers(0, 5),
    V=st.integers(1, 12),
    dtype=st.sampled_from([torch.float32, F64]),
    drafts=st.sampled_from(["q", "point"]),
    method=st.sampled_from(["exact", "gumbel"]),
    greedy_frac=st.sampled_from([0.0, 0.5, 1.0]),
    near=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_well_formed_and_batch_invariant(B, K, V, dtype, drafts, method, greedy_frac, near, seed):
    gen = torch.Generator().manual_seed(seed)
    b = make_batch(gen, B, K, V, dtype=dtype, drafts=drafts, greedy_frac=greedy_frac, near=near)
    out = _call(b, method=method)
    check_well_formed(out, b, method)
    for r in range(B):
        alone = _call(take_rows(b, [r]), method=method)
        assert torch.equal(alone.tokens[0], out.tokens[r])
    if dtype == F64:
        ref = certify.reference_verify(
            b["target_probs"], b["draft_probs"], b["draft_tokens"],
            num_draft=b["num_draft"], seeds=b["seeds"], positions=b["positions"], method=method,
        )
        assert emitted(out) == ref


# ----------------------------------------------------------------------------------------------
# The greedy fast path


def _greedy_batch(B=12, K=5, V=9, seed=0):
    gen = torch.Generator().manual_seed(seed)
    t = torch.randint(V, (B, K + 1), generator=gen)
    p = one_hot(t, V)  # [B, K+1, V]
    q = rand_probs(gen, (B, K, V), zero_frac=0.0)
    # Drafts: the argmax for a random prefix, then a random token.
    d = torch.randint(V, (B, K), generator=gen)
    prefix = torch.randint(K + 1, (B,), generator=gen)
    d = torch.where(torch.arange(K) < prefix[:, None], t[:, :K], d)
    n = torch.randint(K + 1, (B,), generator=gen)
    return p, q, d, n, t


@pytest.mark.parametrize("with_q", [True, False])
def test_greedy_fast_path_equals_the_exact_rule_and_needs_no_draws(with_q):
    p, q, d, n, t = _greedy_batch()
    q = q if with_q else None
    B = p.shape[0]
    pos = torch.arange(B) * 3
    fast = verify(p, q, d, num_draft=n, seeds=torch.arange(B), positions=pos, greedy=True)
    other_seeds = verify(p, q, d, num_draft=n, seeds=torch.arange(B) + 999, positions=pos, greedy=True)
    assert torch.equal(fast.tokens, other_seeds.tokens)  # no randomness involved
    from verispec.verify.chain import _verify_exact

    drafted = torch.arange(d.shape[1]) < n[:, None]
    exact = _verify_exact(p, q, torch.where(drafted, d, 0), drafted, n, torch.arange(B), pos, COUNTER)
    assert torch.equal(fast.tokens, exact.tokens)
    # Emitted = the drafts while they equal the argmax, then the argmax.
    for b in range(B):
        m = int(fast.num_accepted[b])
        assert fast.tokens[b, : m + 1].tolist() == t[b, : m + 1].tolist()
    assert torch.equal(verify(p, q, d, num_draft=n, seeds=torch.arange(B), positions=pos).tokens, fast.tokens)


@pytest.mark.parametrize("method", ["exact", "gumbel"])
@pytest.mark.parametrize("seed", range(4))
def test_verify_argmax_equals_verify_on_one_hot_p(method, seed):
    """The engine's all-greedy fast path (argmax tokens only) against :func:`verify` on the
    one-hot p those tokens define, with placeholders (-1) past each row's drafts."""
    from verispec.verify import verify_argmax

    p, q, d, n, t = _greedy_batch(B=16, K=5, V=7, seed=seed)
    d = torch.where(torch.arange(5) < n[:, None], d, -1)
    fast = verify_argmax(t, d, n)
    ref = verify(p, None, d, num_draft=n, seeds=torch.arange(16), method=method)
    assert torch.equal(fast.tokens, ref.tokens)
    assert torch.equal(fast.num_accepted, ref.num_accepted) and torch.equal(fast.accepted, ref.accepted)
    assert torch.equal(fast.num_emitted, ref.num_emitted)
    # The comparison can fail: emitting the argmax one slot late differs from the rule.
    late = t.gather(1, (fast.num_accepted + 1).clamp_max(5)[:, None]).squeeze(1)
    early = fast.tokens.gather(1, fast.num_accepted[:, None]).squeeze(1)
    assert not torch.equal(late, early)


def test_mixed_greedy_and_sampled_rows_match_each_row_alone():
    gp, gq, gd, gn, _ = _greedy_batch(B=6, K=4, V=9, seed=1)
    gen = torch.Generator().manual_seed(2)
    sp = rand_probs(gen, (6, 5, 9), zero_frac=0.0)
    sq = rand_probs(gen, (6, 4, 9), zero_frac=0.0)
    sd = torch.multinomial(sq.reshape(-1, 9), 1, generator=gen).view(6, 4)
    order = torch.randperm(12, generator=gen)
    p, q = torch.cat([gp, sp])[order], torch.cat([gq, sq])[order]
    d, n = torch.cat([gd, sd])[order], torch.cat([gn, torch.full((6,), 4)])[order]
    seeds, pos = torch.arange(12) + 5, torch.arange(12)
    mixed = verify(p, q, d, num_draft=n, seeds=seeds, positions=pos)
    for b in range(12):
        alone = verify(p[b:b + 1], q[b:b + 1], d[b:b + 1], num_draft=n[b:b + 1], seeds=seeds[b:b + 1],
                       positions=pos[b:b + 1])
        assert torch.equal(mixed.tokens[b], alone.tokens[0])
    hint = torch.cat([torch.ones(6, dtype=torch.bool), torch.zeros(6, dtype=torch.bool)])[order]
    assert torch.equal(verify(p, q, d, num_draft=n, seeds=seeds, positions=pos, greedy=hint).tokens, mixed.tokens)


def test_greedy_hint_is_validated():
    gen = torch.Generator().manual_seed(3)
    p = rand_probs(gen, (2, 3, 5), zero_frac=0.0)
    d = torch.zeros(2, 2, dtype=torch.int64)
    with pytest.raises(ValueError, match="^greedy"):
        verify(p, None, d, seeds=torch.arange(2), greedy=True)
    with pytest.raises(TypeError, match="^greedy"):
        verify(p, None, d, seeds=torch.arange(2), greedy="yes")


# ----------------------------------------------------------------------------------------------
# Review fixes (issue 13, section 2)


def test_a_float32_row_rounded_to_one_is_not_taken_for_one_hot():
    """A float32 softmax row can round its top entry to exactly 1.0 and keep ~3e-8 elsewhere; the
    greedy fast path would drop that mass. Detected rows are one-hot only if nothing else is > 0,
    and such a row then goes through the exact rule, whose residual draw can reach the tiny tokens."""
    from verispec.certify import CellDraws
    from verispec.certify.cells import POS0
    from verispec.rng import STREAM_ACCEPT, STREAM_EMIT

    p = torch.zeros(1, 1, 4, dtype=torch.float32)
    p[0, 0, 0], p[0, 0, 3] = 1.0, 3e-8  # sums to 1 + 3e-8: a valid float32 row
    assert float(p.amax()) == 1.0
    assert not bool(V_MOD._is_one_hot(p).any())
    u = torch.full((1, 3), 1 - 1e-9, dtype=torch.float64)  # the last CDF cell: token 3's
    draws = CellDraws({STREAM_ACCEPT: u, STREAM_EMIT: u})
    out = verify(p, None, torch.zeros(1, 0, dtype=torch.int64), seeds=torch.tensor([0]),
                 positions=torch.tensor([POS0]), draws=draws)  # greedy detected, as by default
    assert out.tokens.tolist() == [[3]]


def test_residual_is_computed_in_float64_for_float32_inputs():
    """p - q in float32 rounds away mass (0.5 + 2^-24 - 2^-30 rounds to 0.5 + 2^-24); float64 keeps it."""
    p = torch.tensor([[[0.5 + 2**-24, 0.5 - 2**-24]]], dtype=torch.float32)
    q = torch.tensor([[[2**-30, 1 - 2**-30]]], dtype=torch.float32)
    d = torch.tensor([[1]])
    r = V_MOD._residual(p, q, d, torch.tensor([0]), torch.tensor([0]), torch.tensor([True]))
    assert r.dtype == torch.float64
    want = (p[0, 0].double() - q[0, 0].double()).clamp_min(0)
    assert torch.equal(r[0], want)
    assert float(r[0, 0]) != float(p[0, 0, 0] - q[0, 0, 0])  # float32 arithmetic would differ


def test_inputs_that_require_grad_are_refused_by_name():
    b = _valid()
    b["target_probs"] = b["target_probs"].clone().requires_grad_(True)
    with pytest.raises(ValueError, match=r"^target_probs requires grad.*detach"):
        _call(b)
    b = _valid()
    b["draft_probs"] = b["draft_probs"].clone().requires_grad_(True)
    with pytest.raises(ValueError, match=r"^draft_probs requires grad"):
        _call(b)


@pytest.mark.parametrize("seeds", [[2**63, 0, 1], [-(2**63) - 1, 0, 1], [2**64, 0, 1]])
def test_seeds_outside_int64_are_refused_by_name(seeds):
    b = _valid()
    b["seeds"] = seeds
    with pytest.raises(ValueError, match=r"^seeds must be int64"):
        _call(b)


def test_sum_error_message_shows_the_error():
    """The message must show by how much the worst row is off (it used to print '1')."""
    b = _valid(torch.float64)
    _scale_row("target_probs", (0, 0), 1 + 3e-9)(b)
    with pytest.raises(ValueError, match=r"worst row sums to 1 \+ 3e-09 = 1\.000000003"):
        _call(b)


def test_per_row_methods_in_one_call_equal_each_method_alone():
    """Exact and Gumbel rows (and greedy ones) share one verify call; each row gets what its
    own method gives it alone."""
    g = torch.Generator().manual_seed(3)
    B, K, V = 6, 3, 7
    p = torch.softmax(torch.randn(B, K + 1, V, generator=g, dtype=torch.float64), -1)
    p[0] = torch.nn.functional.one_hot(p[0].argmax(-1), V).double()  # a greedy row
    q = torch.softmax(torch.randn(B, K, V, generator=g, dtype=torch.float64), -1)
    d = torch.multinomial(q.view(-1, V), 1, generator=g).view(B, K)
    seeds, positions = torch.arange(B) + 10, torch.arange(B) * 3
    methods = ["exact", "gumbel", "exact", "gumbel", "gumbel", "exact"]
    both = verify(p, q, d, seeds=seeds, positions=positions, method=methods)
    for m in ("exact", "gumbel"):
        alone = verify(p, q, d, seeds=seeds, positions=positions, method=m)
        rows = [b for b, name in enumerate(methods) if name == m]
        assert torch.equal(both.tokens[rows], alone.tokens[rows])
    with pytest.raises(ValueError, match="one per row"):
        verify(p, q, d, seeds=seeds, method=["exact"] * 5)
    with pytest.raises(ValueError, match="method"):
        verify(p, q, d, seeds=seeds, method=["exact"] * 5 + ["beam"])


def test_verify_draft_takes_chains_and_sends_trees_to_the_tree_verifier():
    from verispec.draft import Draft
    from verispec.verify import verify_draft

    g = torch.Generator().manual_seed(4)
    p = torch.softmax(torch.randn(2, 4, 5, generator=g, dtype=torch.float64), -1)
    d = torch.tensor([[1, 2, 3], [4, 0, 1]])
    chain = Draft(d, None, torch.tensor([3, 2]), parents=torch.tensor([[-1, 0, 1], [-1, 0, 1]]))
    out = verify_draft(p, chain, seeds=torch.tensor([1, 2]))
    assert torch.equal(out.tokens, verify(p, None, d, num_draft=torch.tensor([3, 2]), seeds=torch.tensor([1, 2])).tokens)
    assert torch.equal(out.accepted_nodes(), torch.where(out.accepted, torch.arange(3), -1))
    tree = Draft(d, None, torch.tensor([3, 3]), parents=torch.tensor([[-1, 0, 0], [-1, -1, 1]]), child_draw="iid")
    assert tree.depth().tolist() == [[1, 2, 2], [1, 1, 2]]
    out = verify_draft(p, tree, seeds=torch.tensor([1, 2]))  # tests/test_verify_tree.py: exact by enumeration
    assert out.path is not None and out.num_accepted.tolist() == (out.path >= 0).sum(1).tolist()
    with pytest.raises(ValueError, match="earlier node"):
        Draft(d, None, torch.tensor([3, 3]), parents=torch.tensor([[0, 0, 0], [-1, 0, 1]]))
