"""Counter-based randomness (verispec.rng): range, determinism, independence, and laws.

The statistical checks use fixed seeds, so they are deterministic; the significance level
quoted in each (alpha) is the false-alarm rate the check would have over fresh seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from verispec import rng
from verispec.rng import STREAM_ACCEPT, STREAM_DRAFT, STREAM_EMIT, STREAM_GUMBEL, gumbel_noise, sample, uniform

ALPHA = 1e-4
N = 100_000


def test_uniform_is_float64_strictly_inside_unit_interval():
    seeds = torch.arange(N, dtype=torch.int64)
    for stream in (STREAM_DRAFT, STREAM_ACCEPT, STREAM_EMIT):
        u = uniform(seeds, torch.zeros(N, dtype=torch.int64), stream)
        assert u.dtype == torch.float64 and u.shape == (N,)
        assert bool((u > 0).all()) and bool((u < 1).all())


def test_unit_map_extremes_stay_open():
    """The extreme hash words (all bits 0 / all bits 1) map strictly inside (0, 1).

    Regression: building the uniform from 53 bits as (k + 0.5) * 2**-53 rounds to exactly 1.0
    at k = 2**53 - 1, which turns ``u < p/q`` into a biased test and ``-log(-log u)`` into inf.
    """
    words = torch.tensor([0, -1, 2**63 - 1, -(2**63), 1, -2], dtype=torch.int64)
    u = rng._to_unit(words)
    assert bool((u > 0).all()) and bool((u < 1).all())
    assert bool(torch.isfinite(-torch.log(-torch.log(u))).all())


def test_uniform_is_deterministic():
    seeds = torch.tensor([0, 1, -5, 2**62], dtype=torch.int64)
    positions = torch.tensor([0, 7, 123456, 3], dtype=torch.int64)
    a = uniform(seeds, positions, STREAM_ACCEPT)
    b = uniform(seeds.clone(), positions.clone(), STREAM_ACCEPT)
    assert torch.equal(a, b)
    assert not torch.equal(a, uniform(seeds, positions + 1, STREAM_ACCEPT))


def test_uniform_broadcasts_like_elementwise_calls():
    seeds = torch.tensor([[3], [11], [-2]], dtype=torch.int64)  # [3, 1]
    positions = torch.arange(5, dtype=torch.int64)[None, :] + 100  # [1, 5]
    grid = uniform(seeds, positions, STREAM_EMIT)
    assert grid.shape == (3, 5)
    for i in range(3):
        for j in range(5):
            one = uniform(seeds[i, 0], positions[0, j], STREAM_EMIT)
            assert one.shape == () and float(one) == float(grid[i, j])
    # python ints and scalar tensors broadcast too
    assert float(uniform(torch.tensor(3), torch.tensor(100), STREAM_EMIT)) == float(grid[0, 0])


def test_streams_positions_and_seeds_give_different_draws():
    n = 2000
    seeds = torch.arange(n, dtype=torch.int64)
    zeros = torch.zeros(n, dtype=torch.int64)
    draws = [
        uniform(seeds, zeros, STREAM_DRAFT),
        uniform(seeds, zeros, STREAM_ACCEPT),
        uniform(seeds, zeros, STREAM_EMIT),
        uniform(seeds, zeros + 1, STREAM_ACCEPT),  # next position
        uniform(seeds + n, zeros, STREAM_ACCEPT),  # other seeds
        uniform(zeros + 10**6, seeds, STREAM_ACCEPT),  # one seed along positions
    ]
    allv = torch.cat(draws)
    assert torch.unique(allv).numel() == allv.numel()  # no collisions among 12000 draws
    # and no visible correlation between streams of the same (seed, position)
    for a in draws[:3]:
        for b in draws[:3]:
            if a is not b:
                r = np.corrcoef(a.numpy(), b.numpy())[0, 1]
                assert abs(r) < 0.1


@pytest.mark.parametrize(
    "how",
    ["seeds", "positions", "negative_seeds", "big_positions"],
)
def test_uniform_passes_ks(how):
    """KS test of 1e5 uniforms against U(0,1); alpha = 1e-4 per case (fixed seeds)."""
    i = torch.arange(N, dtype=torch.int64)
    if how == "seeds":  # consecutive seeds, one position
        u = uniform(i, torch.zeros_like(i), STREAM_ACCEPT)
    elif how == "positions":  # one request, consecutive positions (how verify uses it)
        u = uniform(torch.tensor(42), i, STREAM_EMIT)
    elif how == "negative_seeds":
        u = uniform(-i - 1, torch.full_like(i, 5), STREAM_DRAFT)
    else:
        u = uniform(torch.tensor(7), i + 2**40, STREAM_ACCEPT)
    assert stats.kstest(u.numpy(), "uniform").pvalue > ALPHA
    # and the low bits are not stuck: 2**20 * u mod 1 is uniform too
    assert stats.kstest(np.mod(u.numpy() * 2**20, 1.0), "uniform").pvalue > ALPHA


def test_uniform_pairs_of_positions_are_independent():
    """Chi-square on a 10 x 10 grid of (u at position t, u at position t+1); alpha = 1e-4."""
    u = uniform(torch.tensor(9), torch.arange(N + 1, dtype=torch.int64), STREAM_ACCEPT).numpy()
    cells = np.floor(u[:-1] * 10).astype(int) * 10 + np.floor(u[1:] * 10).astype(int)
    counts = np.bincount(cells, minlength=100)
    assert stats.chisquare(counts).pvalue > ALPHA


# ----------------------------------------------------------------------------------------------
# sample


def test_sample_never_returns_zero_probability_tokens():
    probs = torch.tensor([0.0, 0.3, 0.0, 0.0, 0.2, 0.5, 0.0], dtype=torch.float64)
    seeds = torch.arange(N, dtype=torch.int64)
    x = sample(probs.expand(N, -1), seeds, torch.zeros(N, dtype=torch.int64), STREAM_EMIT)
    assert x.dtype == torch.int64 and x.shape == (N,)
    assert set(torch.unique(x).tolist()) == {1, 4, 5}


@pytest.mark.parametrize("row", [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1e-300, 0.0], [0.0, 0.0, 5e-324]])
def test_sample_extreme_rows(row):
    """Point masses (also at the first/last id and tiny or subnormal mass) always give that token."""
    probs = torch.tensor(row, dtype=torch.float64)
    want = int(torch.nonzero(probs)[0])
    seeds = torch.arange(5000, dtype=torch.int64)
    x = sample(probs.expand(5000, -1), seeds, torch.zeros_like(seeds), STREAM_EMIT)
    assert bool((x == want).all())


def test_sample_tiny_trailing_mass_is_never_skipped_into_zero_tokens():
    """Trailing mass absorbed by rounding in the cdf must not make a zero-mass token win."""
    probs = torch.tensor([0.5, 0.5, 1e-30, 0.0, 0.0], dtype=torch.float64)
    seeds = torch.arange(20000, dtype=torch.int64)
    x = sample(probs.expand(20000, -1), seeds, torch.zeros_like(seeds), STREAM_EMIT)
    assert bool((probs[x] > 0).all())


@pytest.mark.parametrize(
    "row",
    [[0.5, float("nan"), 0.5], [float("nan")] * 3, [0.2, float("inf"), 0.1], [0.0, 0.0, 0.0], [0.0, -0.5, 0.2]],
)
def test_sample_refuses_rows_without_finite_positive_mass(row):
    """NaN p (e.g. from an overflowed logits / T) must never become a token: before this check a
    NaN row drew id V (out of the vocabulary) and an all-zero row drew the zero-mass id 0."""
    probs = torch.tensor([[0.25, 0.5, 0.25], row], dtype=torch.float64)
    seeds = torch.tensor([1, 2])
    with pytest.raises(ValueError, match="finite, positive total mass.*row \\(1,\\)"):
        sample(probs, seeds, torch.zeros_like(seeds), STREAM_EMIT)
    with pytest.raises(ValueError, match="finite, positive total mass"):
        sample(probs[1], torch.tensor(1), torch.tensor(0), STREAM_EMIT)  # a single row
    assert sample(probs[:1], seeds[:1], torch.zeros(1, dtype=torch.int64), STREAM_EMIT).item() in (0, 1, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [1.0, 3.7])  # 3.7: unnormalised rows are scaled by their sum
def test_sample_matches_probs_chi_square(dtype, scale):
    """Chi-square goodness of fit of 1e5 samples; alpha = 1e-4 per case (fixed seeds)."""
    probs = torch.tensor([0.05, 0.0, 0.25, 0.1, 0.3, 0.0, 0.2, 0.1], dtype=torch.float64)
    seeds = torch.full((N,), 1234, dtype=torch.int64)
    positions = torch.arange(N, dtype=torch.int64)  # one request walking along positions
    x = sample((probs * scale).to(dtype).expand(N, -1), seeds, positions, STREAM_EMIT)
    counts = torch.bincount(x, minlength=8).numpy()
    support = probs.numpy() > 0
    assert counts[~support].sum() == 0
    assert stats.chisquare(counts[support], probs.numpy()[support] * N).pvalue > ALPHA


def test_chi_square_has_power_against_a_wrong_law():
    """The same check rejects samples drawn from a slightly different distribution."""
    probs = torch.tensor([0.05, 0.25, 0.1, 0.3, 0.2, 0.1], dtype=torch.float64)
    wrong = torch.tensor([0.06, 0.24, 0.1, 0.3, 0.2, 0.1], dtype=torch.float64)
    seeds = torch.arange(N, dtype=torch.int64)
    x = sample(wrong.expand(N, -1), seeds, torch.zeros_like(seeds), STREAM_EMIT)
    counts = torch.bincount(x, minlength=6).numpy()
    assert stats.chisquare(counts, probs.numpy() * N).pvalue < ALPHA


def test_sample_broadcasts_and_is_batch_invariant():
    gen = torch.Generator().manual_seed(0)
    probs = torch.rand(4, 3, 9, generator=gen, dtype=torch.float64)  # [B, K, V]
    seeds = torch.tensor([[5], [6], [7], [8]], dtype=torch.int64)  # [B, 1]
    positions = torch.arange(3, dtype=torch.int64)[None] + 10  # [1, K]
    x = sample(probs, seeds, positions, STREAM_DRAFT)
    assert x.shape == (4, 3)
    for b in range(4):
        for k in range(3):
            one = sample(probs[b, k][None], seeds[b], positions[0, k], STREAM_DRAFT)
            assert int(one[0]) == int(x[b, k])
    # the draw depends on the stream
    y = sample(probs, seeds, positions, STREAM_EMIT)
    assert not torch.equal(x, y)


def test_sample_is_inverse_cdf_of_the_uniform():
    """The token is the first whose cumulative mass exceeds u * total."""
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    seeds = torch.arange(1000, dtype=torch.int64)
    pos = torch.full_like(seeds, 3)
    u = uniform(seeds, pos, STREAM_ACCEPT)
    x = sample(probs.expand(1000, -1), seeds, pos, STREAM_ACCEPT)
    want = torch.searchsorted(torch.cumsum(probs, 0), u.contiguous(), right=True)
    assert torch.equal(x, want)


# ----------------------------------------------------------------------------------------------
# Gumbel noise


def test_gumbel_noise_shape_dtype_finite_deterministic():
    seeds = torch.tensor([1, 2, 3], dtype=torch.int64)[:, None]
    positions = torch.arange(4, dtype=torch.int64)[None]
    g = gumbel_noise(seeds, positions, 10)
    assert g.shape == (3, 4, 10) and g.dtype == torch.float64
    assert bool(torch.isfinite(g).all())
    assert torch.equal(g, gumbel_noise(seeds, positions, 10))
    # the same (seed, position) gives the same vector whatever the batch
    assert torch.equal(g[1, 2], gumbel_noise(torch.tensor(2), torch.tensor(2), 10))
    # and a prefix of a longer vocabulary gives the same noise for the shared tokens
    assert torch.equal(g[..., :7], gumbel_noise(seeds, positions, 7))
    # distinct per token, position and seed
    assert torch.unique(g).numel() == g.numel()


def test_gumbel_noise_is_standard_gumbel():
    """KS test against scipy.stats.gumbel_r over 1e5 values (across tokens, positions, seeds)."""
    g = gumbel_noise(torch.arange(100, dtype=torch.int64)[:, None], torch.arange(100)[None], 10).flatten()
    assert g.numel() == N
    assert stats.kstest(g.numpy(), stats.gumbel_r.cdf).pvalue > ALPHA
    # one token across many positions, and many tokens at one position
    along = gumbel_noise(torch.tensor(3), torch.arange(N, dtype=torch.int64), 1)[:, 0]
    assert stats.kstest(along.numpy(), stats.gumbel_r.cdf).pvalue > ALPHA
    across = gumbel_noise(torch.tensor(3), torch.tensor(0), N)
    assert stats.kstest(across.numpy(), stats.gumbel_r.cdf).pvalue > ALPHA
    # power: a shifted Gumbel is rejected
    assert stats.kstest(along.numpy() + 0.05, stats.gumbel_r.cdf).pvalue < ALPHA


def test_gumbel_noise_differs_from_other_streams():
    """The Gumbel stream is not a transform of the accept/emit uniforms at the same key."""
    seeds = torch.arange(1000, dtype=torch.int64)
    zeros = torch.zeros_like(seeds)
    g = gumbel_noise(seeds, zeros, 1)[:, 0]
    for stream in (STREAM_DRAFT, STREAM_ACCEPT, STREAM_EMIT, STREAM_GUMBEL):
        u = uniform(seeds, zeros, stream)
        assert abs(np.corrcoef(g.numpy(), (-torch.log(-torch.log(u))).numpy())[0, 1]) < 0.2


def test_random_seeds_follow_torch_manual_seed():
    torch.manual_seed(123)
    a = rng.random_seeds(16)
    torch.manual_seed(123)
    b = rng.random_seeds(16)
    c = rng.random_seeds(16)
    assert a.dtype == torch.int64 and a.shape == (16,)
    assert torch.equal(a, b) and not torch.equal(b, c)
    assert torch.unique(a).numel() == 16


@pytest.mark.parametrize("V", [2047, 2048, 2049, 32000, 49152, 50001])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_two_level_inverse_cdf_equals_the_one_level_reference(V, dtype):
    """The chunked search returns the reference's token for every u, including u at the ends, rows
    whose mass sits in one chunk or in the partial last chunk, and never a zero-mass token."""
    from verispec.rng import inverse_cdf, inverse_cdf_reference

    gen = torch.Generator().manual_seed(V)
    p = torch.rand(40, V, generator=gen, dtype=dtype) ** 8
    p[:5, : V // 2] = 0
    p[5:10, V // 3 :] = 0
    p[10] = 0
    p[10, 7] = 1.0
    p[11] = 0
    p[11, -1] = 1.0
    u = torch.rand(40, generator=gen, dtype=torch.float64)
    u[0], u[1] = 1 - 2**-53, 2**-53
    got = inverse_cdf(p, u)
    assert torch.equal(got, inverse_cdf_reference(p, u))
    assert bool((p.gather(1, got[:, None]) > 0).all())


@pytest.mark.parametrize("V", [5, 256, 300, 32000])
@pytest.mark.parametrize("sharpness", [0.5, 3.0, 8.0])
def test_block_skipping_gumbel_argmax_equals_the_whole_vector(V, sharpness):
    """Skipping blocks that cannot win changes nothing: the same token as argmax(log p + G) over
    the whole noise vector, for flat and peaked rows, rows with zeros and one-hot rows."""
    from verispec.rng import gumbel_argmax, gumbel_argmax_reference

    gen = torch.Generator().manual_seed(V)
    p = torch.softmax(torch.randn(300, V, generator=gen, dtype=torch.float64) * sharpness, -1).float()
    p[:10, : V // 2] = 0
    p[10:12] = 0
    p[10:12, 3 % V] = 1
    p = p / p.sum(-1, keepdim=True)
    seeds = torch.randint(-(2**62), 2**62, (300,), generator=gen)
    pos = torch.randint(0, 1000, (300,), generator=gen)
    assert torch.equal(gumbel_argmax(p, seeds, pos), gumbel_argmax_reference(p, seeds, pos))


def test_gumbel_argmax_samples_p():
    """Chi-square of 40,000 Gumbel-max choices (one per seed) against p over 600 tokens (3 blocks)."""
    from verispec.rng import gumbel_argmax

    gen = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(600, generator=gen, dtype=torch.float64), -1)
    n = 40_000
    t = gumbel_argmax(p[None].expand(n, -1).contiguous(), torch.arange(n), torch.zeros(n, dtype=torch.int64))
    counts = torch.bincount(t, minlength=600).double().numpy()
    assert stats.chisquare(counts, (p * n).numpy()).pvalue > ALPHA
    # power: the same test rejects samples from a tempered p
    q = torch.softmax(torch.log(p) * 1.2, -1)
    t = gumbel_argmax(q[None].expand(n, -1).contiguous(), torch.arange(n), torch.zeros(n, dtype=torch.int64))
    assert stats.chisquare(torch.bincount(t, minlength=600).double().numpy(), (p * n).numpy()).pvalue < ALPHA
