"""``bootstrap_difference``: the paired percentile bootstrap of a difference of two pooled rates
(two heads' alpha over the same answers), checked against scipy's paired bootstrap."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from verispec.bench.intervals import bootstrap_difference


def _answers(n: int = 40, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Two heads on ``n`` answers of very different difficulty: b accepts one draft more than a on
    most answers (accepted, tested per answer)."""
    rng = np.random.default_rng(seed)
    tested = rng.integers(10, 40, size=n)
    acc_a = np.floor(tested * rng.uniform(0.1, 0.9, size=n))
    acc_b = np.minimum(tested, acc_a + (rng.uniform(size=n) < 0.8))
    return acc_b, tested, acc_a, tested


def _unpaired(na, da, nb, db, resamples: int = 4000, seed: int = 0) -> tuple[float, float]:
    """A wrong interval for paired items: each side resampled on its own."""
    rng = np.random.default_rng(seed)
    ia, ib = (rng.integers(0, len(na), size=(resamples, len(na))) for _ in range(2))
    diffs = na[ia].sum(1) / da[ia].sum(1) - nb[ib].sum(1) / db[ib].sum(1)
    return tuple(np.quantile(diffs, [0.025, 0.975]))


def test_agrees_with_scipys_paired_percentile_bootstrap() -> None:
    na, da, nb, db = _answers()
    lo, hi = bootstrap_difference(na, da, nb, db, resamples=20000)

    def diff(na, da, nb, db, axis=-1):
        return na.sum(axis) / da.sum(axis) - nb.sum(axis) / db.sum(axis)

    ref = stats.bootstrap((na, da, nb, db), diff, paired=True, vectorized=True, n_resamples=20000,
                          method="percentile", random_state=np.random.default_rng(7)).confidence_interval
    assert lo == pytest.approx(ref.low, abs=2e-3) and hi == pytest.approx(ref.high, abs=2e-3)
    assert lo < diff(na, da, nb, db) < hi


def test_pairing_tells_a_small_steady_gain_from_noise() -> None:
    """b is ahead on most answers by one draft: the paired interval excludes 0, while resampling
    each head's answers on its own (the mutant) drowns the gain in how answers differ."""
    na, da, nb, db = _answers()
    gain = na.sum() / da.sum() - nb.sum() / db.sum()
    lo, hi = bootstrap_difference(na, da, nb, db)
    assert 0 < lo < gain < hi
    wrong_lo, _ = _unpaired(na, da, nb, db)
    assert wrong_lo < 0


def test_the_same_walk_twice_differs_by_exactly_zero_and_draws_are_seeded() -> None:
    na, da, _, _ = _answers()
    assert bootstrap_difference(na, da, na, da) == (0.0, 0.0)
    _, _, nb, db = _answers(seed=2)
    assert bootstrap_difference(na, da, nb, db) == bootstrap_difference(na, da, nb, db)
    assert bootstrap_difference(na, da, nb, db) != bootstrap_difference(na, da, nb, db, seed=1)


def test_bad_inputs_are_named() -> None:
    assert bootstrap_difference([1], [2], [1], [2]) is None  # one item: nothing to resample
    with pytest.raises(ValueError, match="bootstrap_difference: need one value per item"):
        bootstrap_difference([1, 2], [2, 2], [1], [2])
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_difference([1, 2], [2, 2], [1, 2], [2, 2], resamples=0)
    with pytest.raises(ValueError, match="level"):
        bootstrap_difference([1, 2], [2, 2], [1, 2], [2, 2], level=1.0)
