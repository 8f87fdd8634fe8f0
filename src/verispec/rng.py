"""Counter-based randomness: every draw is a pure function of (seed, position, stream[, token]).

No generator state is carried between calls, so

* a request gives bit-identical output whatever else is in its batch (each row hashes only
  its own seed and positions);
* rows with zero drafts consume nothing, reruns are identical, and thread counts do not matter;
* a draw at a position after the first rejection never influenced anything emitted, so the
  next iteration may use that position's draws again (DESIGN.md section 3).

The mixer is SplitMix64's finaliser, written with int64 torch ops (multiplication wraps
modulo 2**64, which is what the mixer wants; right shifts are made logical with a mask).
Uniforms are float64 built from the top 52 bits and lie strictly inside (0, 1), so
``u < p/q`` never sees u == 0 and ``-log(-log u)`` is always finite.
"""

from __future__ import annotations

import torch

__all__ = [
    "STREAM_DRAFT",
    "STREAM_ACCEPT",
    "STREAM_EMIT",
    "STREAM_GUMBEL",
    "uniform",
    "sample",
    "inverse_cdf",
    "inverse_cdf_reference",
    "gumbel_noise",
    "random_seeds",
    "Draws",
    "COUNTER",
]

# Independent streams of draws per (seed, position).
STREAM_DRAFT = 1  # the drafter's sample at a draft slot
STREAM_ACCEPT = 2  # the accept test u < p/q
STREAM_EMIT = 3  # residual / bonus sample, and target-only sampling
STREAM_GUMBEL = 4  # per-token Gumbel noise for drafter-invariant decoding


def _signed(x: int) -> int:
    """A 64-bit unsigned constant as the int64 with the same bits."""
    return x - (1 << 64) if x >= (1 << 63) else x


_GAMMA = _signed(0x9E3779B97F4A7C15)
_M1 = _signed(0xBF58476D1CE4E5B9)
_M2 = _signed(0x94D049BB133111EB)


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's >> is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64: a bijective, well-avalanching map of 64-bit words."""
    z = x + _GAMMA
    z = (z ^ _shr(z, 30)) * _M1
    z = (z ^ _shr(z, 27)) * _M2
    return z ^ _shr(z, 31)


def _key(seeds: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
    seeds = torch.as_tensor(seeds, dtype=torch.int64)
    positions = torch.as_tensor(positions, dtype=torch.int64, device=seeds.device)
    salt = _signed((stream * 0x9E3779B97F4A7C15) & ((1 << 64) - 1))
    return _mix(_mix(_mix(seeds) ^ positions) ^ salt)


def _to_unit(h: torch.Tensor) -> torch.Tensor:
    """Top 52 bits -> float64 in the open interval (0, 1): the midpoints (k + 1/2) / 2**52.

    52, not 53: ``k + 0.5`` must be exact in float64; with 53 bits it rounds (to even) and
    k = 2**53 - 1 gave exactly 1.0.
    """
    return (_shr(h, 12).to(torch.float64) + 0.5) * (2.0**-52)


def uniform(seeds: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
    """Float64 uniforms in (0, 1), one per broadcast element of ``seeds`` and ``positions``.

    Args:
        seeds: int64 request seeds, e.g. ``[B, 1]``.
        positions: int64 absolute token positions, e.g. ``[B, K]``.
        stream: one of the ``STREAM_*`` constants.
    """
    return _to_unit(_key(seeds, positions, stream))


def gumbel_noise(seeds: torch.Tensor, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Standard Gumbel noise ``G(seed, position, token)`` of shape ``[*broadcast(seeds, positions), V]``.

    float64. The same (seed, position) always gives the same vector, whatever the batch.
    """
    key = _key(seeds, positions, STREAM_GUMBEL).unsqueeze(-1)  # [..., 1]
    tokens = torch.arange(vocab_size, dtype=torch.int64, device=key.device)
    u = _to_unit(_mix(key ^ tokens))  # [..., V]
    return -torch.log(-torch.log(u))


def sample(probs: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
    """Draw one token per row of ``probs [..., V]`` by inverse CDF with a counter-based uniform.

    ``probs`` need not be normalised (rows are scaled by their sum); zero-probability tokens
    are never returned. ``seeds`` and ``positions`` broadcast to ``probs.shape[:-1]``.
    Returns int64 token ids of shape ``probs.shape[:-1]``, in ``[0, V)``; rows without finite,
    positive mass raise ``ValueError`` (see :func:`inverse_cdf`).
    """
    return inverse_cdf(probs, uniform(seeds, positions, stream))


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The token whose CDF cell holds ``u``: ``probs [..., V]`` (unnormalised), ``u`` float64 in (0, 1)
    broadcastable to ``probs.shape[:-1]``. Token x is returned for u in
    ``[cdf(x-1), cdf(x)) / total``, so it is drawn with probability ``probs[x] / total``.
    Returns int64 ids of shape ``probs.shape[:-1]``, always in ``[0, V)``: a row whose total
    mass is not finite and positive (NaN, inf, all zeros) raises ``ValueError``, as no token
    can be drawn from it (the search would return the out-of-range id V, or a zero-mass token).

    The CDF is float64. For large V it is searched in two levels (chunk sums, then one chunk's
    cumulative sum), which reads each row once instead of building its whole cumulative sum;
    :func:`inverse_cdf_reference` is the plain one-level search it is tested against.
    """
    V = probs.shape[-1]
    if V < 8 * _CHUNK:
        return inverse_cdf_reference(probs, u)
    x = probs.reshape(-1, V)  # [n, V]
    x = x if x.dtype == torch.float64 else x.double()
    n, C = x.shape[0], -(-V // _CHUNK)
    full = V // _CHUNK * _CHUNK
    sums = x[:, :full].view(n, -1, _CHUNK).sum(-1)  # [n, V // L] float64 chunk masses
    if full < V:
        sums = torch.cat([sums, x[:, full:].sum(-1, keepdim=True)], 1)  # [n, C]
    ccdf = sums.cumsum_(-1)  # [n, C]
    total = ccdf[:, -1:].contiguous()
    _check_mass(total)
    target = u.to(torch.float64).expand(probs.shape[:-1]).reshape(n, 1) * total  # [n, 1]
    # The chunk whose cell holds the target; u * total can round up to total: never step past the
    # first chunk where the cdf reaches its total (it has mass).
    c = torch.minimum(torch.searchsorted(ccdf, target, right=True), torch.searchsorted(ccdf, total))  # [n, 1]
    base = torch.where(c > 0, ccdf.gather(1, (c - 1).clamp_min(0)), 0.0)  # [n, 1] mass before the chunk
    idx = c * _CHUNK + torch.arange(_CHUNK, device=x.device)  # [n, L]
    seg = x.gather(1, idx.clamp_max(V - 1)).masked_fill_(idx >= V, 0.0)  # [n, L]
    cdf = seg.cumsum_(-1).add_(base)  # [n, L]
    t = torch.minimum(torch.searchsorted(cdf, target, right=True), torch.searchsorted(cdf, cdf[:, -1:].contiguous()))
    return (c * _CHUNK + t).view(probs.shape[:-1])


_CHUNK = 256  # tokens per chunk of the two-level search


def inverse_cdf_reference(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """:func:`inverse_cdf` by one float64 cumulative sum over the whole row and one search."""
    cdf = probs.to(torch.float64, copy=True, memory_format=torch.contiguous_format).cumsum_(-1)  # [..., V]
    total = cdf[..., -1:].contiguous()
    _check_mass(total)
    u = u.to(torch.float64).expand(probs.shape[:-1]).unsqueeze(-1)
    token = torch.searchsorted(cdf, u * total, right=True)
    # u * total can round up to total; never step past the first token where the cdf reaches
    # its total (that token has mass: the cdf rises there).
    last = torch.searchsorted(cdf, total, right=False)
    return torch.minimum(token, last).squeeze(-1)


def _check_mass(total: torch.Tensor) -> None:
    # NaN or inf anywhere in a row reaches its total through the sums: one check per row.
    bad = ~(torch.isfinite(total) & (total > 0))
    if bool(bad.any()):
        rows = bad.squeeze(-1).nonzero().tolist()
        raise ValueError(f"probs rows need a finite, positive total mass to sample from; {len(rows)} row(s) "
                         f"do not, e.g. row {tuple(rows[0])} with total {float(total[bad][0]):g}")


def random_seeds(n: int) -> torch.Tensor:
    """``n`` fresh int64 seeds from torch's global generator (``torch.manual_seed`` fixes them)."""
    return torch.randint(-(2**63), 2**63 - 1, (n,), dtype=torch.int64)


class Draws:
    """Where a verifier takes its randomness from: the one seam between the rule and its draws.

    The default, :data:`COUNTER`, is the counter-based generator of this module. Certification
    (:mod:`verispec.certify`) passes its own subclass that returns chosen points inside each cell of
    the draws' outcome partition, so that the real verifier can be enumerated exactly.
    """

    def uniform(self, seeds: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
        """Float64 uniforms in (0, 1), one per broadcast element of ``seeds`` and ``positions``."""
        return uniform(seeds, positions, stream)

    def gumbel(self, seeds: torch.Tensor, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """Float64 Gumbel noise ``[*broadcast(seeds, positions), V]``."""
        return gumbel_noise(seeds, positions, vocab_size)


#: The counter-based draws every caller gets unless it passes others.
COUNTER = Draws()
