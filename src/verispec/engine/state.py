"""The engine's batch between steps: one row per running request, and the tensors beside them."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import torch

from ..kv import KVRunner
from ..sampling import RowParams
from .costs import CostTables
from .kpolicy import KRows
from .requests import Request, RequestOutput
from .stats import GenerationStats
from .text import RowText

__all__ = ["Row", "BatchState"]


@dataclass
class Row:
    """One running request."""

    request: Request
    request_id: Hashable
    prompt: list[int]
    method: str
    generated: list[int] = field(default_factory=list)
    origins: list[int] = field(default_factory=list)  # per generated token, see stats.uncount
    text: RowText | None = None  # tracked while running only for stop strings and streaming
    finish: str | None = None

    @property
    def remaining(self) -> int:
        return self.request.max_new_tokens - len(self.generated)


@dataclass
class BatchState:
    """Everything a step reads and writes. Rows join (``SpeculativeDecoder.add``) and leave (when
    they finish, or ``cancel``) between steps; the tensors stay aligned with ``rows``.

    Attributes:
        rows: the running requests, in batch order.
        runner: the target's KV cache; it holds every emitted token but each row's newest.
        last: ``[B]`` int64 each row's newest token (fed first by the next target pass).
        seeds: ``[B]`` int64 request seeds.
        params: each row's sampling transform.
        gumbel: ``[B]`` bool rows verified (and drafted) by the Gumbel rule.
        policy: each row's draft-length policy state.
        costs: the pass and draft-step cost tables the K policy weighs (fixed per decoder; each
            row reads one, see :class:`~verispec.engine.costs.CostTables`).
        stats: what this batch did so far.
        epoch: the decoder's batch this state belongs to (a newer ``start`` retires it).
        pending: outputs not yet returned: the first token of each row admitted since the last
            step (a prefill emits it), which the next ``step`` returns.
    """

    rows: list[Row]
    runner: KVRunner
    last: torch.Tensor
    seeds: torch.Tensor
    params: RowParams
    gumbel: torch.Tensor
    policy: KRows
    costs: CostTables
    stats: GenerationStats
    epoch: int
    pending: list[RequestOutput] = field(default_factory=list)
    step_started: float = 0.0  # perf_counter() at the start of the current step

    def __len__(self) -> int:
        """Requests not yet reported finished: the running rows, and rows that finished at their
        prefill (their first token was their last) whose completion the next ``step`` returns."""
        return len(self.rows) + sum(o.completion is not None for o in self.pending)

    def positions(self) -> torch.Tensor:
        """``[B]`` int64 absolute position of each row's next token (slot 0 of the next draft)."""
        return torch.tensor([len(r.prompt) + len(r.generated) for r in self.rows], dtype=torch.int64)

    def remaining(self) -> torch.Tensor:
        """``[B]`` int64 tokens each row may still emit."""
        return torch.tensor([r.remaining for r in self.rows], dtype=torch.int64)

    def methods(self) -> str | list[str]:
        """Each row's method, or the one name they all share."""
        names = [r.method for r in self.rows]
        return names[0] if len(set(names)) == 1 else names

    def block_rows(self) -> torch.Tensor:
        """``[B]`` bool: the rows verified by block verification (``method="block"``), whose
        drafter draws are keyed by the pass (:mod:`verispec.drafters.drawing`)."""
        return torch.tensor([r.method == "block" for r in self.rows], dtype=torch.bool)

    def keep(self, index: list[int]) -> None:
        """Keep the rows ``index`` (the engine's own tensors; the runner and drafter separately)."""
        rows = torch.tensor(index, dtype=torch.int64)
        self.rows = [self.rows[i] for i in index]
        dev = rows.to(self.last.device)
        self.last, self.seeds, self.gumbel = self.last[dev], self.seeds[dev], self.gumbel[dev]
        self.params = self.params.rows(rows)
        self.policy.keep(rows)
