"""Exactness certification (verispec.certify) of the shipped code.

* the float64 reference primitives and transform are right by hand and agree with the shipped ones;
* the cell enumeration drives the real verify() (and the drafter's sampling step): its law equals
  the rule's symbolic law on every pass, and every case of the grid is within TV 1e-12 of the
  target's own law;
* it has power: every mutant of verify.py / the drafter / the transform is caught.

The quick grid runs in the CLI test (test_cli_certify.py); here a small grid of every (mode, edge
case) runs in the default suite and the full grid (V in 2..5, K in 1..4) is marked slow.
"""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from verispec import certify
from verispec.certify import (
    EDGES,
    MUTANTS,
    TV_TOLERANCE,
    CellDraws,
    CertCase,
    TableModel,
    accept_probability,
    default_grid,
    emitted_distribution,
    gumbel_choice,
    gumbel_max_law,
    reference_probs,
    residual_distribution,
    run_case,
    run_mutants,
    setup_for,
    shipped_distribution,
    target_distribution,
    total_variation,
)
from verispec import rng
from verispec.certify import large
from verispec.certify.cells import POS0, CellDraws as _CellDraws, _one_pass
from verispec.certify.large import LARGE_V
from verispec.certify.grid import EXACT_ONLY
from verispec.certify.symbolic import _one_iteration
from verispec.rng import STREAM_ACCEPT, STREAM_EMIT
from verispec.sampling import SamplingParams, logits_to_probs

V_MOD = importlib.import_module("verispec.verify.chain")
FULL = default_grid(quick=False)
SMALL = [CertCase(m, e, 3, 2, 3) for m in ("exact", "gumbel") for e in EDGES
         if not (m == "gumbel" and e in EXACT_ONLY) and e != "large_v"]  # large_v: its own tests below
SMALL += [CertCase(m, e, 3, 2, 3, dtype=dt) for m in ("exact", "gumbel") for e, dt in
          (("random", "float32"), ("top_k", "float32"), ("ragged", "bfloat16"))]


def _id(c: CertCase) -> str:
    return f"{c.method}-{c.edge}-V{c.vocab}-K{c.k}-N{c.n_tokens}" + ("" if c.dtype == "float64" else f"-{c.dtype}")


# ----------------------------------------------------------------------------------------------
# The float64 reference


def test_accept_probability():
    assert accept_probability(0.2, 0.4) == 0.5
    assert accept_probability(0.4, 0.2) == 1.0
    assert accept_probability(0.0, 0.3) == 0.0
    assert accept_probability(0.3, 0.3) == 1.0


def test_residual_distribution():
    r = residual_distribution([0.5, 0.3, 0.2], [0.2, 0.6, 0.2])
    assert r == pytest.approx([1.0, 0.0, 0.0], abs=1e-15)
    r = residual_distribution([0.4, 0.4, 0.2], [0.1, 0.3, 0.6])
    assert r == pytest.approx([0.3 / 0.4, 0.1 / 0.4, 0.0], abs=1e-15)
    # point-mass q: p with the draft removed, renormalised
    assert residual_distribution([0.5, 0.25, 0.25], [0.0, 1.0, 0.0]) == pytest.approx([2 / 3, 0, 1 / 3])
    # p == q (or p below q): no residual mass, fall back to p, normalised
    assert residual_distribution([0.3, 0.7], [0.3, 0.7]) == pytest.approx([0.3, 0.7])
    assert residual_distribution([0.2, 0.6], [0.3, 0.7]) == pytest.approx([0.25, 0.75])


def test_gumbel_choice_ties_and_zeros():
    assert gumbel_choice([0.5, 0.5], [0.0, 0.0]) == 0  # tie -> lowest id
    assert gumbel_choice([0.0, 0.5, 0.5], [100.0, 0.0, 1.0]) == 2  # p = 0 never wins
    assert gumbel_choice([0.25, 0.75], [2.0, 0.0]) == 0  # log .25 + 2 > log .75
    assert gumbel_choice([0.25, 0.75], [1.0, 0.0]) == 1  # log .25 + 1 < log .75


@pytest.mark.parametrize(
    "p",
    [(0.5, 0.5), (0.1, 0.2, 0.7), (1.0, 0.0, 0.0), (0.0, 0.3, 0.0, 0.7), (1e-6, 1 - 1e-6), (0.05, 0.15, 0.3, 0.2, 0.3),
     (1e-12, 0.5, 0.5 - 1e-12)],
)
def test_gumbel_max_law_is_p(p):
    """Numerical integration reproduces the Gumbel-max trick to ~1e-15 (computed, not assumed)."""
    law = gumbel_max_law(p)
    assert max(abs(a - b) for a, b in zip(law, p)) < 1e-14


def test_reference_transform_by_hand():
    d = (0.1, 0.2, 0.3, 0.4)
    assert reference_probs(d) == pytest.approx(d, abs=1e-15)
    assert reference_probs((0.3, 0.35, 0.35), temperature=0) == (0.0, 1.0, 0.0)  # tie -> lowest id
    assert reference_probs(d, top_k=2) == pytest.approx((0, 0, 3 / 7, 4 / 7))
    assert reference_probs(d, top_p=0.5) == pytest.approx((0, 0, 3 / 7, 4 / 7))  # 0.4 < 0.5: keep 0.3 too
    assert reference_probs(d, top_p=0.4) == pytest.approx((0, 0, 0, 1))
    assert reference_probs(d, min_p=0.6) == pytest.approx((0, 0, 3 / 7, 4 / 7))
    w = [x ** 2 for x in d]
    assert reference_probs(d, temperature=0.5) == pytest.approx([x / sum(w) for x in w])


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(temperature=0), SamplingParams(temperature=0.7),
                                    SamplingParams(top_k=3), SamplingParams(temperature=1.3, top_p=0.8),
                                    SamplingParams(min_p=0.1), SamplingParams(top_k=4, top_p=0.9, min_p=0.05)])
def test_shipped_transform_matches_the_reference(params):
    gen = torch.Generator().manual_seed(0)
    rows = torch.rand(200, 6, generator=gen, dtype=torch.float64) ** 3
    rows[:20, 2] = rows[:20, 4]  # ties
    rows /= rows.sum(-1, keepdim=True)
    got = logits_to_probs(torch.log(rows), params)
    for r in range(rows.shape[0]):
        want = reference_probs(tuple(rows[r].tolist()), params.temperature, params.top_k, params.top_p, params.min_p)
        assert got[r].tolist() == pytest.approx(want, abs=1e-14), r


def test_target_distribution_sums_to_one_and_stops_at_eos():
    t = TableModel(3, 5)
    law = target_distribution(t, 4, eos=0)
    assert math.fsum(law.values()) == pytest.approx(1.0, abs=1e-14)
    assert all(0 not in s[:-1] for s in law)  # nothing after EOS
    assert any(len(s) < 4 for s in law) and any(len(s) == 4 for s in law)
    s = next(s for s in law if len(s) == 4)
    want = math.prod(t(s[:i])[s[i]] for i in range(4))
    assert law[s] == pytest.approx(want, rel=1e-12)


def test_total_variation():
    assert total_variation({(0,): 0.5, (1,): 0.5}, {(0,): 0.5, (1,): 0.5}) == 0.0
    assert total_variation({(0,): 1.0}, {(1,): 1.0}) == 1.0
    assert total_variation({(0,): 0.7, (1,): 0.3}, {(0,): 0.5, (2,): 0.5}) == pytest.approx(0.5)


@pytest.mark.parametrize("method", ["exact", "gumbel"])
def test_symbolic_law_is_exact(method):
    """The rule itself, from the reference primitives: exact, and nothing emitted after EOS."""
    t, q = TableModel(3, 1, sharpness=2.0), TableModel(3, 2, sharpness=2.0)
    law = emitted_distribution(t, q, k=2, n_tokens=3, method=method, eos=2)
    assert math.fsum(law.values()) == pytest.approx(1.0, abs=1e-13)
    assert all(2 not in s[:-1] for s in law)
    assert total_variation(law, target_distribution(t, 3, eos=2)) <= TV_TOLERANCE


# ----------------------------------------------------------------------------------------------
# The cell enumeration drives the shipped code


def test_cell_draws_read_their_tables_by_row_and_position():
    acc = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], dtype=torch.float64)
    draws = CellDraws({STREAM_ACCEPT: acc, STREAM_EMIT: 1 - acc})
    u = draws.uniform(torch.tensor([[1], [0]]), torch.tensor([[POS0, POS0 + 1], [POS0 + 1, POS0 + 9]]), STREAM_ACCEPT)
    assert u.tolist() == [[0.4, 0.5], [0.2, 0.3]]  # past the table: its last column
    assert draws.uniform(torch.tensor([0, 1]), torch.tensor([POS0 + 2, POS0]), STREAM_EMIT).tolist() == \
        pytest.approx([0.7, 0.6])


def test_a_draws_seam_is_the_only_randomness_verify_uses():
    """Two calls with the same cell draws and different seeds give the same tokens."""
    gen = torch.Generator().manual_seed(3)
    p = torch.softmax(torch.randn(4, 3, 5, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(4, 2, 5, generator=gen, dtype=torch.float64), -1)
    d = torch.randint(0, 5, (4, 2), generator=gen)
    table = torch.rand(4, 4, generator=gen, dtype=torch.float64)

    def run(seeds):
        draws = CellDraws({STREAM_ACCEPT: table, STREAM_EMIT: table.flip(1)})
        return V_MOD.verify(p, q, d, seeds=seeds, positions=torch.full((4,), POS0), draws=draws).tokens

    # CellDraws keys rows by seed = row index; a permutation of rows must permute the output
    perm = torch.tensor([2, 0, 3, 1])
    assert torch.equal(run(torch.arange(4)), run(torch.arange(4)))
    out = V_MOD.verify(p[perm], q[perm], d[perm], seeds=perm, positions=torch.full((4,), POS0),
                       draws=CellDraws({STREAM_ACCEPT: table, STREAM_EMIT: table.flip(1)})).tokens
    assert torch.equal(out, run(torch.arange(4))[perm])


@pytest.mark.parametrize("case", [CertCase("exact", "random", 3, 2, 3), CertCase("exact", "onehot_q", 3, 3, 3),
                                  CertCase("exact", "disjoint", 4, 2, 3), CertCase("gumbel", "random", 3, 2, 3)],
                         ids=_id)
def test_one_pass_of_the_shipped_code_has_the_rules_law(case):
    """Per pass, the law of what verify() emits equals the symbolic law of the rule (same drafter)."""
    s = setup_for(case)
    for ctx in [(), (1,), (0, 2)]:
        law = _one_pass(s, [ctx])[0][0]
        draft = s.draft if s.point_mass else s.q_ref
        if case.method == "gumbel":  # the certifier's gumbel drafter: the draft table's top token
            draft = lambda c: max(range(s.vocab), key=lambda x: (s.q_ref(c)[x], -x))  # noqa: E731
        rule = _one_iteration(s.p_ref, draft, case.k, case.method, s.point_mass or case.method == "gumbel", ctx)
        assert total_variation(law, rule) <= TV_TOLERANCE


def test_grid_covers_every_mode_edge_and_size():
    assert {(c.method, c.edge) for c in FULL} == {(m, e) for m in ("exact", "gumbel") for e in EDGES} - {
        ("gumbel", e) for e in EXACT_ONLY}
    small = [c for c in FULL if c.edge != "large_v"]
    assert {c.vocab for c in small} == {2, 3, 4, 5} and {c.k for c in small} == {1, 2, 3, 4}
    assert max(c.n_tokens for c in small) == 5 and min(c.n_tokens for c in small) >= 2
    assert {c.vocab for c in FULL if c.edge == "large_v"} == {LARGE_V} and LARGE_V >= 8 * rng._CHUNK
    assert LARGE_V % rng._CHUNK and LARGE_V % rng.GUMBEL_BLOCK  # partial last chunk and block
    quick = default_grid(quick=True)
    assert {(c.method, c.edge, c.dtype) for c in quick} == {(c.method, c.edge, c.dtype) for c in FULL}
    assert {c.dtype for c in quick} == {"float64", "float32", "bfloat16"}


@pytest.mark.parametrize("case", SMALL, ids=_id)
def test_every_mode_and_edge_case_is_exact(case):
    res = run_case(case)
    assert res.passed, res
    assert res.tv <= TV_TOLERANCE and res.probe_mismatches == 0
    if case.method == "gumbel":
        assert res.pathwise_mismatches == 0


@pytest.mark.slow
@pytest.mark.parametrize("case", FULL, ids=_id)
def test_full_grid_case_is_exact(case):
    res = run_case(case)
    assert res.passed, res


def test_other_seeds_and_a_prompt_are_exact_too():
    """Extra random tables beyond the grid's seed 0, with a non-empty prompt, through the shipped code."""
    for seed in (1, 2):
        for method in ("exact", "gumbel"):
            s = setup_for(CertCase(method, "random", 3, 3, 3, seed=seed))
            got, probes = shipped_distribution(s, 3, prompt=(1, 2))
            want = target_distribution(s.p_ref, 3, prompt=(1, 2))
            assert total_variation(got, want) <= TV_TOLERANCE and probes == 0


def test_greedy_setups_take_the_law_of_verify_argmax(monkeypatch):
    """Temperature 0: the law is that of verify_argmax (what the engine runs for greedy chains) on
    the engine's argmax of the logits, and verify() must agree with it on every row."""
    calls = []
    real = V_MOD.verify_argmax
    monkeypatch.setattr(V_MOD, "verify_argmax", lambda *a: calls.append(1) or real(*a))
    for method in ("exact", "gumbel"):
        assert run_case(CertCase(method, "greedy_ties", 3, 2, 3)).passed
    assert len(calls) >= 2


def test_gumbel_cells_run_the_shipped_search(monkeypatch):
    """CellDraws drive rng.gumbel_argmax itself (block maxima, pruning) on the cells' noise, not a
    replacement: a search that returns the runner-up fails the certificate."""
    real = rng.gumbel_argmax

    def runner_up(probs, seeds, positions, noise=None):
        noise = rng.GumbelUniforms(seeds, positions) if noise is None else noise
        u = noise.rows(torch.arange(probs.shape[0]), probs.shape[-1])
        score = (torch.log(u) / probs.double()).masked_fill(probs <= 0, -math.inf)
        second = score.topk(min(2, probs.shape[-1]), -1).indices[:, -1]
        return torch.where(torch.isfinite(score.gather(1, second[:, None]).squeeze(1)), second,
                           real(probs, seeds, positions, noise))

    monkeypatch.setattr(rng, "gumbel_argmax", runner_up)
    res = run_case(CertCase("gumbel", "random", 3, 2, 3))
    assert not res.passed and res.tv > 1e-3


def test_gumbel_cell_noise_stays_in_the_real_noise_range():
    """The noise chosen inside each Gumbel cell keeps G >= -3.6 for tokens with mass (the real
    uniforms are >= 2**-53): below it exp(-exp(-G)) underflows to 0 and the search, which works
    with u, loses the token. Regression: a float32 case hit G = -7.98 and the low probe flipped."""
    seen = []
    real = _CellDraws.gumbel_argmax

    def spy(self, probs, seeds, positions):
        G = self.gumbel(seeds, positions, probs.shape[-1])
        seen.append(float(torch.where(probs > 0, G, math.inf).min()))
        return real(self, probs, seeds, positions)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_CellDraws, "gumbel_argmax", spy)
        res = run_case(CertCase("gumbel", "random", 3, 2, 5, dtype="float32"))
    assert res.passed, res
    assert min(seen) >= -3.6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inverse_cdf_boundaries_at_large_v_catch_a_wrong_two_level_search(dtype):
    """The pathwise check of the two-level inverse CDF (V = 2,085) passes on the shipped code and
    fails on one that loses the last partial chunk or steps one chunk late."""
    s = large.large_setup("exact", LARGE_V, 1, 0, dtype)
    p, residual = large._rows(s, [()])
    assert large.inverse_cdf_boundary_mismatches(p) == 0
    assert large.inverse_cdf_boundary_mismatches(residual) == 0
    real = rng.inverse_cdf
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rng, "inverse_cdf", lambda probs, u: real(probs[..., :2048], u))
        assert large.inverse_cdf_boundary_mismatches(p) > 0

        def late(probs, u):  # the token one past the right one whenever u lies in the upper half of its cell
            x = real(probs, u)
            return torch.where(real(probs, (u + 1e-13).clamp(max=1 - 2**-53)) != x, x, (x + 1).clamp(max=probs.shape[-1] - 1))
        mp.setattr(rng, "inverse_cdf", late)
        assert large.inverse_cdf_boundary_mismatches(p) > 0


def test_gumbel_ties_at_large_v_catch_a_search_that_prunes_too_much():
    """The pathwise Gumbel check (shipped search vs whole vector, near ties across blocks) passes on
    the shipped code and fails when the search stops at the block with the best bound."""
    from verispec.certify.mutants import MUTANTS as _M

    s = large.large_setup("gumbel", LARGE_V, 1, 0, torch.float32)
    p, _ = large._rows(s, [(), (2, 3)])
    assert large.gumbel_tie_mismatches(p) == 0
    with next(m for m in _M if m.name == "gumbel_first_block_only").injected():
        assert large.gumbel_tie_mismatches(p) > 0


def test_gumbel_whole_vector_fallback_at_large_v_is_checked(monkeypatch):
    """The large_v case reaches the search's whole-vector fallback (a row with a heavy token in every
    block) and catches a fallback that ignores p."""
    taken = []
    real = rng._argmax_rows
    monkeypatch.setattr(rng, "_argmax_rows", lambda *a: taken.append(a[2].numel()) or real(*a))
    assert large.run_large("gumbel", LARGE_V, 1, 0, torch.float64)[2] == 0
    assert sum(taken) > 0
    monkeypatch.setattr(rng, "_argmax_rows", lambda probs, noise, rows: noise.rows(rows, probs.shape[-1]).argmax(-1))
    assert large.run_large("gumbel", LARGE_V, 1, 0, torch.float64)[2] > 0


@pytest.mark.parametrize("method", ["exact", "gumbel"])
def test_large_vocabulary_case_is_exact(method):
    res = run_case(CertCase(method, "large_v", LARGE_V, 1, 1))
    assert res.passed, res
    assert res.tv <= TV_TOLERANCE and res.probe_mismatches == 0 and res.pathwise_mismatches == 0


# ----------------------------------------------------------------------------------------------
# Power: each mutant of the shipped code is caught


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_caught(mutant):
    (res,) = run_mutants(mutants=[mutant])
    assert res.caught, f"{mutant.name} survived {res.cases_run} cases"
    assert not res.caught_by.passed


def test_mutants_restore_the_shipped_code():
    real = V_MOD._accepts
    with MUTANTS[0].injected():
        assert V_MOD._accepts is not real
    assert V_MOD._accepts is real
    assert run_case(CertCase("exact", "random", 3, 2, 3)).passed


def test_reference_verify_runs_on_a_single_row():
    """Regression: reference_verify used to pass 1-D probabilities with [1]-shaped seeds to
    rng.sample (which then failed to broadcast) on every residual/bonus draw."""
    p = torch.tensor([[[0.3, 0.7], [0.5, 0.5]]], dtype=torch.float64)
    out = certify.reference_verify(
        p, None, torch.tensor([[1]]), num_draft=torch.tensor([1]), seeds=torch.tensor([3]), positions=torch.tensor([0])
    )
    assert len(out) == 1 and 1 <= len(out[0]) <= 2
