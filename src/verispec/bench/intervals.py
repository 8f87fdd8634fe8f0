"""Seeded bootstrap intervals for speedups (deterministic: the same measurements give the same interval).

A config's speedup is the project's headline definition (see :mod:`verispec.bench.analysis`):
``(sum tokens / sum wall)`` of the config over the same ratio of the baseline, summed over the
prompts both measured, each prompt's wall the median over its repeats. Its interval resamples
*prompts* with replacement (the same prompt for both sides of the ratio, so the pairing by prompt
is kept) and recomputes that ratio; the 2.5% and 97.5% percentiles of the resampled ratios are
the 95% interval. It says how much the headline depends on which prompts were drawn, and (since
each prompt's timing carries the run's noise) how noisy the run was. With fewer than two prompts
there is nothing to resample and the interval is ``None``.

A single prompt's speedup (one CSV row) gets an interval over its *repeats* instead:
:func:`bootstrap_repeats_ratio` resamples each side's repeats and recomputes the ratio of
median walls; ``None`` with fewer than two repeats on either side.

The random draws come from ``numpy.random.default_rng(seed)`` with a fixed seed, so reports are
reproducible from their measurements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "CI_LEVEL", "bootstrap_ratio", "bootstrap_repeats_ratio"]

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
CI_LEVEL = 0.95


def _percentiles(ratios: np.ndarray, level: float) -> tuple[float, float] | None:
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size == 0:
        return None
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(ratios, [tail, 1.0 - tail])
    return float(lo), float(hi)


def bootstrap_ratio(tokens_a: Sequence[float], walls_a: Sequence[float], tokens_b: Sequence[float],
                    walls_b: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                    level: float = CI_LEVEL) -> tuple[float, float] | None:
    """95% (``level``) percentile-bootstrap interval of ``(sum tokens_a / sum walls_a) / (sum tokens_b / sum walls_b)``.

    All four sequences have one entry per prompt, in the same prompt order (length n: tokens are
    counts, walls seconds). Each resample draws n prompt indices with replacement, the same
    indices for both sides. Returns ``(low, high)`` or ``None`` when n < 2.
    """
    n = len(tokens_a)
    if not len(walls_a) == len(tokens_b) == len(walls_b) == n:
        raise ValueError(f"bootstrap_ratio: need one value per prompt on each side, got lengths "
                         f"{n}, {len(walls_a)}, {len(tokens_b)}, {len(walls_b)}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n < 2:
        return None
    ta, wa, tb, wb = (np.asarray(x, dtype=np.float64) for x in (tokens_a, walls_a, tokens_b, walls_b))
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # [resamples, n] prompt indices
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = (ta[idx].sum(1) / wa[idx].sum(1)) / (tb[idx].sum(1) / wb[idx].sum(1))  # [resamples]
    return _percentiles(ratios, level)


def bootstrap_repeats_ratio(tokens_a: float, walls_a: Sequence[float], tokens_b: float, walls_b: Sequence[float],
                            *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                            level: float = CI_LEVEL) -> tuple[float, float] | None:
    """Interval of one prompt's speedup ``(tokens_a / median walls_a) / (tokens_b / median walls_b)``.

    ``walls_a`` / ``walls_b``: the seconds of each repeat of the two configs on this prompt. Each
    side's repeats are resampled independently. ``None`` when either side has < 2 repeats or a
    side produced no tokens.
    """
    if len(walls_a) < 2 or len(walls_b) < 2 or not tokens_a or not tokens_b:
        return None
    if not all(math.isfinite(w) and w > 0 for w in (*walls_a, *walls_b)):
        return None
    rng = np.random.default_rng(seed)
    wa, wb = np.asarray(walls_a, dtype=np.float64), np.asarray(walls_b, dtype=np.float64)
    ma = np.median(wa[rng.integers(0, wa.size, size=(resamples, wa.size))], axis=1)  # [resamples]
    mb = np.median(wb[rng.integers(0, wb.size, size=(resamples, wb.size))], axis=1)
    return _percentiles((tokens_a / ma) / (tokens_b / mb), level)
