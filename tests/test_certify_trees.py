"""The tree and block certificate (verispec.certify.trees): the quick grid passes, every tree mutant
fails it through the law itself, and the full grid covers what the issue asks for."""

from __future__ import annotations

import pytest
import torch

from verispec.certify import TREE_MODES, TREE_MUTANTS, TV_TOLERANCE, run_tree_mutants, tree_grid
from verispec.certify.mutants import TREE
from verispec.certify.trees import SHAPES, TreeCase, _depth, certify_trees, run_tree_case


@pytest.fixture(scope="module")
def quick_results():
    return certify_trees(tree_grid(quick=True))


def test_the_quick_tree_grid_passes(quick_results):
    bad = [r for r in quick_results if not r.passed]
    assert not bad, bad
    assert {r.case.mode for r in quick_results} == set(TREE_MODES)
    assert max(r.tv for r in quick_results) <= TV_TOLERANCE
    assert all(r.rows > 0 for r in quick_results)
    assert all(r.pathwise_mismatches == 0 for r in quick_results if r.case.mode == "gumbel")


def test_the_full_grid_covers_depth_3_branching_3_and_v_2_to_4():
    cases = tree_grid(quick=False)
    trees = [c for c in cases if c.mode != "block"]
    assert {c.vocab for c in cases} == {2, 3, 4}
    for mode in TREE_MODES:
        assert {c.vocab for c in cases if c.mode == mode} == {2, 3, 4}, mode
    shapes = {s for c in trees for s in c.shapes}
    assert max(_depth(SHAPES[s]) for s in shapes) == 3
    branching = max(max(SHAPES[s].count(par) for par in set(SHAPES[s])) for s in shapes)
    assert branching == 3
    assert all(len(set(c.shapes)) > 1 for c in trees)  # ragged trees in one batch
    assert {c.k for c in cases if c.mode == "block"} == {1, 2, 3}


@pytest.mark.parametrize("mutant", TREE_MUTANTS, ids=lambda m: m.name)
def test_every_tree_mutant_fails_the_certificate_through_the_law(mutant):
    (res,) = run_tree_mutants(mutants=[mutant])
    assert res.caught, f"{mutant.name} survived {res.cases_run} cases"
    assert res.caught_by.tv > 1e3 * TV_TOLERANCE, res.caught_by  # the emitted law is wrong, not only a probe


def test_tree_mutants_restore_the_shipped_code():
    real = TREE._carry
    with TREE_MUTANTS[0].injected():
        assert TREE._carry is not real
        assert not run_tree_case(TreeCase("iid", 3, ("fan3", "fork"))).passed
    assert TREE._carry is real
    assert run_tree_case(TreeCase("iid", 3, ("fan3", "fork"))).passed


def test_a_one_sided_ladder_is_caught_in_without_replacement_too():
    """The same broken carry under children drawn without replacement (the other ladder)."""
    with TREE_MUTANTS[0].injected():
        assert not run_tree_case(TreeCase("without_replacement", 3, ("fan3", "broom"))).passed


def test_low_precision_rows_are_read_normalised():
    """The engine's p and q sum to 1 only within rounding; the tree walk reads them as p / sum(p).
    A walk that takes them as stored is caught on bfloat16 rows (off by ~1e-3; float32's ~1e-7
    moves a cell end by less than the probes see, as for chains: docs/design.md section 5)."""
    assert run_tree_case(TreeCase("iid", 3, ("broom", "fork"), dtype="float32")).passed
    case = TreeCase("iid", 3, ("broom", "fork"), dtype="bfloat16")
    assert run_tree_case(case).passed
    real = TREE.chain._sums
    try:
        TREE.chain._sums = lambda rows: torch.ones(rows.shape[0], dtype=torch.float64)  # no normalising
        assert not run_tree_case(case).passed
    finally:
        TREE.chain._sums = real
