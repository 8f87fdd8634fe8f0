"""Exactness by enumeration (verispec.certify): the emitted law of speculative decoding on toy
table models equals the target's own law to TV <= 1e-12, for every mode and edge case, and the
same check fails for deliberately wrong rules (so it has power).

The quick grid (V in {2, 3, 5}, K in {1, 2, 4}, N up to 5 as the enumeration budget allows) runs
in the default suite; the full grid (V in 2..5, K in 1..4, larger N; ~1 minute) is marked slow.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

from verispec import certify
from verispec.certify import (
    EDGES,
    TV_TOLERANCE,
    CertCase,
    TableModel,
    accept_probability,
    default_grid,
    emitted_distribution,
    gumbel_choice,
    gumbel_max_law,
    residual_distribution,
    run_case,
    target_distribution,
    total_variation,
)

QUICK = default_grid(quick=True)
FULL = default_grid(quick=False)


def _id(c: CertCase) -> str:
    return f"{c.method}-{c.edge}-V{c.vocab}-K{c.k}-N{c.n_tokens}"


# ----------------------------------------------------------------------------------------------
# Rule primitives


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
    # p == q: no residual mass, fall back to p
    assert residual_distribution([0.3, 0.7], [0.3, 0.7]) == pytest.approx([0.3, 0.7])


def test_gumbel_choice_ties_and_zeros():
    assert gumbel_choice([0.5, 0.5], [0.0, 0.0]) == 0  # tie -> lowest id
    assert gumbel_choice([0.0, 0.5, 0.5], [100.0, 0.0, 1.0]) == 2  # p = 0 never wins
    assert gumbel_choice([0.25, 0.75], [2.0, 0.0]) == 0  # log .25 + 2 > log .75
    assert gumbel_choice([0.25, 0.75], [1.0, 0.0]) == 1  # log .25 + 1 < log .75


@pytest.mark.parametrize(
    "p",
    [(0.5, 0.5), (0.1, 0.2, 0.7), (1.0, 0.0, 0.0), (0.0, 0.3, 0.0, 0.7), (1e-6, 1 - 1e-6), (0.05, 0.15, 0.3, 0.2, 0.3)],
)
def test_gumbel_max_law_is_p(p):
    """Numerical integration reproduces the Gumbel-max trick to ~1e-13 (computed, not assumed)."""
    law = gumbel_max_law(p)
    assert max(abs(a - b) for a, b in zip(law, p)) < 1e-12


# ----------------------------------------------------------------------------------------------
# The enumeration machinery itself


def test_target_distribution_sums_to_one_and_stops_at_eos():
    t = TableModel(3, 5)
    law = target_distribution(t, 4, eos=0)
    assert math.fsum(law.values()) == pytest.approx(1.0, abs=1e-14)
    assert all(0 not in s[:-1] for s in law)  # nothing after EOS
    assert any(len(s) < 4 for s in law) and any(len(s) == 4 for s in law)
    # a sequence's probability is the product of the table entries
    s = next(s for s in law if len(s) == 4)
    want = math.prod(t(s[:i])[s[i]] for i in range(4))
    assert law[s] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("method", ["exact", "gumbel"])
def test_emitted_distribution_is_a_distribution(method):
    t, q = TableModel(3, 1, sharpness=2.0), TableModel(3, 2, sharpness=2.0)
    law = emitted_distribution(t, q, k=2, n_tokens=3, method=method, eos=2)
    assert math.fsum(law.values()) == pytest.approx(1.0, abs=1e-13)
    assert all(2 not in s[:-1] for s in law)  # tokens after an accepted EOS are never emitted


def test_total_variation():
    assert total_variation({(0,): 0.5, (1,): 0.5}, {(0,): 0.5, (1,): 0.5}) == 0.0
    assert total_variation({(0,): 1.0}, {(1,): 1.0}) == 1.0
    assert total_variation({(0,): 0.7, (1,): 0.3}, {(0,): 0.5, (2,): 0.5}) == pytest.approx(0.5)


def test_grid_covers_every_mode_edge_and_size():
    full = default_grid(quick=False)
    assert {(c.method, c.edge) for c in full} == {(m, e) for m in ("exact", "gumbel") for e in EDGES} - {
        ("gumbel", "onehot_q")
    }
    assert {c.vocab for c in full} == {2, 3, 4, 5} and {c.k for c in full} == {1, 2, 3, 4}
    assert max(c.n_tokens for c in full) == 5 and min(c.n_tokens for c in full) >= 2
    assert {(c.method, c.edge) for c in QUICK} == {(c.method, c.edge) for c in full}


# ----------------------------------------------------------------------------------------------
# The certification grid


@pytest.mark.parametrize("case", QUICK, ids=_id)
def test_quick_grid_case_is_exact(case):
    res = run_case(case)
    assert res.tv <= TV_TOLERANCE, res
    if case.method == "gumbel":
        assert res.pathwise_mismatches == 0
    assert res.passed


@pytest.mark.slow
@pytest.mark.parametrize("case", FULL, ids=_id)
def test_full_grid_case_is_exact(case):
    res = run_case(case)
    assert res.tv <= TV_TOLERANCE and res.passed, res


def test_other_seeds_and_prompts_are_exact_too():
    """A few extra random tables beyond the grid's seed 0, with a non-empty prompt."""
    for seed in (1, 2, 3):
        for method in ("exact", "gumbel"):
            t = TableModel(3, seed, sharpness=2.0)
            q = TableModel(3, seed + 100, sharpness=0.5)
            got = emitted_distribution(t, q, k=3, n_tokens=3, method=method, prompt=(1, 2))
            want = target_distribution(t, 3, prompt=(1, 2))
            assert total_variation(got, want) <= TV_TOLERANCE


# ----------------------------------------------------------------------------------------------
# Power: wrong rules fail the same check


def _residual_unclipped(p, q):
    """p - q without max(0, .), renormalised by the absolute mass (a classic sign bug)."""
    r = [pi - qi for pi, qi in zip(p, q)]
    mass = math.fsum(abs(x) for x in r)
    return list(p) if mass <= 0 else [x / mass for x in r]


def _residual_is_p(p, q):
    return list(p)


def _accept_inverted(p_d, q_d):
    return min(1.0, q_d / p_d) if p_d > 0 else 1.0


WRONG_RULES = {
    "residual_unclipped": ("residual_distribution", _residual_unclipped),
    "residual_is_p": ("residual_distribution", _residual_is_p),
    "accept_q_over_p": ("accept_probability", _accept_inverted),
}


@pytest.mark.parametrize("edge", ["random", "onehot_q", "eos"])
@pytest.mark.parametrize("rule", sorted(WRONG_RULES))
def test_wrong_rule_fails_certification(monkeypatch, rule, edge):
    name, fn = WRONG_RULES[rule]
    case = CertCase("exact", edge, vocab=3, k=2, n_tokens=3)
    assert run_case(case).passed  # the right rule passes this very case
    monkeypatch.setattr(certify, name, fn)
    res = run_case(case)
    assert res.tv > 1e-6 and not res.passed


def test_wrong_gumbel_law_fails_certification(monkeypatch):
    """If the target's Gumbel choice did not follow p (here: a tempered law), the check fails."""
    case = CertCase("gumbel", "random", vocab=3, k=2, n_tokens=3)
    true_law = gumbel_max_law

    @functools.lru_cache(maxsize=None)
    def tempered(p):
        w = [x**1.2 for x in true_law(p)]
        return tuple(x / math.fsum(w) for x in w)

    monkeypatch.setattr(certify, "gumbel_max_law", tempered)
    res = run_case(case)
    assert res.tv > 1e-6 and not res.passed


def test_pathwise_gumbel_check_catches_a_wrong_verifier(monkeypatch):
    """The pathwise half of a gumbel case fails when verify uses the noise of the wrong position."""
    case = CertCase("gumbel", "random", vocab=3, k=2, n_tokens=3)
    real = certify.verify

    def off_by_one(p, q, d, *, positions, **kw):
        return real(p, q, d, positions=positions + 1, **kw)

    monkeypatch.setattr(certify, "verify", off_by_one)
    res = run_case(case)
    assert res.pathwise_mismatches and res.pathwise_mismatches > 0 and not res.passed


def test_reference_verify_runs_on_a_single_row():
    """Regression: reference_verify used to pass 1-D probabilities with [1]-shaped seeds to
    rng.sample (which then failed to broadcast) on every residual/bonus draw."""
    p = torch.tensor([[[0.3, 0.7], [0.5, 0.5]]], dtype=torch.float64)
    out = certify.reference_verify(
        p, None, torch.tensor([[1]]), num_draft=torch.tensor([1]), seeds=torch.tensor([3]), positions=torch.tensor([0])
    )
    assert len(out) == 1 and 1 <= len(out[0]) <= 2
