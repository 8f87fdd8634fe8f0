"""Seeded bootstrap intervals for speedups (deterministic: the same measurements give the same interval).

A config's speedup is the project's headline definition (see :mod:`verispec.bench.analysis`):
``(sum tokens / sum wall)`` of the config over the same ratio of the baseline, summed over the
prompts both measured, each prompt's wall the median over its repeats. Its interval resamples
*prompts* with replacement (the same prompt for both sides of the ratio, so the pairing by prompt
is kept) and recomputes that ratio; the 2.5% and 97.5% percentiles of the resampled ratios are
the 95% interval. It says how much the headline depends on which prompts were drawn, and (since
each prompt's timing carries the run's noise) how noisy the run was. With fewer than two prompts
there is nothing to resample and the interval is ``None``.

:func:`bootstrap_difference` is the same resampling for a difference of two pooled rates over
paired items, such as two draft heads' acceptance over the same answers.

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

__all__ = [
    "BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "CI_LEVEL", "bootstrap_difference", "bootstrap_ratio",
    "bootstrap_repeats_ratio",
]

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


def _paired_sums(caller: str, item: str, columns: Sequence[Sequence[float]], resamples: int, seed: int,
                 level: float) -> np.ndarray | None:
    """``[len(columns), resamples]``: each column's sum over n items drawn with replacement, the
    same draws for every column; ``None`` when n < 2. Checks the arguments for ``caller``."""
    lengths = [len(c) for c in columns]
    if len(set(lengths)) != 1:
        raise ValueError(f"{caller}: need one value per {item} on each side, got lengths "
                         f"{', '.join(map(str, lengths))}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    n = lengths[0]
    if n < 2:
        return None
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # [resamples, n] item indices
    return np.stack([np.asarray(c, dtype=np.float64)[idx].sum(1) for c in columns])


def bootstrap_ratio(tokens_a: Sequence[float], walls_a: Sequence[float], tokens_b: Sequence[float],
                    walls_b: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                    level: float = CI_LEVEL) -> tuple[float, float] | None:
    """95% (``level``) percentile-bootstrap interval of ``(sum tokens_a / sum walls_a) / (sum tokens_b / sum walls_b)``.

    All four sequences have one entry per prompt, in the same prompt order (length n: tokens are
    counts, walls seconds). Each resample draws n prompt indices with replacement, the same
    indices for both sides. Returns ``(low, high)`` or ``None`` when n < 2.
    """
    sums = _paired_sums("bootstrap_ratio", "prompt", (tokens_a, walls_a, tokens_b, walls_b), resamples, seed, level)
    if sums is None:
        return None
    ta, wa, tb, wb = sums  # [resamples] each
    with np.errstate(divide="ignore", invalid="ignore"):
        return _percentiles((ta / wa) / (tb / wb), level)


def bootstrap_difference(num_a: Sequence[float], den_a: Sequence[float], num_b: Sequence[float],
                         den_b: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                         level: float = CI_LEVEL) -> tuple[float, float] | None:
    """95% (``level``) percentile-bootstrap interval of ``sum num_a / sum den_a - sum num_b / sum den_b``.

    The four sequences have one entry per item (say accepted and tested drafts of heads a and b on
    each answer), in the same item order. Each resample draws n item indices with replacement, the
    same indices for both rates, so what the items share (an answer easy for both heads) cancels.
    Returns ``(low, high)``, or ``None`` when n < 2.
    """
    sums = _paired_sums("bootstrap_difference", "item", (num_a, den_a, num_b, den_b), resamples, seed, level)
    if sums is None:
        return None
    na, da, nb, db = sums  # [resamples] each
    with np.errstate(divide="ignore", invalid="ignore"):
        return _percentiles(na / da - nb / db, level)


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
