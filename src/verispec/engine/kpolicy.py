"""Draft-length (K) policies, per row: each request's K schedule depends on its own outcomes only.

* an int: that K every step;
* ``"heuristic"`` (HF's): +2 after a fully accepted draft, -1 otherwise;
* ``"auto"``: the K that maximises expected tokens per second,
  ``E(K) / (K * draft_step + verify(K + 1))`` with ``E(K) = (1 - a^(K+1)) / (1 - a)`` and the
  row's own acceptance estimate a (Leviathan et al. 2023, section 3.8); drafters that score
  their tokens draft up to ``max_k`` and each row is cut where the next token stops paying.

The costs (seconds of a draft step, of a target pass per width) are the machine's, shared by
every row: :class:`PassCosts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

__all__ = ["KPolicy", "KRows", "PassCosts", "check_k"]

KPolicy = int | str  # an int, "heuristic" or "auto"


def check_k(k: object, name: str = "k") -> KPolicy:
    """``k`` if it is a valid policy, else ``ValueError`` naming ``name``."""
    if isinstance(k, bool) or not (isinstance(k, int) or k in ("heuristic", "auto")):
        raise ValueError(f"{name} must be a positive int, 'heuristic' or 'auto', got {k!r}")
    if isinstance(k, int) and not 1 <= k <= 64:
        raise ValueError(f"{name} must be in [1, 64], got {k}")
    return k


@dataclass
class PassCosts:
    """Measured seconds: the median target pass per width, and the mean draft step."""

    verify: dict[int, float] = field(default_factory=dict)  # width -> median seconds
    draft_step: float | None = None

    def observe(self, verify_width_seconds: dict[int, list[float]], time_draft: float, draft_forwards: int) -> None:
        if draft_forwards and time_draft > 0:
            self.draft_step = time_draft / draft_forwards
        for w, ts in verify_width_seconds.items():
            self.verify[w] = sorted(ts)[len(ts) // 2]

    def verify_cost(self, w: int) -> float:
        """Seconds of a target pass of width ``w``: the median measured, else interpolated between
        the nearest measured widths, else extrapolated from the nearest with a gentle slope (low
        enough that an unmeasured width gets tried once)."""
        if not self.verify:
            return 1.0 + 0.05 * (w - 1)  # nothing measured yet: relative units
        if w in self.verify:
            return self.verify[w]
        widths = sorted(self.verify)
        lo = max((x for x in widths if x < w), default=None)
        hi = min((x for x in widths if x > w), default=None)
        if lo is not None and hi is not None:
            return self.verify[lo] + (self.verify[hi] - self.verify[lo]) * (w - lo) / (hi - lo)
        ref = lo if lo is not None else hi
        return self.verify[ref] * max(0.5, 1 + 0.05 * (w - ref))  # 5% per token, either way


class KRows:
    """The K policy state of every row of a batch (rows join with :meth:`add`, leave with :meth:`keep`)."""

    def __init__(self, max_k: int) -> None:
        self.max_k = max_k
        self.k = torch.zeros(0, dtype=torch.int64)  # [B] the next K per row
        self.heuristic = torch.zeros(0, dtype=torch.bool)  # [B]
        self.auto = torch.zeros(0, dtype=torch.bool)  # [B]
        # auto: per-row acceptance estimate, a Beta prior ~ alpha 0.6 (2.5 comparisons, 1.5 passed)
        self.tested = torch.zeros(0, dtype=torch.float64)
        self.passed = torch.zeros(0, dtype=torch.float64)

    def add(self, policies: list[KPolicy]) -> None:
        n = len(policies)
        start = [p if isinstance(p, int) else min(4, self.max_k) for p in policies]
        self.k = torch.cat([self.k, torch.tensor(start, dtype=torch.int64)])
        self.heuristic = torch.cat([self.heuristic, torch.tensor([p == "heuristic" for p in policies])])
        self.auto = torch.cat([self.auto, torch.tensor([p == "auto" for p in policies])])
        self.tested = torch.cat([self.tested, torch.full((n,), 2.5, dtype=torch.float64)])
        self.passed = torch.cat([self.passed, torch.full((n,), 1.5, dtype=torch.float64)])

    def keep(self, rows: torch.Tensor) -> None:
        for name in ("k", "heuristic", "auto", "tested", "passed"):
            setattr(self, name, getattr(self, name)[rows])

    def observe(self, num_accepted: torch.Tensor, n_draft: torch.Tensor, scored: torch.Tensor,
                costs: PassCosts) -> None:
        """After a verification: ``num_accepted [B]`` of ``n_draft [B]``; ``scored [B]`` rows had
        their draft cut by the drafter's own estimates (their acceptance is not the model's)."""
        full = (num_accepted == n_draft) & (n_draft > 0)
        self.k = torch.where(self.heuristic, torch.where(full, self.k + 2, self.k - 1).clamp(1, self.max_k), self.k)
        # Per-token acceptance MLE under the geometric model: accepted / comparisons made.
        learn = self.auto & ~scored
        rejected = (num_accepted < n_draft) & learn
        self.passed += num_accepted * learn
        self.tested += num_accepted * learn + rejected
        if bool(self.auto.any()) and costs.verify:
            self.k = torch.where(self.auto, self.best_k(costs), self.k)

    def best_k(self, costs: PassCosts) -> torch.Tensor:
        """``[B]`` argmax_K E[tokens]/cost per row, E = (1-a^(K+1))/(1-a), cost = K*draft + verify(K+1)."""
        a = (self.passed / self.tested).clamp_max(0.999)[:, None]  # [B, 1]
        base = costs.verify.get(1, min(costs.verify.values()))
        draft = costs.draft_step if costs.draft_step is not None else 0.05 * base
        K = torch.arange(1, self.max_k + 1, dtype=torch.float64)  # [max_k]
        cost = K * draft + torch.tensor([costs.verify_cost(int(k) + 1) for k in K], dtype=torch.float64)
        tokens = (1 - a ** (K + 1)) / (1 - a)  # [B, max_k]
        return (tokens / cost).argmax(1) + 1

    def cut(self, n_draft: torch.Tensor, accept_prob: torch.Tensor, costs: PassCosts
            ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per auto row, the draft length <= ``n_draft`` that maximises expected tokens per second.

        With a_j = ``accept_prob[b, j]`` (P(draft j accepted | drafts < j accepted)), verifying
        the first K drafts emits E_K = 1 + sum_{j<=K} prod_{i<=j} a_i tokens in expectation and
        costs one pass of width K+1 (the drafting is already paid). Rows that are not auto, or
        with a NaN among their drafts, keep ``n_draft``. Returns (lengths ``[B]``, rows cut ``[B]``).
        """
        B, K = accept_prob.shape
        if K == 0:
            return n_draft, torch.zeros(B, dtype=torch.bool)
        accept_prob = accept_prob.cpu()
        slots = torch.arange(K)
        drafted = slots[None] < n_draft[:, None]  # [B, K]
        rows = self.auto & ~(torch.isnan(accept_prob) & drafted).any(1) & (n_draft > 0)  # [B]
        a = torch.where(drafted, accept_prob, 0.0).nan_to_num(0.0).clamp(0.0, 1.0)  # [B, K]
        expected = torch.cat([torch.ones(B, 1, dtype=a.dtype), 1 + a.cumprod(1).cumsum(1)], 1)  # [B, K+1]
        cost = torch.tensor([costs.verify_cost(w) for w in range(1, K + 2)], dtype=a.dtype)  # [K+1]
        rate = (expected / cost).masked_fill(torch.arange(K + 1)[None] > n_draft[:, None], -math.inf)
        return torch.where(rows, rate.argmax(1), n_draft), rows

    def caps(self, scoring: bool) -> torch.Tensor:
        """``[B]`` the most tokens to ask for per row: ``max_k`` for auto rows of a scoring drafter."""
        return torch.where(self.auto & scoring, self.max_k, self.k) if scoring else self.k.clone()
