"""Metrics of a speculative run and the Leviathan et al. (2023) speedup model.

Definitions (DESIGN.md section 2), for acceptance rate ``alpha``, draft length ``K``, draft/target
cost ratio ``c`` and verify cost ``v(K+1)/v(1)`` (a target pass over K+1 tokens relative to one):

* expected tokens per target pass  ``E = (1 - alpha^(K+1)) / (1 - alpha)``  (``K + 1`` at alpha = 1);
* predicted speedup  ``E / (K c + v(K+1)/v(1))``; with ``v(K+1)/v(1) = 1`` this is Theorem 3.8;
* over measured draft lengths (prompt lookup drafts nothing without a match, adaptive K varies):
  ``sum_n h_n E(alpha, n) / (draft time / v(1) + sum_n h_n v(n+1)/v(1))``, ``h_n`` the target
  passes whose row drafted n tokens (:func:`predicted_speedup_over_lengths`).

Measured quantities come from :class:`verispec.engine.GenerationStats`:

* ``alpha = accepted / (accepted + rejected)`` (per tested draft token, Leviathan's alpha),
  ``tau = emitted / row_steps`` (tokens per target pass);
* ``v(w)`` = median seconds of the target passes of width ``w`` (``verify_width_seconds``);
* draft step = ``time_draft / draft_forwards`` (model drafters) or ``time_draft / drafted``
  (point-mass drafters such as prompt lookup, which run no model), and ``c = draft step / v(1)``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "cost_ratio",
    "expected_tokens",
    "median_widths",
    "optimal_k",
    "predicted_speedup",
    "predicted_speedup_over_lengths",
    "safe_ratio",
    "verify_cost",
]


def expected_tokens(alpha: float, k: float) -> float:
    """Expected tokens emitted per target pass, ``(1 - alpha^(k+1)) / (1 - alpha)``."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if alpha == 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: float, c: float, verify: float = 1.0) -> float:
    """Leviathan's speedup over target-only decoding: ``E(alpha, k) / (k c + verify)``.

    ``verify`` is the cost of a (k+1)-token target pass relative to a 1-token pass; 1 gives
    Theorem 3.8 exactly. Example: alpha .75, k 7, c .02 -> 3.16.
    """
    if c < 0 or verify <= 0:
        raise ValueError(f"need c >= 0 and verify > 0, got c={c}, verify={verify}")
    return expected_tokens(alpha, k) / (k * c + verify)


def predicted_speedup_over_lengths(alpha: float, lengths: Sequence[int], draft_cost: float,
                                   verify: Mapping[int, float] | None = None) -> tuple[float, float, float]:
    """Leviathan's model applied pass by pass to measured draft lengths.

    ``lengths[n]`` = target passes whose row drafted n tokens; ``draft_cost`` = all drafting time
    in units of one 1-token target pass; ``verify`` as in :func:`optimal_k`. A pass drafting n
    tokens yields ``E(alpha, n)`` tokens and costs ``v(n+1)/v(1)``. Returns (predicted speedup,
    expected tokens per pass, mean ``v(n+1)/v(1)`` per pass); NaNs when no pass is counted.
    With every pass at n = K and ``draft_cost`` = passes * K * c this equals
    :func:`predicted_speedup`.
    """
    passes = sum(lengths)
    if passes <= 0:
        return math.nan, math.nan, math.nan
    tokens = sum(h * expected_tokens(alpha, n) for n, h in enumerate(lengths) if h)
    v = sum(h * (1.0 if verify is None else verify_cost(verify, n + 1)) for n, h in enumerate(lengths) if h)
    return tokens / (draft_cost + v), tokens / passes, v / passes


def optimal_k(alpha: float, c: float, verify: Mapping[int, float] | None = None, max_k: int = 12
              ) -> tuple[int, float]:
    """The K in ``1..max_k`` with the largest predicted speedup, and that speedup.

    ``verify`` maps a pass width w to ``v(w)/v(1)`` (missing widths are interpolated, see
    :func:`verify_cost`); ``None`` means every pass costs 1 (Theorem 3.8).
    """
    best_k, best = 1, -math.inf
    for k in range(1, max_k + 1):
        v = 1.0 if verify is None else verify_cost(verify, k + 1)
        s = predicted_speedup(alpha, k, c, v)
        if s > best + 1e-12:
            best_k, best = k, s
    return best_k, best


def verify_cost(ratios: Mapping[int, float], width: float) -> float:
    """``v(width)/v(1)`` from measured ratios: exact, linearly interpolated, or extrapolated.

    Beyond the measured range the nearest two widths' slope is continued (never below flat);
    with a single measured width it is used as is. ``width`` may be fractional.
    """
    if not ratios:
        return 1.0
    ws = sorted(ratios)
    if width in ratios:
        return ratios[width]  # type: ignore[index]
    lo = [w for w in ws if w < width]
    hi = [w for w in ws if w > width]
    if lo and hi:
        a, b = lo[-1], hi[0]
        return ratios[a] + (ratios[b] - ratios[a]) * (width - a) / (b - a)
    if len(ws) == 1:
        return ratios[ws[0]]
    a, b = (ws[-2], ws[-1]) if lo else (ws[0], ws[1])
    slope = max(0.0, (ratios[b] - ratios[a]) / (b - a))
    ref = b if lo else a
    return max(1e-9, ratios[ref] + slope * (width - ref))


def median_widths(samples: Mapping[int, Iterable[float]]) -> dict[int, float]:
    """``{width: median seconds}`` from ``verify_width_seconds``-style samples (empty widths dropped)."""
    out = {}
    for w, ts in samples.items():
        ts = list(ts)
        if ts:
            out[int(w)] = statistics.median(ts)
    return dict(sorted(out.items()))


def cost_ratio(time_draft: float, draft_forwards: int, drafted: int, v1: float) -> float:
    """``c`` = one draft step / one 1-token target pass (see the module docstring)."""
    steps = draft_forwards if draft_forwards > 0 else drafted
    if steps <= 0 or not v1 or not math.isfinite(v1):
        return math.nan
    return (time_draft / steps) / v1


def safe_ratio(a: float | None, b: float | None) -> float:
    """``a / b`` or NaN when either is missing, non-finite or b is 0."""
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or b == 0:
        return math.nan
    return a / b

