"""Is a benchmark run trustworthy? Checks that catch a machine busy with something else.

1. **One-token passes.** Target-only decoding is nothing but one-token target passes; the
   speculative configs of the same run make one-token passes too (a prompt-lookup miss, a
   draft cut to nothing: ``GenerationStats.verify_width_seconds[1]``). Both run the same
   forward on the same model, prompts and machine, so their mean times should agree. When
   they differ by more than :data:`PASS_TOLERANCE` (15%), something other than the engine
   slowed one side (a run under load once measured the baseline several times slower per pass
   than inside the speculative configs, and printed a nine-fold "speedup"; BENCHMARKS.md, noisy
   machines). The runner then re-measures the
   baseline once; if the two still disagree the run is marked unreliable and prints no headline.
2. **Two baselines.** With ``--compare hf`` the run measures target-only decoding twice
   (verispec's and HF's plain ``generate``). Speedups are taken over the faster of the two, and
   the report warns when they differ by more than :data:`BASELINE_TOLERANCE` (10%).

3. **The cost table against the run.** ``k="auto"`` weighs a pass-cost table timed before the
   run (or read from ``--costs``). When its one-token pass is more than :data:`PASS_TOLERANCE` away
   from target-only's one-token passes in the run (:func:`cost_table_check`), it was timed under
   other conditions. The policy reads the table's ratios (v(n)/v(1), c), which a uniform slowdown
   leaves as they were and a burst of other work on the cores skews, so the report notes it; the
   speedups are still measurements (every config ran under the run's conditions).

"Differ by more than x" is symmetric: ``max(a, b) / min(a, b) - 1 > x``. The check compares
*means*, not medians: speedups are ratios of summed times, and a contended 2-core machine stalls a
minority of passes for up to a second each (OpenMP threads waiting for a core), which moves the
sum (and the speedup) while the median stays put: on a busy run the medians of the two sides can
agree within a few percent while their means are half apart.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Protocol

__all__ = ["BASELINE_TOLERANCE", "PASS_TOLERANCE", "cost_table_check", "one_token_pass_check", "relative_gap"]

PASS_TOLERANCE = 0.15
BASELINE_TOLERANCE = 0.10


class _Stats(Protocol):
    verify_width_seconds: dict[int, list[float]]


class _Measurement(Protocol):
    config: str
    stats: _Stats | None


def relative_gap(a: float | None, b: float | None) -> float:
    """``max(a, b) / min(a, b) - 1`` (0 = equal, 0.15 = one is 15% above the other); NaN if unusable."""
    if a is None or b is None or not math.isfinite(a) or not math.isfinite(b) or a <= 0 or b <= 0:
        return math.nan
    return max(a, b) / min(a, b) - 1.0


def cost_table_check(table_v1_ms: float | None, run_v1_ms: float | None,
                     tolerance: float = PASS_TOLERANCE) -> str | None:
    """A note when the cost table's one-token pass (``table_v1_ms``) and target-only's one-token
    passes in the run (mean, ``run_v1_ms``) are more than ``tolerance`` apart (check 3 of the
    module docstring); None when they agree or either is unknown."""
    gap = relative_gap(table_v1_ms, run_v1_ms)
    if not math.isfinite(gap) or gap <= tolerance:
        return None
    return (f"the pass-cost table k=auto weighed puts a one-token pass at {table_v1_ms:.1f} ms, target-only's "
            f"one-token passes in the run took {run_v1_ms:.1f} ms ({100 * gap:.0f}% apart, > {100 * tolerance:.0f}%): "
            "it was timed under other conditions. k=auto reads its ratios (v(n)/v(1), c), which a uniform slowdown "
            "leaves as they were but a burst of other work on the cores skews; to compare K choices across runs, "
            "pin one table with --costs")


def _one_token_seconds(ms: Iterable[_Measurement]) -> list[float]:
    out: list[float] = []
    for m in ms:
        if m.stats is not None:
            out.extend(m.stats.verify_width_seconds.get(1, ()))
    return out


def one_token_pass_check(measurements: Iterable[_Measurement], baseline: str, speculative: Iterable[str],
                         tolerance: float = PASS_TOLERANCE) -> dict:
    """Compare the baseline's one-token target passes with those inside the speculative configs.

    ``measurements``: a run's generations (``.config``, ``.stats.verify_width_seconds``: width ->
    seconds of each target pass); ``baseline``: the target-only config key; ``speculative``: the
    verispec configs with a drafter. Returns a JSON-ready dict: ``baseline_pass_ms`` and
    ``speculative_pass_ms`` (means, milliseconds; the medians as ``*_median_ms``), the number of
    passes on each side, ``gap`` (:func:`relative_gap` of the means), ``tolerance`` and ``agree``:
    True / False, or None when either side has no one-token pass (a fixed-K model drafter never
    makes one), so nothing could be checked.
    """
    ms = list(measurements)
    spec = set(speculative)
    base_s = _one_token_seconds(m for m in ms if m.config == baseline)
    spec_s = _one_token_seconds(m for m in ms if m.config in spec)
    b = statistics.fmean(base_s) if base_s else math.nan
    s = statistics.fmean(spec_s) if spec_s else math.nan
    gap = relative_gap(b, s)
    return {
        "baseline_pass_ms": 1e3 * b if math.isfinite(b) else None,
        "speculative_pass_ms": 1e3 * s if math.isfinite(s) else None,
        "baseline_median_ms": 1e3 * statistics.median(base_s) if base_s else None,
        "speculative_median_ms": 1e3 * statistics.median(spec_s) if spec_s else None,
        "baseline_passes": len(base_s),
        "speculative_passes": len(spec_s),
        "gap": gap if math.isfinite(gap) else None,
        "tolerance": tolerance,
        "agree": None if not math.isfinite(gap) else bool(gap <= tolerance),
    }
