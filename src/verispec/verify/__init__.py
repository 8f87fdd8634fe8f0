"""Verification of speculative drafts (docs/design.md sections 2 and 9).

* :mod:`.chain` - chains: the exact (token by token), block and Gumbel rules, the greedy fast path,
  :func:`verify_argmax`, input validation;
* :mod:`.block` - block verification of a chain (Sun et al. 2025);
* :mod:`.tree` - trees: several children per node (i.i.d., without replacement, point masses,
  greedy, Gumbel), and :func:`verify_draft`, the engine's entry point;

The names below are the package's public surface; code that replaces one step of a rule
(:mod:`verispec.certify.mutants`) patches the submodule that holds it.
"""

from .chain import (
    METHODS,
    SUM_TOLERANCE,
    VERIFY_METHODS,
    Verification,
    gumbel_argmax,
    merge_rows,
    verify,
    verify_argmax,
)
from .tree import verify_argmax_tree, verify_draft, verify_tree

__all__ = ["Verification", "verify", "verify_draft", "verify_tree", "verify_argmax", "verify_argmax_tree", "merge_rows", "gumbel_argmax",
           "METHODS", "VERIFY_METHODS", "SUM_TOLERANCE"]
