"""The server's drafter: the engine's drafter with per-request caps on the draft length.

:class:`CappedDrafter` wraps the drafter the decoder was built with and, before each step, is
told a cap per row of the batch (by the scheduler, from the rows' own requests):

* ``0`` for a request sent with ``"draft": "none"``: the row drafts nothing, so it is decoded
  target-only (the same counter-based draws as a decoder without a drafter: same text);
* :func:`load_cap` (``--verify-budget``, off by default) for a row whose text cannot depend on
  its draft lengths (greedy, ``gumbel``, or unseeded): an explicit user cap on the tokens of a
  verify pass. Turning drafting down as the batch grows is the engine's own ``k="auto"`` policy
  (:mod:`verispec.engine.kpolicy`: greedy and Gumbel rows weigh the measured cost of a pass of
  the batch's real size); this cap only bounds it further;
* no cap for a seeded ``exact`` request: its text depends on its draft lengths, which must come
  from its own history only, never from what else is running.

It also keeps the final draft length of each row of the last step (after the engine's own cuts)
so the server can count drafted tokens per request. Everything else is the wrapped drafter's.
"""

from __future__ import annotations

from dataclasses import replace

import torch

__all__ = ["CappedDrafter", "load_cap", "NO_CAP"]

NO_CAP = 1 << 20


def load_cap(batch_size: int, budget: int) -> int:
    """The most draft tokens per row when ``batch_size`` rows share a verify pass of at most
    ``budget`` tokens (each row feeds its newest token plus its drafts); ``budget`` 0: no cap."""
    if budget <= 0 or batch_size <= 0:
        return NO_CAP
    return max(0, budget // batch_size - 1)


class CappedDrafter:
    """A drafter whose per-row draft lengths are capped by :attr:`caps` (``[B]`` int64, set before
    each step; ``None``: no caps, e.g. while the engine times the drafter)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.caps: torch.Tensor | None = None
        self._last = None  # the last capped proposal (the engine sets its final num_draft on it)

    def __getattr__(self, name: str):
        # only reached for attributes this wrapper does not have: name, scores_drafts, add, keep, ...
        return getattr(self.inner, name)

    def propose(self, ask):
        caps = self.caps
        if caps is None or len(caps) != len(ask.k):
            return self.inner.propose(ask)
        caps = caps.to(ask.k.device)
        ask = replace(ask, k=torch.minimum(ask.k, caps), k_cap=torch.minimum(ask.k_cap, caps.to(ask.k_cap.device)))
        draft = self.inner.propose(ask)
        draft.num_draft = torch.minimum(draft.num_draft, caps.to(draft.num_draft.device))
        self._last = draft  # the engine sets its final num_draft on this object before verifying
        return draft

    def drafted(self) -> list[int] | None:
        """Per row, the tokens drafted in the last capped step (``None`` if it was not capped)."""
        d = self._last
        if d is None:
            return None
        self._last = None
        return [int(n) for n in d.num_draft.cpu().tolist()]
