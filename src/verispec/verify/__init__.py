"""Verification of speculative drafts (docs/design.md sections 2 and 9).

* :mod:`.chain` - chains: the exact (token by token) and Gumbel rules, the greedy fast path,
  :func:`verify_argmax`, input validation;

The names below are the package's public surface; code that replaces one step of a rule
(:mod:`verispec.certify.mutants`) patches the submodule that holds it.
"""

from .chain import (
    METHODS,
    SUM_TOLERANCE,
    Verification,
    gumbel_argmax,
    merge_rows,
    verify,
    verify_argmax,
    verify_draft,
)

__all__ = ["Verification", "verify", "verify_draft", "verify_argmax", "merge_rows", "gumbel_argmax", "METHODS",
           "SUM_TOLERANCE"]
