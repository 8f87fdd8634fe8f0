"""Exactness certification: the shipped verifier's emitted law, computed exactly on table models.

* :mod:`.reference` - the rule in plain float64 (primitives, transform, a per-row verifier);
* :mod:`.tables` - toy target/draft models as tables and the target's own sequence law;
* :mod:`.cells` - the exact law of the real :func:`verispec.verify` (and the drafter's sampling
  step) by enumerating the cells of its draws;
* :mod:`.symbolic` - the same law for the rule itself, from the reference primitives;
* :mod:`.large` - V = 2,085 (two-level inverse CDF, many Gumbel blocks): one pass's exact law and
  pathwise checks at every CDF boundary and near Gumbel ties, in float32 and float64;
* :mod:`.grid` - modes x edge cases x dtype x V x K against the target's law (``verispec certify``);
* :mod:`.trees` - trees (every child draw, greedy, Gumbel; ragged shapes up to depth 3 and
  branching 3) and block verification, by the same enumeration of the shipped code;
* :mod:`.mutants` - deliberately wrong verifiers that the grid must catch (``--mutants``).
"""

from .cells import CellDraws, Setup, shipped_distribution
from .grid import EDGES, TV_TOLERANCE, CertCase, CertResult, certify_grid, default_grid, run_case, setup_for
from .mutants import MUTANTS, TREE_MUTANTS, Mutant, MutantResult, run_mutants, run_tree_mutants
from .reference import (
    accept_probability,
    gumbel_choice,
    gumbel_max_law,
    reference_probs,
    reference_verify,
    reference_verify_block,
    reference_verify_tree,
    residual_distribution,
    total_variation,
)
from .symbolic import emitted_distribution
from .tables import TableModel, target_distribution
from .trees import TREE_MODES, TreeCase, TreeResult, certify_trees, run_tree_case, tree_grid

__all__ = [
    "accept_probability", "residual_distribution", "gumbel_choice", "gumbel_max_law", "reference_probs",
    "reference_verify", "total_variation", "TableModel", "target_distribution", "emitted_distribution",
    "CellDraws", "Setup", "shipped_distribution", "CertCase", "CertResult", "EDGES", "TV_TOLERANCE",
    "default_grid", "run_case", "certify_grid", "setup_for", "MUTANTS", "Mutant", "MutantResult", "run_mutants",
    "reference_verify_tree", "reference_verify_block", "TREE_MODES", "TreeCase", "TreeResult", "tree_grid",
    "run_tree_case", "certify_trees", "TREE_MUTANTS", "run_tree_mutants",
]
