"""Chain verification of a speculative draft (docs/design.md section 2), vectorised over batch and slots.

For a row with drafts d_1..d_n (n <= K), target distributions p_1..p_{K+1} and draft
distributions q_1..q_K:

* ``method="exact"`` (Leviathan et al. 2023, Chen et al. 2023): accept d_i with probability
  min(1, p_i(d_i) / q_i(d_i)); at the first rejection emit x ~ residual r_i = max(0, p_i - q_i)
  (normalised; p_i itself when the residual has no mass) and stop; if all n pass, emit a bonus
  token x ~ p_{n+1}. Each emitted token has exactly the target's distribution.
  ``draft_probs=None`` means point-mass drafts (prompt lookup, greedy drafters): q_i = one-hot(d_i),
  so d_i is accepted with probability p_i(d_i) and the residual is p_i with d_i removed.
  Rows are read as the distributions p / sum(p) and q / sum(q), in the accept test and the residual
  alike, as every inverse-CDF draw reads them (rows of float32/16 sum to 1 only within rounding,
  up to :data:`SUM_TOLERANCE`): the emitted law is exactly p / sum(p) at every slot.
* ``method="gumbel"`` (Daliri, Musco, Suresh 2024): with shared noise G(seed, position, token) the
  target's token is t_i = argmax(log p_i + G); accept while d_i == t_i, then emit t at the first
  mismatch (or the bonus slot). The output is exactly target-only Gumbel sampling with that seed,
  whatever the drafter.
* Greedy rows (p one-hot at every slot: temperature 0) take a fast path with no random draws:
  accept while p_i(d_i) = 1, i.e. while the draft equals the target's argmax, then emit the
  argmax. It emits exactly what the exact rule would (p(d) = 1 > u q(d) accepts, p(d) = 0
  rejects, and the residual of a one-hot p is that one-hot). Pass ``greedy=`` when the caller
  knows (the engine does); otherwise rows are classified with one extra read of p.
  "gumbel" takes the argmax directly for one-hot slots (log p + G has a single finite entry).

Cost: the exact and greedy rules read only gathered entries of p and q plus one [B, V] slot per
row (the residual/bonus slot); validation reads the rows the rules read, i.e. each row's slots up
to its emitting one (docs/design.md section 6). "gumbel" draws noise only for the blocks of tokens
that can win, slot by slot for the rows still accepting only.

The plain per-row float64 reference that the tests compare this against is
:func:`verispec.certify.reference_verify`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..rng import COUNTER, STREAM_ACCEPT, STREAM_EMIT, Draws, inverse_cdf, random_seeds
from ..sampling import METHODS, gumbel_rows, split_rows
from . import block as block_module

__all__ = ["Verification", "verify", "verify_argmax", "merge_rows", "gumbel_argmax", "METHODS",
           "VERIFY_METHODS", "SUM_TOLERANCE"]

#: The methods :func:`verify` takes: the sampling methods, and "block" (block verification of an
#: exact row's chain: :mod:`verispec.verify.block`).
VERIFY_METHODS = METHODS + ("block",)

#: Rows of ``target_probs``/``draft_probs`` must sum to 1 within this absolute tolerance (they are then
#: read as ``p / sum(p)``: see :func:`verify`).
SUM_TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-3}
_LOW_PRECISION_SUM_TOLERANCE = 1e-2  # float16 / bfloat16


@dataclass(frozen=True)
class Verification:
    """The outcome of verifying one batch of drafts.

    Attributes:
        tokens: ``[B, K+1]`` int64 emitted tokens: the accepted drafts, then the
            residual/bonus token; ``-1`` after the last emitted token.
        num_accepted: ``[B]`` int64 number of accepted draft tokens.
        num_emitted: ``[B]`` int64 ``num_accepted + 1``.
        accepted: ``[B, K]`` bool, slot i was drafted and accepted (a prefix of each row).
        num_draft: ``[B]`` int64 number of drafted slots per row (the ragged lengths).
        path: ``[B, K]`` int64 the draft nodes accepted, in order from the root (``-1`` after
            the last); ``None`` for a chain, where it is ``0..num_accepted-1``
            (:meth:`accepted_nodes`).
    """

    tokens: torch.Tensor
    num_accepted: torch.Tensor
    num_emitted: torch.Tensor
    accepted: torch.Tensor
    num_draft: torch.Tensor
    path: torch.Tensor | None = None

    def accepted_nodes(self) -> torch.Tensor:
        """``[B, K]`` int64 node index of the i-th accepted draft of each row, ``-1`` after."""
        if self.path is not None:
            return self.path
        K = self.accepted.shape[1]
        return torch.where(self.accepted, torch.arange(K, device=self.accepted.device), -1)


def verify(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    *,
    num_draft: torch.Tensor | None = None,
    seeds: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    method: str | Sequence[str] = "exact",
    greedy: bool | torch.Tensor | None = None,
    validate: bool = True,
    draws: Draws = COUNTER,
) -> Verification:
    """Verify a batch of drafts against the target and return what to emit.

    Args:
        target_probs: ``[B, K+1, V]`` target distribution p at each draft slot and the bonus slot.
        draft_probs: ``[B, K, V]`` the distribution q each draft token was sampled from, or
            ``None`` for point-mass drafts (q = one-hot of the draft token). Ignored by "gumbel".
        draft_tokens: ``[B, K]`` integer draft token ids (slots past ``num_draft`` are ignored).
        num_draft: ``[B]`` ragged draft lengths in ``[0, K]``; default K for every row.
        seeds: ``[B]`` int64 request seeds; default: fresh seeds from torch's global generator.
        positions: ``[B]`` int64 absolute position of draft slot 0 (keys the random draws);
            default 0.
        method: ``"exact"``, ``"gumbel"`` or ``"block"`` (block verification of an exact row:
            :mod:`verispec.verify.block`), or one of them per row (rows of every kind share the
            call; each row's output is what its method alone would give). Block rows read p and q
            at every drafted slot (the rule needs them all).
        greedy: which rows have one-hot p (temperature 0) and take the greedy fast path: a bool
            for the whole batch or a ``[B]`` bool tensor. ``None`` detects them (one read of p).
            Validated (each such row must be one-hot at its used slots) when ``validate``.
        validate: check every value the rules read: shapes, ids, p and q at the drafted tokens,
            and every row of p up to each row's emitting slot (of q, before it) for NaN, inf,
            negative entries and a sum of 1; rows past the emitting slot cannot change the output
            and are not read. Rows within the tolerance (:data:`SUM_TOLERANCE`; 1e-2 for
            float16/bfloat16) are accepted and read as ``p / sum(p)``: the accept test and the
            residual both use the normalised values (the accept test takes the two row sums
            only at slots where u q(d) and p(d) are within a factor 1 + 3 * tolerance, where
            normalising can change the outcome). Turn off only for inputs that come straight
            from :func:`verispec.logits_to_probs` (whose rows are within the tolerance).
        draws: where the random draws come from; the default is the counter-based generator
            keyed by (seed, position, stream). Certification passes its own (see
            :mod:`verispec.certify`).

    Returns:
        A :class:`Verification`.
    """
    B, K = _check_shapes(target_probs, draft_probs, draft_tokens)
    device = target_probs.device
    block = _block_rows(method, B, device)  # [B] rows verified by block verification
    gumbel = gumbel_rows(_sampling_methods(method), B, device)  # [B] rows verified by the Gumbel rule
    num_draft = _as_index_vector(num_draft, "num_draft", B, device, default=K)
    seeds = random_seeds(B).to(device) if seeds is None else _as_index_vector(seeds, "seeds", B, device)
    positions = _as_index_vector(positions, "positions", B, device, default=0)
    draft_tokens = draft_tokens.to(torch.int64)

    slots = torch.arange(K, device=device)
    drafted = slots < num_draft[:, None]  # [B, K]
    if validate:
        _check_values(target_probs, draft_probs, draft_tokens, num_draft, positions, drafted, gumbel)
    # Undrafted slots may hold placeholders such as -1: point them at token 0 for the gathers.
    d = torch.where(drafted, draft_tokens, 0)  # [B, K]

    # "gumbel" takes one-hot slots' argmax inside, so only exact rows use the greedy fast path
    greedy = torch.zeros_like(gumbel) if bool(gumbel.all()) else _greedy_rows(target_probs, greedy) & ~gumbel
    q_drafted = torch.where(gumbel, 0, num_draft)  # q is read for exact rows only
    try:
        out = _verify_by_method(target_probs, draft_probs, d, drafted, num_draft, seeds, positions, draws, greedy,
                                gumbel, block)
    except ValueError:  # a rule met a row it cannot use: name the argument if the input is at fault
        if validate:
            _check_rows_read(target_probs, draft_probs, num_draft, q_drafted, greedy)
        raise
    if validate:  # every row the rules read: each slot up to the emitting one (block rows: all drafted)
        _check_rows_read(target_probs, draft_probs, torch.where(block & ~greedy, num_draft, out.num_accepted),
                         q_drafted, greedy)
    return out


def _block_rows(method: object, B: int, device: torch.device) -> torch.Tensor:
    """``[B]`` bool: the rows ``method`` names "block" (one name for every row, or one per row)."""
    if isinstance(method, str):
        return torch.full((B,), method == "block", dtype=torch.bool, device=device)
    if isinstance(method, Sequence) and not isinstance(method, torch.Tensor):
        return torch.tensor([m == "block" for m in method], dtype=torch.bool, device=device).reshape(-1)[:B]
    return torch.zeros(B, dtype=torch.bool, device=device)


def _sampling_methods(method: object) -> object:
    """``method`` with "block" read as "exact" (a block row draws its tokens by the exact rule's
    residuals), for :func:`verispec.sampling.gumbel_rows`, which checks every name."""
    if isinstance(method, str):
        return "exact" if method == "block" else method
    if isinstance(method, Sequence) and not isinstance(method, torch.Tensor):
        return ["exact" if m == "block" else m for m in method]
    return method


def _verify_by_method(p, q, d, drafted, num_draft, seeds, positions, draws, greedy, gumbel, block) -> Verification:
    """Gumbel rows by the Gumbel rule, the others by :func:`_verify`; merged row by row."""
    return split_rows(gumbel, lambda r: _verify_gumbel(*_rows(r, p, d, drafted, num_draft, seeds, positions), draws),
                      lambda r: _verify(*_rows(r, p, q, d, drafted, num_draft, seeds, positions), draws,
                                        *_rows(r, greedy, block)), _merge(num_draft))


def _verify(p, q, d, drafted, num_draft, seeds, positions, draws, greedy, block) -> Verification:
    """Greedy rows on the fast path, the others by the exact or the block rule; merged row by row."""
    return split_rows(greedy, lambda r: _verify_greedy(*_rows(r, p, d, drafted, num_draft)),
                      lambda r: _verify_sampled(*_rows(r, p, q, d, drafted, num_draft, seeds, positions), draws,
                                                *_rows(r, block)), _merge(num_draft))


def _verify_sampled(p, q, d, drafted, num_draft, seeds, positions, draws, block) -> Verification:
    """Block rows by block verification, the others by the exact (token by token) rule."""
    return split_rows(~block, lambda r: _verify_exact(*_rows(r, p, q, d, drafted, num_draft, seeds, positions),
                                                      draws),
                      lambda r: _verify_block(*_rows(r, p, q, d, num_draft, seeds, positions), draws), _merge(num_draft))


def _rows(r: torch.Tensor | None, *x: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The rows ``r`` of each of ``x`` (all of them where ``r`` is None; None stays None: point-mass q)."""
    return x if r is None else tuple(None if t is None else t[r] for t in x)


def _merge(num_draft: torch.Tensor):
    """:func:`merge_rows` for :func:`~verispec.sampling.split_rows`, with the whole batch's ``num_draft``."""
    return lambda B, *parts: merge_rows(B, *parts, num_draft=num_draft)


def _verify_block(p, q, d, num_draft, seeds, positions, draws) -> Verification:
    """Block verification (:mod:`verispec.verify.block`): keep tau drafts, then one more token."""
    tau, x = block_module.block_rule(p, q, d, num_draft, seeds, positions, draws)
    return _assemble(d, tau, x, num_draft)


def _greedy_rows(p: torch.Tensor, greedy: bool | torch.Tensor | None) -> torch.Tensor:
    """``[B]`` bool: the rows that take the greedy fast path (detected: one-hot at every slot)."""
    B = p.shape[0]
    if greedy is None:
        return _is_one_hot(p).all(-1)  # [B]; a row with other values past its drafts takes the exact rule
    if isinstance(greedy, bool):
        return torch.full((B,), greedy, dtype=torch.bool, device=p.device)
    if isinstance(greedy, torch.Tensor) and greedy.dtype == torch.bool and tuple(greedy.shape) == (B,):
        return greedy.to(p.device)
    raise TypeError(f"greedy must be None, a bool or a [B] = [{B}] bool tensor")


def _is_one_hot(x: torch.Tensor) -> torch.Tensor:
    """``x.shape[:-1]`` bool: the row ``x[..., :]`` is exactly one 1 and zeros elsewhere.

    ``amax == 1`` alone is not enough: a float32 softmax row can round its top entry to 1.0
    and still hold ~3e-8 of mass elsewhere, which the greedy fast path would drop. The count of
    positive entries is the sum of ``ceil(x)`` (entries lie in [0, 1]), taken a block of rows at a
    time so that the temporary stays in cache.
    """
    flat = x.reshape(-1, x.shape[-1])
    out = torch.empty(flat.shape[0], dtype=torch.bool, device=x.device)
    for r in _row_blocks(flat.shape[0], x.shape[-1], 1 << 18):
        rows = flat[r]
        out[r] = (rows.amax(-1) == 1) & (rows.ceil().sum(-1) == 1)
    return out.view(x.shape[:-1])


def gumbel_argmax(logprobs: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor,
                  draws: Draws = COUNTER) -> torch.Tensor:
    """Gumbel-max choice ``argmax(logprobs + G)`` with the shared counter-based noise.

    Args:
        logprobs: ``[B, K, V]`` log-probabilities (``-inf`` for excluded tokens).
        seeds: ``[B]`` int64 request seeds.
        positions: ``[B]`` absolute position of slot 0; slot i uses the noise of ``positions + i``.
        draws: the noise source (default: counter-based, see :func:`verispec.rng.gumbel_argmax`).

    Returns:
        ``[B, K]`` int64 tokens: an exact sample from ``softmax(logprobs)`` per slot, and the
        same token for the same (seed, position, distribution) wherever it is computed.
    """
    if logprobs.dim() != 3:
        raise ValueError(f"logprobs must be [B, K, V], got shape {tuple(logprobs.shape)}")
    B, K, V = logprobs.shape
    seeds = _as_index_vector(seeds, "seeds", B, logprobs.device)
    positions = _as_index_vector(positions, "positions", B, logprobs.device)
    flat_seeds = seeds[:, None].expand(B, K).reshape(-1)
    flat_pos = _slot_positions(positions, K).reshape(-1)
    return draws.gumbel_argmax(logprobs.reshape(B * K, V).exp(), flat_seeds, flat_pos).view(B, K)


# ----------------------------------------------------------------------------------------------
# The rules. Each step of section 2 of docs/design.md is one small function, so that the
# certifier's mutants (verispec.certify.mutants) can replace exactly one step with a wrong one.


def _verify_exact(
    p: torch.Tensor,  # [B, K+1, V]
    q: torch.Tensor | None,  # [B, K, V] or None (point masses)
    d: torch.Tensor,  # [B, K]
    drafted: torch.Tensor,  # [B, K]
    num_draft: torch.Tensor,  # [B]
    seeds: torch.Tensor,  # [B]
    positions: torch.Tensor,  # [B]
    draws: Draws,
) -> Verification:
    B, K1, V = p.shape
    K = K1 - 1
    rows = torch.arange(B, device=p.device)

    # Accept d_i with probability min(1, p'_i(d_i) / q'_i(d_i)), i.e. u * q' < p' with u in (0, 1),
    # where p' = p / sum(p) and q' = q / sum(q): the rows as the inverse-CDF draws read them.
    p_d = p[:, :K].gather(-1, d[..., None]).squeeze(-1).double()  # [B, K]
    q_d = torch.ones_like(p_d) if q is None else q.gather(-1, d[..., None]).squeeze(-1).double()
    u = draws.uniform(seeds[:, None], _slot_positions(positions, K), STREAM_ACCEPT)  # [B, K] float64
    p_d, q_d = _normalised_at(p, q, p_d, q_d, u, drafted)  # [B, K] each: p'(d), q'(d) where it matters
    passes = drafted & _accepts(u, p_d, q_d)
    num_accepted = passes.to(torch.int64).cumprod(-1).sum(-1)  # [B] first rejection (or n)

    # The emitted token sits at slot j = num_accepted: residual on rejection, bonus if all passed.
    # Only this one [B, V] slot of p (and of q) is read in full, a block of rows at a time so
    # that the temporaries stay small (fresh large allocations cost page faults on the CPU).
    j = num_accepted
    rejected = j < num_draft  # [B]; the others take the bonus: residual of p against nothing = p
    x = torch.empty(B, dtype=torch.int64, device=p.device)
    for r in _row_blocks(B, V):
        residual = _residual(p, q, d, rows[r], j[r], rejected[r])  # [b, V] float64, unnormalised
        x[r] = _draw(residual, draws, seeds[r], positions[r] + j[r])
    return _assemble(d, num_accepted, x, num_draft)


def _slot_positions(positions: torch.Tensor, K: int) -> torch.Tensor:
    """``[B, K]`` absolute positions of draft slots 0..K-1 (the keys of their accept draws)."""
    return positions[:, None] + torch.arange(K, device=positions.device)


def _normalised_at(
    p: torch.Tensor,  # [B, K+1, V]
    q: torch.Tensor | None,  # [B, K, V] or None (point masses: q' = q)
    p_d: torch.Tensor,  # [B, K] float64 p_i(d_i) as stored
    q_d: torch.Tensor,  # [B, K] float64 q_i(d_i) as stored
    u: torch.Tensor,  # [B, K] accept uniforms
    drafted: torch.Tensor,  # [B, K]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p', q')`` at the drafted tokens, ``p' = p / sum(p)`` and ``q' = q / sum(q)``, wherever the
    accept test ``u q' < p'`` could differ from ``u q < p``; the stored values elsewhere.

    Every row read sums to 1 within ``t = SUM_TOLERANCE[dtype]`` (validated, or promised by
    ``validate=False``), so sum(p) / sum(q) lies in [(1 - t) / (1 + t), (1 + t) / (1 - t)] and the
    two tests agree unless u q and p are within a factor 1 + 3t of each other. Only those slots
    (about 3t of them) have their two row sums taken: no pass over ``[B, K, V]``.
    """
    tol = SUM_TOLERANCE.get(p.dtype, _LOW_PRECISION_SUM_TOLERANCE)
    uq = u * q_d
    near = drafted & ((uq - p_d).abs() <= 3 * tol * (uq + p_d))  # [B, K]
    if not bool(near.any()):
        return p_d, q_d
    b, i = near.nonzero(as_tuple=True)  # [m] each
    p_d, q_d = p_d.clone(), q_d.clone()
    p_d[b, i] = p_d[b, i] / _sums(p[b, i])  # p'(d) = p(d) / sum(p)
    if q is not None:
        q_d[b, i] = q_d[b, i] / _sums(q[b, i])  # q'(d) = q(d) / sum(q)
    return p_d, q_d


def _sums(rows: torch.Tensor) -> torch.Tensor:
    """``[m]`` float64 row totals of ``rows [m, V]``; a total of 0 reads as 1 (such a row has no
    token to draw, and validation or the draw rejects it)."""
    s = rows.sum(-1, dtype=torch.float64)
    return torch.where(s > 0, s, 1.0)


def _accepts(u: torch.Tensor, p_d: torch.Tensor, q_d: torch.Tensor) -> torch.Tensor:
    """``[B, K]`` bool: u < p(d) / q(d), written without the division (q(d) > 0 for a sampled d)."""
    return u * q_d < p_d


def _residual(
    p: torch.Tensor,  # [B, K+1, V]
    q: torch.Tensor | None,  # [B, K, V] or None (point masses)
    d: torch.Tensor,  # [B, K]
    rows: torch.Tensor,  # [b] the rows of this block
    j: torch.Tensor,  # [b] the slot each row emits at
    rejected: torch.Tensor,  # [b] rejection at slot j (else: bonus)
) -> torch.Tensor:
    """``[b, V]`` float64: max(0, p'_j - q'_j) on rejection (p' = p / sum(p), q' = q / sum(q)), p_j
    for the bonus; p_j where the residual has no mass. Float64 even for float32/16 inputs. The
    result is unnormalised: the draw scales by the row's total."""
    K = d.shape[1]
    residual = _rows_at(p, rows, j, torch.float64)  # [b, V] p_j, a fresh copy to work in
    if q is None:  # q_j = one-hot(d_j): max(0, p - q) is p without d_j (p(d_j) - 1 <= 0)
        if K > 0:
            d_j = d[rows, j.clamp(max=K - 1)]  # [b]
            hit = rejected.nonzero().squeeze(1)
            residual[hit, d_j[hit]] = 0.0
        return _fallback(residual, p, rows, j)
    if K > 0:
        hit = rejected.nonzero().squeeze(1)  # [h] rows that draw from a residual; the others: bonus p_j
        p_j = residual[hit]  # [h, V] float64
        q_j = _rows_at(q, rows[hit], j[hit].clamp(max=K - 1), torch.float64)  # [h, V]
        p_j.div_(_sums(p_j)[:, None]).sub_(q_j.div_(_sums(q_j)[:, None])).clamp_min_(0)  # max(0, p' - q')
        residual[hit] = p_j
    return _fallback(residual, p, rows, j)


def _fallback(residual: torch.Tensor, p: torch.Tensor, rows: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """Zero residual mass means p <= q everywhere (p == q for normalised rows), where rejection
    has probability 0; floating point can still get here, and the correct fallback is p_j itself
    (not a "tiny-clamped" residual, which would emit near-uniform tokens)."""
    no_mass = residual.sum(-1) <= 0  # [b]
    if bool(no_mass.any()):
        residual[no_mass] = _rows_at(p, rows[no_mass], j[no_mass], torch.float64)
    return residual


def _draw(residual: torch.Tensor, draws: Draws, seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``[b]`` x ~ residual (normalised by its row total) by inverse CDF, on the emit stream."""
    return inverse_cdf(residual, draws.uniform(seeds, positions, STREAM_EMIT))


def _rows_at(x: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x[rows, slots]`` for ``x`` of shape ``[B, S, V]``: a fresh ``[b, V]`` tensor (whole-row copies),
    converted to ``dtype`` if given."""
    out = x.view(-1, x.shape[-1]).index_select(0, rows * x.shape[1] + slots) if x.is_contiguous() else x[rows, slots]
    return out if dtype is None or out.dtype == dtype else out.to(dtype)


def _row_blocks(n_rows: int, row_len: int, block: int = 1 << 18) -> list[slice]:
    """Slices of rows holding about ``block`` elements each (at least one row)."""
    step = max(1, block // max(row_len, 1))
    return [slice(i, i + step) for i in range(0, n_rows, step)]


def _verify_greedy(
    p: torch.Tensor,  # [B, K+1, V] one-hot at every used slot
    d: torch.Tensor,  # [B, K]
    drafted: torch.Tensor,  # [B, K]
    num_draft: torch.Tensor,  # [B]
) -> Verification:
    """Accept while p_i(d_i) = 1 (the draft is the argmax), then emit the argmax: no random draws."""
    B, K1, V = p.shape
    K = K1 - 1
    p_d = p[:, :K].gather(-1, d[..., None]).squeeze(-1)  # [B, K]
    num_accepted = (drafted & (p_d == 1)).to(torch.int64).cumprod(-1).sum(-1)  # [B]
    rows = torch.arange(B, device=p.device)
    x = _rows_at(p, rows, num_accepted).argmax(-1)  # [B] the argmax at the emitting slot
    return _assemble(d, num_accepted, x, num_draft)


def verify_argmax(
    target_top: torch.Tensor,  # [B, K+1] int64: argmax of p at each draft slot and the bonus slot
    draft_tokens: torch.Tensor,  # [B, K]
    num_draft: torch.Tensor,  # [B]
) -> Verification:
    """The greedy rule from the target's argmax tokens alone: accept while d_i = t_i, then emit t.

    The fast path for a batch whose rows are all greedy (temperature 0): it needs ``argmax p``
    per slot, not the one-hot ``[B, K+1, V]`` that :func:`verify` reads, and gives the same
    outcome as :func:`verify` on ``p = one_hot(target_top)`` with either method (the reference
    the tests compare it with). Inputs are not validated: ids come from the engine's own argmax.
    """
    K = draft_tokens.shape[1]
    if K == 0:  # no drafts: every row emits its argmax
        B = target_top.shape[0]
        zero = torch.zeros(B, dtype=torch.int64, device=target_top.device)
        return Verification(tokens=target_top, num_accepted=zero, num_emitted=zero + 1,
                            accepted=torch.zeros(B, 0, dtype=torch.bool, device=target_top.device), num_draft=num_draft)
    drafted = torch.arange(K, device=draft_tokens.device) < num_draft[:, None]  # [B, K]
    d = torch.where(drafted, draft_tokens.to(torch.int64), 0)  # [B, K] placeholders -> 0
    num_accepted = (drafted & (d == target_top[:, :K])).to(torch.int64).cumprod(-1).sum(-1)  # [B]
    x = target_top.gather(1, num_accepted[:, None]).squeeze(1)  # [B] the argmax at the emitting slot
    return _assemble(d, num_accepted, x, num_draft)


def merge_rows(B: int, *parts: tuple[torch.Tensor, Verification], num_draft: torch.Tensor) -> Verification:
    """Scatter per-subset results (row indices ``[n]``, Verification) back into one batch of B rows;
    ``num_draft [B]`` is the whole batch's. Each row's outcome depends on that row alone (draws are
    keyed by its seed and position), so verifying subsets apart changes nothing. If any part is a
    tree's (it has a ``path``), the merged result carries every row's accepted nodes as ``path``."""
    (_, first), K1 = parts[0], parts[0][1].tokens.shape[1]
    tokens = first.tokens.new_empty(B, K1)
    num_accepted = first.num_accepted.new_empty(B)
    for rows, v in parts:
        tokens[rows], num_accepted[rows] = v.tokens, v.num_accepted
    path = None
    if any(v.path is not None for _, v in parts):
        path = first.num_accepted.new_full((B, K1 - 1), -1)
        for rows, v in parts:
            path[rows] = v.accepted_nodes()
    return Verification(tokens=tokens, num_accepted=num_accepted, num_emitted=num_accepted + 1,
                        accepted=torch.arange(K1 - 1, device=tokens.device) < num_accepted[:, None],
                        num_draft=num_draft, path=path)


def _verify_gumbel(
    p: torch.Tensor,  # [B, K+1, V]
    d: torch.Tensor,  # [B, K]
    drafted: torch.Tensor,  # [B, K]
    num_draft: torch.Tensor,  # [B]
    seeds: torch.Tensor,  # [B]
    positions: torch.Tensor,  # [B]
    draws: Draws,
) -> Verification:
    """Accept while d_i equals the target's t_i = argmax(log p_i + G(seed, position + i)), then emit t.

    Slot by slot, t_i is computed only for the rows still accepting, drawing the noise only for the
    blocks of tokens that can win (:func:`verispec.rng.gumbel_argmax`). A one-hot p_i gives its
    argmax directly: log p_i + G has one finite entry.
    """
    B, K1, V = p.shape
    K = K1 - 1
    num_accepted = torch.zeros(B, dtype=torch.int64, device=p.device)
    x = torch.zeros(B, dtype=torch.int64, device=p.device)
    live = torch.arange(B, device=p.device)  # rows whose slot i is still undecided
    for i in range(K1):
        p_i = _rows_at(p, live, torch.full_like(live, i))  # [n, V]
        t = _target_token(p_i, seeds[live], positions[live] + i, draws)  # [n] the target's token at slot i
        go_on = drafted[live, i] & (d[live, i] == t) if i < K else torch.zeros_like(t, dtype=torch.bool)
        stop = live[~go_on]
        num_accepted[stop], x[stop] = i, t[~go_on]
        live = live[go_on]
        if live.numel() == 0:
            break
    return _assemble(d, num_accepted, x, num_draft)


def _target_token(p_i: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor, draws: Draws) -> torch.Tensor:
    """``[n]`` argmax(log p_i + G(seed, position)) per row of ``p_i [n, V]``; a one-hot row's argmax directly."""
    one_hot = _is_one_hot(p_i)
    t = torch.empty(p_i.shape[0], dtype=torch.int64, device=p_i.device)
    if bool(one_hot.any()):
        t[one_hot] = p_i[one_hot].argmax(-1)
    sampled = ~one_hot
    if bool(sampled.any()):
        t[sampled] = draws.gumbel_argmax(p_i[sampled], seeds[sampled], positions[sampled])
    return t


def _assemble(d: torch.Tensor, num_accepted: torch.Tensor, x: torch.Tensor, num_draft: torch.Tensor) -> Verification:
    B, K = d.shape
    slots1 = torch.arange(K + 1, device=d.device)
    tokens = torch.cat([d, d.new_full((B, 1), -1)], dim=1)  # [B, K+1]
    tokens = torch.where(slots1 < num_accepted[:, None], tokens, -1)
    tokens.scatter_(1, num_accepted[:, None], x[:, None])
    return Verification(
        tokens=tokens,
        num_accepted=num_accepted,
        num_emitted=num_accepted + 1,
        accepted=slots1[:K] < num_accepted[:, None],
        num_draft=num_draft,
    )


# ----------------------------------------------------------------------------------------------
# Input validation: clear errors naming the argument; the rows are checked after the rules ran,
# only those the rules read.


def _check_shapes(p: object, q: object, d: object) -> tuple[int, int]:
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"target_probs must be a torch.Tensor, got {type(p).__name__}")
    if not p.is_floating_point():
        raise TypeError(f"target_probs must be floating point, got {p.dtype}")
    if p.dim() != 3:
        raise ValueError(f"target_probs must be [B, K+1, V], got shape {tuple(p.shape)}")
    if p.requires_grad or (isinstance(q, torch.Tensor) and q.requires_grad):
        name = "target_probs" if p.requires_grad else "draft_probs"
        raise ValueError(f"{name} requires grad: verification draws tokens and is not differentiable; "
                         f"pass {name}.detach()")
    B, K1, V = p.shape
    if K1 < 1 or V < 1:
        raise ValueError(f"target_probs must have K+1 >= 1 slots and V >= 1, got shape {tuple(p.shape)}")
    K = K1 - 1
    if not isinstance(d, torch.Tensor):
        raise TypeError(f"draft_tokens must be a torch.Tensor, got {type(d).__name__}")
    if d.dtype.is_floating_point or d.dtype.is_complex or d.dtype == torch.bool:
        raise TypeError(f"draft_tokens must have an integer dtype, got {d.dtype}")
    if tuple(d.shape) != (B, K):
        raise ValueError(f"draft_tokens must be [B, K] = [{B}, {K}] to match target_probs, got {tuple(d.shape)}")
    if d.device != p.device:
        raise ValueError(f"draft_tokens is on {d.device} but target_probs is on {p.device}")
    if q is not None:
        if not isinstance(q, torch.Tensor):
            raise TypeError(f"draft_probs must be a torch.Tensor or None, got {type(q).__name__}")
        if tuple(q.shape) != (B, K, V):
            raise ValueError(f"draft_probs must be [B, K, V] = [{B}, {K}, {V}], got {tuple(q.shape)}")
        if q.dtype != p.dtype:
            raise TypeError(f"draft_probs dtype {q.dtype} differs from target_probs dtype {p.dtype}")
        if q.device != p.device:
            raise ValueError(f"draft_probs is on {q.device} but target_probs is on {p.device}")
    return B, K


def _as_index_vector(
    x: object, name: str, B: int, device: torch.device, default: int | None = None
) -> torch.Tensor:
    if x is None:
        if default is None:
            raise ValueError(f"{name} is required")
        return torch.full((B,), default, dtype=torch.int64, device=device)
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.as_tensor(x, device=device)
        except (OverflowError, RuntimeError, TypeError, ValueError) as e:
            raise ValueError(f"{name} must be int64 values (in [-2**63, 2**63)), got {x!r:.80}: {e}") from None
    if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise TypeError(f"{name} must have an integer dtype, got {x.dtype}")
    if tuple(x.shape) != (B,):
        raise ValueError(f"{name} must have shape [B] = [{B}], got {tuple(x.shape)}")
    if x.device != device:
        raise ValueError(f"{name} is on {x.device} but target_probs is on {device}")
    return x.to(torch.int64)


def _check_values(
    p: torch.Tensor,
    q: torch.Tensor | None,
    d: torch.Tensor,
    num_draft: torch.Tensor,
    positions: torch.Tensor,
    drafted: torch.Tensor,
    gumbel: torch.Tensor,
) -> None:
    """Before the rules run: ids, lengths, positions, and p and q at the drafted tokens."""
    B, K1, V = p.shape
    K = K1 - 1
    if bool(((num_draft < 0) | (num_draft > K)).any()):
        raise ValueError(f"num_draft must lie in [0, K={K}], got {num_draft.tolist()}")
    if bool((positions < 0).any()):
        raise ValueError(f"positions must be >= 0, got {positions.tolist()}")
    if bool((drafted & ((d < 0) | (d >= V))).any()):
        raise ValueError(f"draft_tokens must be ids in [0, V={V}) at drafted slots")
    tol = SUM_TOLERANCE.get(p.dtype, _LOW_PRECISION_SUM_TOLERANCE)
    d = d.clamp(0, V - 1)[..., None]
    p_d = p[:, :K].gather(-1, d).squeeze(-1)  # [B, K]
    if bool((drafted & ~((p_d >= 0) & (p_d <= 1 + tol))).any()):
        raise ValueError("target_probs has entries outside [0, 1] (or NaN) at drafted tokens")
    if q is not None and not bool(gumbel.all()):
        drafted = drafted & ~gumbel[:, None]  # q is ignored by the Gumbel rule
        q_d = q.gather(-1, d).squeeze(-1)
        if bool((drafted & ~(q_d <= 1 + tol)).any()):
            raise ValueError("draft_probs has entries above 1 (or NaN) at drafted tokens")
        if bool((drafted & ~(q_d > 0)).any()):
            raise ValueError(
                "draft_probs gives probability 0 to a drafted token: the draft was not sampled "
                "from draft_probs (pass draft_probs=None for point-mass drafts)"
            )


def _check_rows_read(p: torch.Tensor, q: torch.Tensor | None, j: torch.Tensor, num_draft: torch.Tensor,
                     greedy: torch.Tensor) -> None:
    """After the rules ran: every row they read is a distribution (finite, no negative entry, sums
    to 1), i.e. p at slots 0..j and q at slots 0..min(j, n - 1), where j is each row's emitting
    slot; rows of greedy rows are one-hot. Rows past the emitting slot cannot change the output and
    are not read, here or by the rules (like slots past ``num_draft``): this is what keeps
    validation at a fraction of one pass over p and q."""
    B, K1, V = p.shape
    tol = SUM_TOLERANCE.get(p.dtype, _LOW_PRECISION_SUM_TOLERANCE)
    read = torch.arange(K1, device=p.device) <= j[:, None]  # [B, K+1]
    _check_distributions("target_probs", p, read, tol, one_hot=greedy[:, None].expand(B, K1))
    if q is not None and K1 > 1:
        _check_distributions("draft_probs", q, read[:, :-1] & (torch.arange(K1 - 1, device=p.device) < num_draft[:, None]), tol)


def _check_distributions(name: str, x: torch.Tensor, read: torch.Tensor, tol: float,
                         one_hot: torch.Tensor | None = None) -> None:
    """Check the rows ``x[b, s]`` where ``read[b, s]``: copied a block at a time into one buffer that
    stays in cache, and reduced there (sum, min, and for one-hot rows the count of positive entries)."""
    V = x.shape[-1]
    flat = x.reshape(-1, V)  # [B * S, V] (a view for contiguous x)
    idx = read.reshape(-1).nonzero().squeeze(1)  # [m] the rows read
    m = idx.numel()
    sums, mins = x.new_empty(m), x.new_empty(m)
    hot = None if one_hot is None else one_hot.reshape(-1)[idx]  # [m] rows that must be one-hot
    count = x.new_ones(m) if hot is not None and bool(hot.any()) else None
    blocks = _row_blocks(m, V, _CHECK_BLOCK)
    buf = x.new_empty(min(m, blocks[0].stop if blocks else 0), V)
    for r in blocks:
        rows = torch.index_select(flat, 0, idx[r], out=buf[: idx[r].numel()])  # [b, V]
        torch.sum(rows, -1, out=sums[r])  # NaN / inf anywhere in a row shows up here
        torch.amin(rows, -1, out=mins[r])
        if count is not None and bool(hot[r].any()):
            count[r] = torch.where(hot[r], rows.ceil_().sum(-1), 1.0)  # positive entries (all in [0, 1])
    if not bool(torch.isfinite(sums).all()):
        raise ValueError(f"{name} contains NaN or inf")
    if bool((mins < 0).any()):
        raise ValueError(f"{name} has negative entries")
    off = sums.double() - 1
    if m and float(off.abs().max()) > tol:
        worst = float(off[off.abs().argmax()])
        raise ValueError(f"{name} rows must sum to 1 (tolerance {tol:g} for {x.dtype}); worst row sums to "
                         f"1 {'+' if worst > 0 else '-'} {abs(worst):.3g} = {1 + worst!r}")
    if count is not None and bool((hot & ((count != 1) | (sums != 1))).any()):  # one positive entry, equal to 1
        raise ValueError("greedy marks rows whose target_probs are not one-hot (temperature 0)")


_CHECK_BLOCK = 1 << 19  # elements per block of validated rows (4 MiB at float32)
