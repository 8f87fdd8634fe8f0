"""Chain verification of a speculative draft (DESIGN.md section 2), vectorised over batch and slots.

For a row with drafts d_1..d_n (n <= K), target distributions p_1..p_{K+1} and draft
distributions q_1..q_K:

* ``method="exact"`` (Leviathan et al. 2023, Chen et al. 2023): accept d_i with probability
  min(1, p_i(d_i) / q_i(d_i)); at the first rejection emit x ~ residual r_i = max(0, p_i - q_i)
  (normalised; p_i itself when the residual has no mass) and stop; if all n pass, emit a bonus
  token x ~ p_{n+1}. Each emitted token has exactly the target's distribution.
  ``draft_probs=None`` means point-mass drafts (prompt lookup, greedy drafters): q_i = one-hot(d_i),
  so d_i is accepted with probability p_i(d_i) and the residual is p_i with d_i removed.
* ``method="gumbel"`` (Daliri, Musco, Suresh 2024): with shared noise G(seed, position, token) the
  target's token is t_i = argmax(log p_i + G); accept while d_i == t_i, then emit t at the first
  mismatch (or the bonus slot). The output is exactly target-only Gumbel sampling with that seed,
  whatever the drafter.
* Greedy rows (every p one-hot) take a fast path with no random draws: accept while the draft
  equals the target's argmax. It gives the same tokens the exact rule would.

The plain per-row float64 reference that the tests compare this against is
:func:`verispec.certify.reference_verify`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .rng import STREAM_ACCEPT, STREAM_EMIT, gumbel_noise, random_seeds, sample, uniform

__all__ = ["Verification", "verify", "gumbel_argmax", "METHODS", "SUM_TOLERANCE"]

METHODS = ("exact", "gumbel")

#: Rows of ``target_probs``/``draft_probs`` must sum to 1 within this absolute tolerance.
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
    """

    tokens: torch.Tensor
    num_accepted: torch.Tensor
    num_emitted: torch.Tensor
    accepted: torch.Tensor
    num_draft: torch.Tensor


def verify(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    *,
    num_draft: torch.Tensor | None = None,
    seeds: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    method: str = "exact",
    validate: bool = True,
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
        method: ``"exact"`` or ``"gumbel"``.
        validate: check every input (cheap; see ``benchmarks``). Turn off only for inputs that
            come straight from :func:`verispec.logits_to_probs`.

    Returns:
        A :class:`Verification`.
    """
    B, K = _check_shapes(target_probs, draft_probs, draft_tokens, method)
    device = target_probs.device
    num_draft = _as_index_vector(num_draft, "num_draft", B, device, default=K)
    seeds = random_seeds(B).to(device) if seeds is None else _as_index_vector(seeds, "seeds", B, device)
    positions = _as_index_vector(positions, "positions", B, device, default=0)
    draft_tokens = draft_tokens.to(torch.int64)

    slots = torch.arange(K, device=device)
    drafted = slots < num_draft[:, None]  # [B, K]
    if validate:
        _check_values(target_probs, draft_probs, draft_tokens, num_draft, positions, drafted, method)
    # Undrafted slots may hold placeholders such as -1: point them at token 0 for the gathers.
    d = torch.where(drafted, draft_tokens, 0)  # [B, K]

    top_p, target_argmax = target_probs.max(-1)  # [B, K+1]
    greedy = (top_p == 1).all(-1)  # [B] one-hot target at every slot
    if method == "gumbel":
        target_choice = _gumbel_targets(target_probs, seeds, positions, target_argmax, greedy)
        return _accept_while_equal(target_choice, d, drafted, num_draft)
    if bool(greedy.all()):
        return _accept_while_equal(target_argmax, d, drafted, num_draft)

    out = _verify_exact(target_probs, draft_probs, d, drafted, num_draft, seeds, positions)
    if bool(greedy.any()):  # mixed batch: greedy rows take the argmax rule, with no draws
        fast = _accept_while_equal(target_argmax, d, drafted, num_draft)
        out = _select_rows(greedy, fast, out)
    return out


def gumbel_argmax(logprobs: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Gumbel-max choice ``argmax(logprobs + G)`` with the shared counter-based noise.

    Args:
        logprobs: ``[B, K, V]`` log-probabilities (``-inf`` for excluded tokens).
        seeds: ``[B]`` int64 request seeds.
        positions: ``[B]`` absolute position of slot 0; slot i uses the noise of ``positions + i``.

    Returns:
        ``[B, K]`` int64 tokens: an exact sample from ``softmax(logprobs)`` per slot, and the
        same token for the same (seed, position, distribution) wherever it is computed.
    """
    if logprobs.dim() != 3:
        raise ValueError(f"logprobs must be [B, K, V], got shape {tuple(logprobs.shape)}")
    B, K, V = logprobs.shape
    seeds = _as_index_vector(seeds, "seeds", B, logprobs.device)
    positions = _as_index_vector(positions, "positions", B, logprobs.device)
    slot_positions = positions[:, None] + torch.arange(K, device=logprobs.device)  # [B, K]
    noise = gumbel_noise(seeds[:, None], slot_positions, V)  # [B, K, V] float64
    return (logprobs.to(torch.float64) + noise).argmax(-1)


# ----------------------------------------------------------------------------------------------
# The three rules


def _verify_exact(
    p: torch.Tensor,  # [B, K+1, V]
    q: torch.Tensor | None,  # [B, K, V] or None (point masses)
    d: torch.Tensor,  # [B, K]
    drafted: torch.Tensor,  # [B, K]
    num_draft: torch.Tensor,  # [B]
    seeds: torch.Tensor,  # [B]
    positions: torch.Tensor,  # [B]
) -> Verification:
    B, K1, V = p.shape
    K = K1 - 1
    rows = torch.arange(B, device=p.device)
    slots = torch.arange(K, device=p.device)

    # Accept d_i with probability min(1, p_i(d_i) / q_i(d_i)), i.e. u * q < p with u in (0, 1).
    p_d = p[:, :K].gather(-1, d[..., None]).squeeze(-1).double()  # [B, K]
    q_d = torch.ones_like(p_d) if q is None else q.gather(-1, d[..., None]).squeeze(-1).double()
    u = _uniform_slots(seeds, positions, K, STREAM_ACCEPT)  # [B, K] float64
    passes = drafted & (u * q_d < p_d)
    num_accepted = passes.to(torch.int64).cumprod(-1).sum(-1)  # [B] first rejection (or n)

    # The emitted token sits at slot j = num_accepted: residual on rejection, bonus if all passed.
    j = num_accepted
    bonus = j == num_draft  # [B]
    p_j = p[rows, j]  # [B, V]
    if K == 0:
        q_j = torch.zeros_like(p_j)
    elif q is None:
        d_j = d[rows, j.clamp(max=K - 1)]
        q_j = torch.zeros_like(p_j).scatter_(-1, d_j[:, None], 1.0)  # one-hot(d_j)
    else:
        q_j = q[rows, j.clamp(max=K - 1)]
    q_j = q_j * (~bonus)[:, None]  # bonus: residual of p against nothing = p
    residual = (p_j - q_j).clamp_min(0)  # [B, V] max(0, p - q), unnormalised
    # Zero residual mass means p == q, where rejection has probability 0; floating point can
    # still get here, and the correct fallback is p itself (not a "tiny-clamped" residual).
    no_mass = residual.sum(-1) <= 0
    residual = torch.where(no_mass[:, None], p_j, residual)
    x = sample(residual, seeds, positions + j, STREAM_EMIT)  # [B]
    return _assemble(d, num_accepted, x, slots, num_draft)


def _accept_while_equal(
    target_choice: torch.Tensor,  # [B, K+1] the target's token at each slot
    d: torch.Tensor,  # [B, K]
    drafted: torch.Tensor,  # [B, K]
    num_draft: torch.Tensor,  # [B]
) -> Verification:
    """Deterministic verification: accept while the draft equals the target's choice, then emit it."""
    K = d.shape[1]
    matches = drafted & (d == target_choice[:, :K])
    num_accepted = matches.to(torch.int64).cumprod(-1).sum(-1)  # [B]
    x = target_choice.gather(1, num_accepted[:, None]).squeeze(1)  # [B]
    return _assemble(d, num_accepted, x, torch.arange(K, device=d.device), num_draft)


def _gumbel_targets(
    p: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor, target_argmax: torch.Tensor, greedy: torch.Tensor
) -> torch.Tensor:
    """t_i = argmax(log p_i + G(seed, position + i)) for sampled rows, the argmax for greedy rows."""
    choice = target_argmax.clone()
    sampled = ~greedy
    if bool(sampled.any()):
        choice[sampled] = gumbel_argmax(torch.log(p[sampled]), seeds[sampled], positions[sampled])
    return choice


def _assemble(
    d: torch.Tensor, num_accepted: torch.Tensor, x: torch.Tensor, slots: torch.Tensor, num_draft: torch.Tensor
) -> Verification:
    B, K = d.shape
    slots1 = torch.arange(K + 1, device=d.device)
    tokens = torch.cat([d, d.new_full((B, 1), -1)], dim=1)  # [B, K+1]
    tokens = torch.where(slots1 < num_accepted[:, None], tokens, -1)
    tokens.scatter_(1, num_accepted[:, None], x[:, None])
    return Verification(
        tokens=tokens,
        num_accepted=num_accepted,
        num_emitted=num_accepted + 1,
        accepted=slots < num_accepted[:, None],
        num_draft=num_draft,
    )


def _select_rows(mask: torch.Tensor, a: Verification, b: Verification) -> Verification:
    """Row-wise ``a if mask else b``."""

    def pick(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.where(mask.view(-1, *[1] * (x.dim() - 1)), x, y)

    return Verification(
        tokens=pick(a.tokens, b.tokens),
        num_accepted=pick(a.num_accepted, b.num_accepted),
        num_emitted=pick(a.num_emitted, b.num_emitted),
        accepted=pick(a.accepted, b.accepted),
        num_draft=a.num_draft,
    )


def _uniform_slots(seeds: torch.Tensor, positions: torch.Tensor, K: int, stream: int) -> torch.Tensor:
    """``[B, K]`` uniforms for slots 0..K-1 at absolute positions ``positions + i``."""
    return uniform(seeds[:, None], positions[:, None] + torch.arange(K, device=seeds.device), stream)


# ----------------------------------------------------------------------------------------------
# Input validation: clear errors naming the argument, at the cost of ~one extra read of p and q.


def _check_shapes(
    p: object, q: object, d: object, method: str
) -> tuple[int, int]:
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"target_probs must be a torch.Tensor, got {type(p).__name__}")
    if not p.is_floating_point():
        raise TypeError(f"target_probs must be floating point, got {p.dtype}")
    if p.dim() != 3:
        raise ValueError(f"target_probs must be [B, K+1, V], got shape {tuple(p.shape)}")
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
        x = torch.as_tensor(x)
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
    method: str,
) -> None:
    B, K1, V = p.shape
    K = K1 - 1
    if bool(((num_draft < 0) | (num_draft > K)).any()):
        raise ValueError(f"num_draft must lie in [0, K={K}], got {num_draft.tolist()}")
    if bool((positions < 0).any()):
        raise ValueError(f"positions must be >= 0, got {positions.tolist()}")
    if bool((drafted & ((d < 0) | (d >= V))).any()):
        raise ValueError(f"draft_tokens must be ids in [0, V={V}) at drafted slots")
    tol = SUM_TOLERANCE.get(p.dtype, _LOW_PRECISION_SUM_TOLERANCE)
    # p is needed at slots 0..n (n drafts + the bonus slot); q at slots 0..n-1.
    _check_distribution("target_probs", p, torch.arange(K1, device=p.device) <= num_draft[:, None], tol)
    if q is not None and method == "exact":
        _check_distribution("draft_probs", q, drafted, tol)
        q_d = q.gather(-1, d.clamp(0, V - 1)[..., None]).squeeze(-1)
        if bool((drafted & (q_d <= 0)).any()):
            raise ValueError(
                "draft_probs gives probability 0 to a drafted token: the draft was not sampled "
                "from draft_probs (pass draft_probs=None for point-mass drafts)"
            )


def _check_distribution(name: str, x: torch.Tensor, used: torch.Tensor, tol: float) -> None:
    sums = x.sum(-1)  # [B, S]; NaN / inf anywhere in a row shows up here
    if not bool(torch.isfinite(sums[used]).all()):
        raise ValueError(f"{name} contains NaN or inf")
    lo = x.amin(-1)
    if bool((lo[used] < 0).any()):
        raise ValueError(f"{name} has negative entries")
    err = (sums[used].double() - 1).abs()
    if err.numel() and float(err.max()) > tol:
        raise ValueError(f"{name} rows must sum to 1 (tolerance {tol:g} for {x.dtype}); worst row sums to "
                         f"{1 + float((sums[used].double() - 1)[err.argmax()]):.6g}")
