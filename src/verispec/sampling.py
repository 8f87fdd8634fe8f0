"""Sampling parameters and the one logits -> probabilities transform.

The same transform is applied to the target's logits (giving p) and to the drafter's logits
(giving q, the distribution the draft token is actually sampled from). Exactness of
speculative decoding holds for the *transformed* target distribution p, so both sides must
go through :func:`logits_to_probs` with the same :class:`SamplingParams`.

Filter order (the same as HuggingFace ``generate``):

1. temperature: ``logits / temperature``; temperature 0 means greedy: a one-hot on the argmax,
   ties broken towards the lowest token id, and no other filter applies;
2. top-k: keep the ``top_k`` largest logits (0 = off; ties at the k-th value are all kept);
3. top-p: keep the smallest set of most likely tokens whose mass reaches ``top_p``
   (the most likely token is always kept);
4. min-p: drop tokens whose probability is below ``min_p`` times the largest probability;
5. renormalise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

import torch

__all__ = ["SamplingParams", "RowParams", "logits_to_probs", "check_logits", "fit_vocab", "gumbel_rows", "split_rows",
           "merge_tensor_rows", "METHODS", "MIN_TEMPERATURE"]

T = TypeVar("T")

#: How a sampled row draws its tokens: "exact" (rejection sampling, inverse CDF) or "gumbel"
#: (drafter-invariant: the argmax of log p plus the shared Gumbel noise).
METHODS = ("exact", "gumbel")

#: The smallest non-zero temperature. ``logits / T`` must stay finite in float32 (max ~3.4e38):
#: at T >= 1e-4 that holds for any logit below 3.4e34 in magnitude, far beyond any model's,
#: while at T = 1e-40 an ordinary logit of 0.1 already overflows and the softmax is NaN. Nothing
#: is lost by the floor: at T = 1e-4 a logit gap of 0.01 is already a factor exp(-100) ~ 4e-44,
#: below float32's smallest normal number, so smaller temperatures differ from greedy (T = 0)
#: only between near-tied logits, where float32 rounding of the logits decides anyway.
MIN_TEMPERATURE = 1e-4


@dataclass(frozen=True)
class SamplingParams:
    """How tokens are chosen from a model's logits.

    Args:
        temperature: 0 (greedy decoding: argmax, ties to the lowest token id) or
            >= :data:`MIN_TEMPERATURE` (1e-4; smaller ones overflow ``logits / T``).
        top_k: keep only the k most likely tokens; 0 disables.
        top_p: nucleus sampling mass in (0, 1]; 1 disables.
        min_p: in [0, 1); drop tokens below ``min_p * max_prob``; 0 disables.
        seed: request seed for the counter-based random draws. ``None`` draws one from torch's
            global generator, so ``torch.manual_seed`` makes a whole run repeatable.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        _check_real("temperature", self.temperature)
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or >= {MIN_TEMPERATURE:g}, got {self.temperature:g}: "
                             f"logits / temperature would overflow float32; use 0 for greedy decoding")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int):
            raise TypeError(f"top_k must be an int, got {type(self.top_k).__name__}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        _check_real("top_p", self.top_p)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        _check_real("min_p", self.min_p)
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")
        if self.seed is not None:
            if isinstance(self.seed, bool) or not isinstance(self.seed, int):
                raise TypeError(f"seed must be an int or None, got {type(self.seed).__name__}")
            if not -(2**63) <= self.seed < 2**63:
                raise ValueError(f"seed must fit in int64, got {self.seed}")

    @property
    def greedy(self) -> bool:
        """True when decoding is deterministic argmax (temperature 0)."""
        return self.temperature == 0.0


def _check_real(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")


@dataclass(frozen=True)
class RowParams:
    """The sampling transform of every row of a batch: :class:`SamplingParams` fields as ``[B]``
    tensors, so that rows with different temperatures, top-k, top-p and min-p (and greedy rows)
    go through one vectorised :func:`logits_to_probs`.

    Attributes:
        temperature: ``[B]`` float64 (0 = greedy).
        top_k: ``[B]`` int64 (0 = off).
        top_p: ``[B]`` float64 (1 = off).
        min_p: ``[B]`` float64 (0 = off).
    """

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    min_p: torch.Tensor

    @classmethod
    def of(cls, params: Sequence[SamplingParams]) -> RowParams:
        """One row per entry of ``params`` (already validated by :class:`SamplingParams`)."""
        f64 = torch.float64
        return cls(torch.tensor([p.temperature for p in params], dtype=f64),
                   torch.tensor([p.top_k for p in params], dtype=torch.int64),
                   torch.tensor([p.top_p for p in params], dtype=f64),
                   torch.tensor([p.min_p for p in params], dtype=f64))

    def __len__(self) -> int:
        return self.temperature.shape[0]

    @property
    def greedy(self) -> torch.Tensor:
        """``[B]`` bool: rows decoded by argmax (temperature 0)."""
        return self.temperature == 0

    @cached_property
    def all_greedy(self) -> bool:
        """Every row is greedy (read once per step; the rows never change in place)."""
        return bool(self.greedy.all())

    def rows(self, index: torch.Tensor) -> RowParams:
        """The rows ``index`` (int64 ``[n]``), in that order."""
        return RowParams(self.temperature[index], self.top_k[index], self.top_p[index], self.min_p[index])

    def cat(self, other: RowParams) -> RowParams:
        """These rows, then ``other``'s."""
        return RowParams(*(torch.cat([a, b]) for a, b in zip(self._fields(), other._fields())))

    def to(self, device: torch.device | str) -> RowParams:
        """The same rows on ``device``."""
        return RowParams(*(x.to(device) for x in self._fields()))

    def _fields(self) -> tuple[torch.Tensor, ...]:
        return self.temperature, self.top_k, self.top_p, self.min_p


def logits_to_probs(logits: torch.Tensor, params: SamplingParams | RowParams) -> torch.Tensor:
    """Turn logits ``[..., V]`` into the sampling distribution ``[..., V]``.

    ``params`` is one transform for every row, or a :class:`RowParams` with one transform per
    entry of the first dimension (``logits [B, ..., V]``). A row's result depends only on its
    own logits and transform: the same bits whatever else is in the batch.

    The result has the dtype of ``logits`` (float32 or float64 recommended). Entries of
    ``-inf`` are allowed (masked tokens); NaN, ``+inf`` or a row that is entirely ``-inf``
    raise ``ValueError``, and so does a result that is not finite (``logits / temperature``
    overflowed): NaN must never reach a sampler.
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise TypeError("logits must be a floating-point torch.Tensor")
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have shape [..., V] with V >= 1, got {tuple(logits.shape)}")
    check_logits(logits)
    if isinstance(params, SamplingParams):
        params = RowParams.of([params]) if logits.dim() == 1 else _broadcast(params, logits.shape[0])
        if logits.dim() == 1:
            return _transform(logits[None], params)[0]
    elif logits.dim() < 2 or len(params) != logits.shape[0]:
        raise ValueError(f"RowParams has {len(params)} rows for logits of shape {tuple(logits.shape)}")
    return _transform(logits, params)


def check_logits(logits: torch.Tensor, what: str = "logits", top: torch.Tensor | None = None) -> None:
    """Raise ``ValueError`` where ``logits [..., V]`` hold NaN or +inf, or a row that is entirely
    ``-inf`` (no token could be drawn): NaN must never reach a sampler.

    ``top``: the row maxima, where the caller has them already. ``max`` propagates NaN, so the row
    maxima alone tell whether anything is wrong; only then are the rows looked at again, to say what.
    """
    top = logits.amax(-1) if top is None else top
    if bool(torch.isfinite(top).all()):
        return
    if bool(torch.isnan(logits).any()) or bool(torch.isposinf(logits).any()):
        raise ValueError(f"{what} contain NaN or +inf (a broken model or overflow)")
    raise ValueError(f"a row of {what} is entirely -inf: no token can be drawn")


def fit_vocab(logits: torch.Tensor, V: int) -> torch.Tensor:
    """Logits ``[..., V']`` cut or padded to ``V`` entries: a padded head's extra ids dropped, a
    short head's missing ids given -inf (probability 0)."""
    Vt = logits.shape[-1]
    if Vt == V:
        return logits
    if Vt > V:
        return logits[..., :V]
    return torch.cat([logits, logits.new_full((*logits.shape[:-1], V - Vt), -math.inf)], dim=-1)


def gumbel_rows(method: str | Sequence[str] | torch.Tensor, B: int, device: torch.device | str = "cpu"
                ) -> torch.Tensor:
    """``[B]`` bool: the rows drawn by the Gumbel rule, from one method name for every row, one
    name per row, or the mask itself. Raises ``ValueError`` for a name not in :data:`METHODS` or
    a list of another length."""
    if isinstance(method, torch.Tensor):
        return method.to(device=device, dtype=torch.bool)
    if isinstance(method, str) and method in METHODS:
        return torch.full((B,), method == "gumbel", dtype=torch.bool, device=device)
    if isinstance(method, str) or not isinstance(method, Sequence) or len(method) != B \
            or any(m not in METHODS for m in method):
        raise ValueError(f"method must be one of {METHODS} or a list of them, one per row (B = {B}), "
                         f"got {method!r:.80}")
    return torch.tensor([m == "gumbel" for m in method], dtype=torch.bool, device=device)


def split_rows(mask: torch.Tensor, on: Callable[[torch.Tensor | None], T], off: Callable[[torch.Tensor | None], T],
               merge: Callable[[int, tuple[torch.Tensor, T], tuple[torch.Tensor, T]], T]) -> T:
    """One result for a batch whose rows follow two rules: ``on`` for the rows where ``mask [B]``
    holds (greedy rows, Gumbel rows, ...), ``off`` for the others.

    Each rule is given the int64 index of its rows (on the mask's device), or ``None`` when it has
    every row: a batch of one kind runs one rule on the whole batch, without gathers. A mixed
    batch runs both, each on its own rows, and ``merge(B, (on_index, on_result), (off_index,
    off_result))`` puts every row back in its place, so a row's result depends on that row alone.
    """
    if bool(mask.all()):
        return on(None)
    if not bool(mask.any()):
        return off(None)
    on_rows, off_rows = mask.nonzero().squeeze(1), (~mask).nonzero().squeeze(1)
    return merge(mask.shape[0], (on_rows, on(on_rows)), (off_rows, off(off_rows)))


def merge_tensor_rows(B: int, *parts: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """``[B, ...]`` from blocks of rows ``(index [n], values [n, ...])``: row ``index[i]`` gets
    ``values[i]`` (the blocks cover every row; :func:`split_rows`'s ``merge`` for tensors)."""
    first = parts[0][1]
    out = first.new_empty((B, *first.shape[1:]))
    for index, values in parts:
        out[index.to(out.device)] = values
    return out


def _broadcast(params: SamplingParams, B: int) -> RowParams:
    one = RowParams.of([params])
    return one.rows(torch.zeros(B, dtype=torch.int64))


def _transform(logits: torch.Tensor, params: RowParams) -> torch.Tensor:
    """:func:`logits_to_probs` on ``logits [B, ..., V]``: greedy rows one-hot, the others filtered."""
    params = params.to(logits.device)
    return split_rows(params.greedy, lambda r: _one_hot_argmax(logits if r is None else logits[r]),
                      lambda r: _filtered(logits, params) if r is None else _filtered(logits[r], params.rows(r)),
                      merge_tensor_rows)


def _one_hot_argmax(logits: torch.Tensor) -> torch.Tensor:
    # torch.argmax returns the first maximum = the lowest id.
    top = logits.argmax(-1, keepdim=True)
    return torch.zeros_like(logits).scatter_(-1, top, 1.0)


def _per_row(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``[B]`` values shaped ``[B, 1, ..., 1]`` to broadcast against ``like [B, ..., V]``."""
    return x.view(-1, *([1] * (like.dim() - 1)))


def _filtered(logits: torch.Tensor, params: RowParams) -> torch.Tensor:
    """Temperature, top-k, top-p, min-p per row (no greedy rows), then the softmax."""
    t = params.temperature
    x = logits if bool((t == 1.0).all()) else logits / _per_row(t.to(logits.dtype), logits)
    vocab = x.shape[-1]
    k = params.top_k
    k_on = (k > 0) & (k < vocab)  # [B]
    if bool(k_on.any()):
        values = torch.topk(x, int(k[k_on].max()), dim=-1).values  # [B, ..., k_max] descending
        index = _per_row((k - 1).clamp(0, values.shape[-1] - 1), x).expand(*x.shape[:-1], 1)
        kth = values.gather(-1, index)  # [B, ..., 1] the k-th largest logit of each row
        x = x.masked_fill((x < kth) & _per_row(k_on, x), -math.inf)
    p_on = params.top_p < 1.0
    if bool(p_on.any()):
        x = _top_p_filter(x, _per_row(params.top_p.to(x.dtype), x), _per_row(p_on, x))
    probs = torch.softmax(x, dim=-1)
    m_on = params.min_p > 0.0
    if bool(m_on.any()):
        cutoff = _per_row(params.min_p.to(probs.dtype), probs) * probs.amax(-1, keepdim=True)
        cut = probs.masked_fill(probs < cutoff, 0.0)
        probs = torch.where(_per_row(m_on, probs), cut / cut.sum(-1, keepdim=True), probs)
    # NaN anywhere makes its row's sum NaN: one cheap reduction guards every sampler downstream.
    finite = torch.isfinite(probs.sum(-1))
    if not bool(finite.all()):
        row = int((~finite).reshape(finite.shape[0], -1).any(-1).nonzero()[0])
        raise ValueError(f"logits / temperature ({float(t[row]):g}) overflowed: the probabilities are not "
                         f"finite (logits of magnitude up to {float(logits.nan_to_num(0, 0, 0).abs().amax()):.3g})")
    return probs


def _top_p_filter(x: torch.Tensor, top_p: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Mask logits outside the nucleus: the smallest prefix (by descending prob) with mass >= top_p,
    in the rows ``rows`` (``top_p`` and ``rows`` broadcast against ``x``)."""
    sorted_x, order = torch.sort(x, dim=-1, descending=True, stable=True)
    sorted_p = torch.softmax(sorted_x, dim=-1)
    # Mass strictly before each token; a token stays if the mass before it is < top_p,
    # so the most likely token (mass before = 0) always stays.
    mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
    drop_sorted = (mass_before >= top_p) & rows
    drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
    return x.masked_fill(drop, -math.inf)
