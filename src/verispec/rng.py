"""Counter-based randomness: every draw is a pure function of (seed, position, stream[, token]).

No generator state is carried between calls, so

* a request gives bit-identical output whatever else is in its batch (each row hashes only
  its own seed and positions);
* rows with zero drafts consume nothing, reruns are identical, and thread counts do not matter;
* a draw at a position after the first rejection never influenced anything emitted, so the
  next iteration may use that position's draws again (docs/design.md section 3).

The mixer is SplitMix64's finaliser, written with int64 torch ops (multiplication wraps
modulo 2**64, which is what the mixer wants; right shifts are made logical with a mask).
Uniforms are float64 built from the top 52 bits and lie strictly inside (0, 1), so
``u < p/q`` never sees u == 0 and ``-log(-log u)`` is always finite.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "STREAM_DRAFT",
    "STREAM_ACCEPT",
    "STREAM_EMIT",
    "STREAM_GUMBEL",
    "STREAM_SIBLING",
    "STREAM_BLOCK",
    "STREAM_DRAFT_SIBLING",
    "draft_stream",
    "accept_stream",
    "uniform",
    "sample",
    "inverse_cdf",
    "inverse_cdf_reference",
    "gumbel_noise",
    "gumbel_uniforms",
    "gumbel_argmax",
    "gumbel_argmax_reference",
    "GumbelUniforms",
    "GUMBEL_BLOCK",
    "random_seeds",
    "Draws",
    "COUNTER",
]

# Independent streams of draws per (seed, position).
STREAM_DRAFT = 1  # the drafter's sample at a draft slot
STREAM_ACCEPT = 2  # the accept test u < p/q
STREAM_EMIT = 3  # residual / bonus sample, and target-only sampling
STREAM_GUMBEL = 4  # per-token Gumbel noise for drafter-invariant decoding
STREAM_SIBLING = 1 << 8  # + r: the accept test of a tree node's r-th child (r >= 1; r = 0 is STREAM_ACCEPT)
STREAM_BLOCK = 1 << 16  # + i: block verification's eta_i, keyed by the pass's first position (verify.block)
STREAM_BLOCK_DRAFT = 5  # the drafter's sample at a draft slot of a block-verified row (block_draft_counter)

#: Draft slots per pass that :func:`block_draft_counter` keys apart (slot offsets 0 .. 2**16 - 1).
BLOCK_DRAFT_SLOTS = 1 << 16


def block_draft_counter(starts: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The counter that keys the drafter's draw for a block-verified row (with ``STREAM_BLOCK_DRAFT``):
    ``start * 2**16 + (position - start)`` for a draft token at absolute ``position`` of the pass
    whose first draft slot sits at ``start`` (broadcast int64 tensors).

    Block verification's outcome depends on every draft of the pass, past the kept prefix too, so
    the next pass must never meet those draws again (docs/design.md section 9). The map
    (start, offset) -> counter is one-to-one for offsets in [0, 2**16) and starts below 2**47, and a
    row's pass starts strictly increase, so every pass of a row draws fresh uniforms. Raises
    ``ValueError`` for an offset outside that range.
    """
    offset = positions - starts
    if bool(((offset < 0) | (offset >= BLOCK_DRAFT_SLOTS)).any()):
        raise ValueError(f"positions must lie in [start, start + {BLOCK_DRAFT_SLOTS}) of their pass's start")
    return starts * BLOCK_DRAFT_SLOTS + offset
STREAM_DRAFT_SIBLING = 1 << 12  # + r: a tree drafter's draw of a node's r-th child (r >= 1; r = 0 is STREAM_DRAFT)


def accept_stream(rank: int) -> int:
    """The stream of the accept test of a node's child of sibling rank ``rank`` (0: the first child,
    which is also a chain's draft): STREAM_ACCEPT for rank 0, so a chain written as a tree draws
    what the chain verifier draws."""
    return STREAM_ACCEPT if rank == 0 else STREAM_SIBLING + rank


def draft_stream(rank: int) -> int:
    """The stream of a tree drafter's draw of a node's child of sibling rank ``rank``: STREAM_DRAFT
    for rank 0, so a tree's first children are drawn as a chain's drafts are."""
    return STREAM_DRAFT if rank == 0 else STREAM_DRAFT_SIBLING + rank


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


def _mix_unit_(z: torch.Tensor) -> torch.Tensor:
    """``_to_unit(_mix(z))`` computed in place in ``z`` (and one temporary), for large tensors:
    the same bits, without a fresh allocation per operation."""
    t = torch.empty_like(z)
    z.add_(_GAMMA)
    for shift, mult in ((30, _M1), (27, _M2), (31, None)):
        torch.bitwise_right_shift(z, shift, out=t).bitwise_and_((1 << (64 - shift)) - 1)
        z.bitwise_xor_(t)
        if mult is not None:
            z.mul_(mult)
    torch.bitwise_right_shift(z, 12, out=t).bitwise_and_((1 << 52) - 1)
    return t.to(torch.float64).add_(0.5).mul_(2.0**-52)


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
    """Standard Gumbel noise ``G(seed, position, token) = -log(-log u)`` of shape
    ``[*broadcast(seeds, positions), V]``, float64, from the uniforms of :func:`gumbel_uniforms`.
    The same (seed, position) always gives the same vector, whatever the batch.
    """
    return -torch.log(-torch.log(gumbel_uniforms(seeds, positions, vocab_size)))


def gumbel_uniforms(seeds: torch.Tensor, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The i.i.d. uniforms ``u(seed, position, token)`` behind the Gumbel noise, ``[..., V]`` float64.

    They are drawn block by block (blocks of :data:`GUMBEL_BLOCK` token ids), largest first, so that a
    Gumbel-max choice can skip whole blocks without drawing them (:func:`gumbel_argmax`): for a block of
    L ids, the block's maximum is ``M = w^(1/L)`` (the law of the largest of L uniforms), it sits at a
    uniformly drawn index, and every other id gets ``M * w_x``; the L values are then exactly i.i.d.
    uniform on (0, 1). ``w``, the index and every ``w_x`` are counter-based draws of (seed, position).
    The last block is a full block too (its ids past V are never used), so a token's uniform does not
    depend on V.
    """
    key = _key(seeds, positions, STREAM_GUMBEL).unsqueeze(-1)  # [..., 1]
    C = -(-vocab_size // GUMBEL_BLOCK)
    tokens = torch.arange(C * GUMBEL_BLOCK, dtype=torch.int64, device=key.device)  # [C * L], past V too
    top, at = _block_max(key, torch.arange(C, device=key.device))  # [..., C]
    u = _mix_unit_(key ^ tokens).unflatten(-1, (C, GUMBEL_BLOCK)).mul_(top[..., None])  # [..., C, L]
    u.scatter_(-1, at[..., None], top[..., None])  # each block's maximum at its index
    return u.flatten(-2)[..., :vocab_size]


GUMBEL_BLOCK = 32  # token ids per block of the Gumbel uniforms
_SALT_MAX = _signed(0xD1B54A32D192ED03)  # keys the blocks' maxima apart from the tokens' draws
_SALT_AT = _signed(0x8CB92BA72F3D8DD7)  # keys the index of each block's maximum


def _block_max(key: torch.Tensor, block: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(M, index)`` of blocks ``block`` (broadcast with ``key``): M = w^(1/L) and index in [0, L).

    Every block has L = GUMBEL_BLOCK ids, the last one too (ids past V are never chosen: p = 0), so a
    token's uniform does not depend on V."""
    top = _to_unit(_mix(key ^ _SALT_MAX ^ block)).pow_(1.0 / GUMBEL_BLOCK)
    at = (_to_unit(_mix(key ^ _SALT_AT ^ block)) * GUMBEL_BLOCK).to(torch.int64)
    return top, at


def gumbel_argmax_reference(probs: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``[n]`` argmax(log p + G) over the whole noise vector: the plain version of :func:`gumbel_argmax`."""
    return (torch.log(probs.double()) + gumbel_noise(seeds, positions, probs.shape[-1])).argmax(-1)


class GumbelUniforms:
    """The uniforms behind the Gumbel noise, as :func:`gumbel_argmax` reads them: block maxima first,
    then whole blocks, or whole rows. This class draws them from the counter-based generator
    (:func:`gumbel_uniforms`); certification (:mod:`verispec.certify`) passes one that reads chosen
    values instead, so that the shipped search runs on noise picked inside each outcome's cell.
    """

    def __init__(self, seeds: torch.Tensor, positions: torch.Tensor) -> None:
        self.seeds, self.positions = seeds, positions
        self.key = _key(seeds, positions, STREAM_GUMBEL)  # [n]

    def block_max(self, blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(M [n, C], index [n, C])``: each row's maximum uniform in each of ``blocks [C]`` and its
        index in the block."""
        return _block_max(self.key[:, None], blocks)

    def block(self, rows: torch.Tensor, blocks: torch.Tensor, top: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        """``[m, L]`` the uniforms of block ``blocks[i]`` of row ``rows[i]``, given that block's maximum
        ``top [m, 1]`` and its index ``at [m, 1]``."""
        idx = blocks[:, None] * GUMBEL_BLOCK + torch.arange(GUMBEL_BLOCK, device=blocks.device)  # [m, L]
        return torch.where(idx % GUMBEL_BLOCK == at, top, _to_unit(_mix(self.key[rows][:, None] ^ idx)) * top)

    def rows(self, rows: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """``[r, V]`` every uniform of rows ``rows``."""
        return gumbel_uniforms(self.seeds[rows], self.positions[rows], vocab_size)


def _argmax_whole(probs: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """argmax(log(u) / p) over whole rows, with the counter-based uniforms."""
    return _argmax_rows(probs, GumbelUniforms(seeds, positions), torch.arange(probs.shape[0], device=probs.device))


def _argmax_rows(probs: torch.Tensor, noise: GumbelUniforms, rows: torch.Tensor) -> torch.Tensor:
    """argmax(log(u) / p) over whole rows ``rows`` of ``probs``, a few rows at a time so that the
    temporaries stay in cache."""
    V = probs.shape[-1]
    out = torch.empty(rows.numel(), dtype=torch.int64, device=probs.device)
    step = max(1, (1 << 18) // V)
    for i in range(0, rows.numel(), step):
        r = rows[i : i + step]
        u = noise.rows(r, V)  # [b, V]
        out[i : i + step] = u.log_().div_(probs[r].double()).argmax(-1)
    return out


def gumbel_argmax(probs: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor,
                  noise: GumbelUniforms | None = None) -> torch.Tensor:
    """``[n]`` the Gumbel-max choice argmax(log p + G(seed, position)) for rows ``probs [n, V]``,
    drawing the noise only for the blocks of tokens that can win.

    With u the uniforms of :func:`gumbel_uniforms`, argmax(log p + G) = argmax(log(u) / p). Every token
    of a block scores at most ``log(M) / max p`` over the block, so after the exact best score S of the
    block with the best such bound, only blocks whose bound reaches S are drawn: on SmolLM2's own
    next-token distributions a few blocks of 32 out of 1,536 (BENCHMARKS.md). Rows where more than a
    quarter of the blocks remain (flat p) draw the whole vector. Equal to
    :func:`gumbel_argmax_reference` (tests compare them). ``noise``: where the uniforms come from
    (default: the counter-based ones of ``seeds`` and ``positions``).
    """
    n, V = probs.shape
    noise = GumbelUniforms(seeds, positions) if noise is None else noise
    C = -(-V // GUMBEL_BLOCK)
    full = V // GUMBEL_BLOCK * GUMBEL_BLOCK
    pmax = probs[:, :full].reshape(n, -1, GUMBEL_BLOCK).amax(-1)  # [n, V // L]
    if full < V:
        pmax = torch.cat([pmax, probs[:, full:].amax(-1, keepdim=True)], 1)  # [n, C]
    blocks = torch.arange(C, device=probs.device)
    top, at = noise.block_max(blocks)  # [n, C]
    bound = torch.log(top) / pmax.double()  # [n, C]; -inf for blocks without mass
    first = bound.argmax(-1)  # [n]
    rows = torch.arange(n, device=probs.device)
    best, token = _block_best(probs, noise, top, at, rows, first)  # [n], [n]
    more = bound >= best[:, None]
    more[rows, first] = False
    # Rows where many blocks may still win (flat p) draw the whole vector: cheaper than gathering.
    flat = more.sum(-1) > C // 4
    if bool(flat.any()):
        f = flat.nonzero().squeeze(1)
        token[f] = _argmax_rows(probs, noise, f)
        more[f] = False
    if bool(more.any()):
        r, b = more.nonzero(as_tuple=True)
        score, tok = _block_best(probs, noise, top, at, r, b)
        # per row, the best among its extra blocks (ties: the lowest token id, as argmax)
        top_score = torch.full((n,), -math.inf, dtype=torch.float64, device=probs.device)
        top_score.scatter_reduce_(0, r, score, "amax")
        win = score == top_score[r]
        top_tok = torch.full((n,), V, dtype=torch.int64, device=probs.device)
        top_tok.scatter_reduce_(0, r[win], tok[win], "amin")
        take = (top_score > best) | ((top_score == best) & (top_tok < token))
        token = torch.where(take, top_tok, token)
    return token


def _block_best(probs: torch.Tensor, noise: GumbelUniforms, top: torch.Tensor, at: torch.Tensor, rows: torch.Tensor,
                blocks: torch.Tensor):
    """Exact best score log(u)/p and its token within block ``blocks[i]`` of row ``rows[i]``, given the
    blocks' maxima ``top`` and their indices ``at`` (``[n, C]``)."""
    V = probs.shape[-1]
    idx = blocks[:, None] * GUMBEL_BLOCK + torch.arange(GUMBEL_BLOCK, device=probs.device)  # [m, L]
    valid = idx < V
    idx = idx.clamp(max=V - 1)
    p = probs[rows[:, None], idx].double()  # [m, L]
    u = noise.block(rows, blocks, top[rows, blocks][:, None], at[rows, blocks][:, None])  # [m, L]
    score = (torch.log(u) / p).masked_fill_(~valid | (p <= 0), -math.inf)
    best = score.argmax(-1)  # the first maximum: the lowest id on ties
    return score.gather(1, best[:, None]).squeeze(1), idx.gather(1, best[:, None]).squeeze(1)


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
    n = x.shape[0]
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

    def gumbel_argmax(self, probs: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``[n]`` argmax(log p + G) for rows ``probs [n, V]``, ``seeds [n]``, ``positions [n]``."""
        return gumbel_argmax(probs, seeds, positions)


#: The counter-based draws every caller gets unless it passes others.
COUNTER = Draws()
