"""What a drafter is: the protocol the engine drives, and what it asks for each step.

The engine keeps one batch of rows (requests) that changes between steps: rows join
(:meth:`Drafter.add`, with their prompts) and leave (:meth:`Drafter.keep`, when they finish or
are cancelled). Each step it asks for a draft (:meth:`Drafter.propose`, a :class:`DraftAsk`
with every row's draft length, sampling transform and seed) and afterwards says what each row
emitted (:meth:`Drafter.update`), so the drafter rolls its state back to the accepted tokens.

Optional abilities are declared, not probed: a drafter that reads the target's final hidden
states (EAGLE) sets ``reads_target_features`` (and ``feature_taps``, the decoder layers whose
outputs it reads beside them: EAGLE-3's low and middle layers); one whose tokens carry acceptance
estimates (prompt lookup) sets ``scores_drafts``. :class:`DrafterBase` gives every ability its default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import torch

from ..draft import Draft
from ..models import CausalLM
from ..sampling import RowParams, SamplingParams

__all__ = ["Draft", "DraftAsk", "Drafter", "DrafterBase", "stand_in_features"]


@dataclass
class DraftAsk:
    """One step's request to a drafter, per row of the current batch (B rows).

    Attributes:
        k: ``[B]`` int64 tokens wanted per row (0 = none).
        k_cap: ``[B]`` int64 >= ``k``: the most a drafter that scores its tokens may return for
            the row (the engine then cuts each row where another token stops paying); other
            drafters ignore it.
        params: each row's sampling transform (the drafter must draw from it).
        gumbel: ``[B]`` bool, rows whose tokens are drawn by the Gumbel rule (shared noise)
            rather than by inverse CDF.
        seeds: ``[B]`` int64 request seeds.
        vocab_size: the target's vocabulary size V (``Draft.probs`` is ``[B, K, V]``).
        dtype: dtype of the target's probabilities (``Draft.probs`` must match it).
        more: optional; a drafter that drafts token by token calls ``more(i, conf)`` after
            token ``i`` (0-based) with ``conf [B]`` its own probability of that token, and drafts
            token ``i + 1`` only for the rows where it returns True (the engine's draft-length
            policy). The answer depends on tokens up to i only, never on token i + 1, which is
            what keeps the draft length from biasing the output.
        nodes: optional ``[B]`` int64, the most nodes a tree drafter may offer per row (a tree of
            depth <= ``k_cap``; 0 or ``None``: chains only). Drafters that only draft chains ignore it.
        block: optional ``[B]`` bool, rows verified by block verification: their sampled draws
            must be keyed so that the next pass never meets them (docs/design.md section 9).
    """

    k: torch.Tensor
    k_cap: torch.Tensor
    params: RowParams
    gumbel: torch.Tensor
    seeds: torch.Tensor
    vocab_size: int
    dtype: torch.dtype
    more: Callable[[int, torch.Tensor], torch.Tensor] | None = None
    nodes: torch.Tensor | None = None
    block: torch.Tensor | None = None

    @classmethod
    def of(cls, k: Sequence[int] | torch.Tensor, vocab_size: int, params: SamplingParams | None = None, *,
           method: str = "exact", seeds: Sequence[int] | None = None, dtype: torch.dtype = torch.float32,
           k_cap: Sequence[int] | torch.Tensor | None = None) -> DraftAsk:
        """An ask with the same transform and method for every row (seeds default 0): for
        driving a drafter by hand, as tests and examples do."""
        k = torch.as_tensor(k, dtype=torch.int64)
        B = len(k)
        params = params or SamplingParams()
        return cls(k, k.clone() if k_cap is None else torch.as_tensor(k_cap, dtype=torch.int64),
                   RowParams.of([params] * B), torch.full((B,), method == "gumbel"),
                   torch.zeros(B, dtype=torch.int64) if seeds is None else torch.tensor(seeds, dtype=torch.int64),
                   vocab_size, dtype)

    @property
    def all_greedy(self) -> bool:
        """Every row decodes by argmax: drafts are point masses, no dense q is needed."""
        return bool(self.params.greedy.all())


@runtime_checkable
class Drafter(Protocol):
    """What the engine needs from a drafter."""

    name: str
    reads_target_features: bool  # update()/add() get the target's final hidden states
    feature_taps: tuple[int, ...]  # and, when not empty, its states after these decoder layers
    scores_drafts: bool  # Draft.accept_prob is filled in; may return up to ask.k_cap tokens
    drafts_trees: bool  # may answer a DraftAsk with ``nodes`` by a tree (otherwise always a chain)

    def bind(self, target: CausalLM) -> None:
        """Check compatibility with the target (tokenizer, vocabulary) before any generation."""

    def add(self, prompts: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        """Append rows whose contexts are ``prompts`` to the batch.

        ``features`` (drafters that read them): per row, the target's final hidden states
        ``[len(prompt) - 1, H]`` at the prompt's positions before the last (feature i belongs to
        the position of token i and precedes token i + 1); with ``feature_taps``, ``[len(prompt)
        - 1, 1 + n, H]``: the final states, then those after each tapped layer.
        """

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only the rows ``rows`` (int64 ``[n]``, in that order)."""

    def propose(self, ask: DraftAsk) -> Draft:
        """Propose up to ``ask.k[b]`` tokens (``ask.k_cap[b]`` if ``scores_drafts``) per row."""

    def update(self, emitted: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        """Append each row's newly emitted tokens to its context (accepted drafts + 1 token).

        ``features`` (drafters that read them): per row, the target's final hidden states
        ``[len(emitted[b]), H]`` at the positions just before each emitted token (``[len, 1 + n,
        H]`` with ``feature_taps``, as at :meth:`add`).
        """


class DrafterBase:
    """Defaults for the optional parts of :class:`Drafter`: no abilities, nothing to bind."""

    name: str = "drafter"
    reads_target_features: ClassVar[bool] = False
    feature_taps: tuple[int, ...] = ()
    scores_drafts: ClassVar[bool] = False
    drafts_trees: ClassVar[bool] = False

    def bind(self, target: CausalLM) -> None:
        pass

    def start(self, prompts: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        """A fresh batch: drop every row, then :meth:`add` these."""
        self.keep(torch.zeros(0, dtype=torch.int64))
        self.add(prompts, features)

    def add(self, prompts: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        raise NotImplementedError

    def keep(self, rows: torch.Tensor) -> None:
        raise NotImplementedError

    def propose(self, ask: DraftAsk) -> Draft:
        raise NotImplementedError

    def update(self, emitted: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        raise NotImplementedError


def stand_in_features(drafter: Drafter, n: int, hidden_size: int, *, dtype: torch.dtype,
                      device: torch.device | str = "cpu") -> torch.Tensor:
    """Zeros shaped like the ``n`` features ``drafter`` reads (``[n, H]``, or ``[n, 1 + taps, H]``):
    for timing a drafter, whose cost does not depend on their values."""
    taps = tuple(getattr(drafter, "feature_taps", ()))
    shape = (n, 1 + len(taps), hidden_size) if taps else (n, hidden_size)
    return torch.zeros(shape, dtype=dtype, device=device)
