"""Metrics of a speculative run and the Leviathan et al. (2023) speedup model.

Definitions (docs/design.md section 8), for acceptance rate ``alpha``, draft length ``K``, draft/target
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

Consistency: a pass over more tokens never costs less than one over fewer, so the predictions
read verify costs through a monotone fit over width (isotonic regression weighted by the
passes measured at each width), floored at ``v(1)`` (:func:`monotone_costs`; :func:`verify_cost`
applies it). Measured medians that fall with width
(noise, or a machine busy during some passes) are reported by :func:`non_monotone` and never
turn into a prediction above what the inputs allow: with ``v(w)/v(1) >= 1`` and at most ``K + 1``
tokens per pass, no prediction for K drafts exceeds ``K + 1`` (e.g. 2x at K = 1).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "cost_ratio",
    "expected_tokens",
    "median_widths",
    "monotone_costs",
    "non_monotone",
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


def monotone_costs(ratios: Mapping[int, float], weights: Mapping[int, float] | None = None) -> dict[int, float]:
    """The closest costs that never fall with width, floored at 1: ``{width: v(width)/v(1)}``.

    A wider pass does at least the work of a narrower one, so a measured cost below an earlier
    width's (or below the one-token pass) is noise or load, not a property of the model. The fit
    is weighted isotonic regression (pool-adjacent-violators; ``weights[w]``, e.g. how many passes
    of width w were measured, default 1 each): a falling stretch is replaced by its weighted mean,
    so one stalled median at a rarely used width moves the curve by its weight, not to its height.
    The result is then floored at 1. It is what :func:`verify_cost` and every prediction use.
    Example: ``{1: 1, 2: .7, 3: .75, 5: 1.3}`` -> ``{1: 1, 2: 1, 3: 1, 5: 1.3}``.
    """
    blocks: list[list[float]] = []  # [weighted mean, total weight, number of widths]
    ws = sorted(ratios)
    for w in ws:
        wt = 1.0 if weights is None else max(float(weights.get(w, 1.0)), 1e-12)
        blocks.append([float(ratios[w]), wt, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m2, w2, n2), (m1, w1, n1) = blocks[-2], blocks[-1]
            blocks[-2:] = [[(m2 * w2 + m1 * w1) / (w2 + w1), w2 + w1, n2 + n1]]
    fitted = [m for m, _, n in blocks for _ in range(n)]
    return {w: max(1.0, f) for w, f in zip(ws, fitted)}


def non_monotone(costs: Mapping[int, float], tolerance: float = 0.0) -> list[dict]:
    """Where measured costs fall with width: one entry per width ``w`` whose cost is more than
    ``tolerance`` (a fraction) below the largest cost of a narrower width ``w_prev``.

    ``costs``: ``{width: seconds or ratio}``. Entries: ``{"width", "cost", "narrower_width",
    "narrower_cost"}`` in the units given. Empty when the costs are monotone.
    """
    out = []
    top_w, top = None, -math.inf
    for w in sorted(costs):
        c = float(costs[w])
        if top_w is not None and c < top * (1.0 - tolerance):
            out.append({"width": int(w), "cost": c, "narrower_width": int(top_w), "narrower_cost": top})
        if c > top:
            top_w, top = w, c
    return out


def verify_cost(ratios: Mapping[int, float], width: float) -> float:
    """``v(width)/v(1)`` from measured ratios: exact, linearly interpolated, or extrapolated.

    The ratios are first made monotone (:func:`monotone_costs`, unweighted; at least 1).
    Beyond the measured range the nearest two widths' slope is continued (never below flat);
    with a single measured width it is used as is. ``width`` may be fractional.
    """
    if not ratios:
        return 1.0
    ratios = monotone_costs(ratios)
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
    return max(1.0, ratios[ref] + slope * (width - ref))


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

