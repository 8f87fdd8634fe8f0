"""How model drafters turn their logits into draft tokens, and the helpers around it.

A drafter must report the q it drew each token from (the verifier's exactness depends on it):
:func:`sample_draft` computes q with the request's own transform and draws from exactly that q,
with the shared counter-based randomness, so a whole run is a pure function of the seeds.

How a draw is keyed depends on the row's verifier:

* token-by-token rows ("exact", "gumbel"): by (seed, the token's absolute position,
  ``STREAM_DRAFT``). The verifier's outcome depends on the drafts up to its first rejection only,
  and the next pass starts after that slot, so a draw it meets again never influenced anything
  emitted (docs/design.md section 3);
* block-verified rows (``DraftAsk.block``): by (seed, :func:`~verispec.rng.block_draft_counter`
  of the pass's first draft position and the token's, ``STREAM_BLOCK_DRAFT``). Block
  verification's outcome depends on the drafts past the prefix it keeps too, and the next pass
  starts inside that range: keyed by position alone, the next pass would draft with uniforms
  whose values this pass's outcome already depends on (conditioned on the outcome, they are not
  uniform), and the q it reports would not be the law its tokens were drawn from. Keyed by the
  pass start too, every pass of a row draws uniforms that nothing before it has read (its pass
  starts strictly increase), so each pass is a fresh draft from q, which is all the block rule
  assumes (docs/design.md section 9).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from ..draft import Draft
from ..rng import COUNTER, STREAM_BLOCK_DRAFT, STREAM_DRAFT, Draws, block_draft_counter, inverse_cdf
from ..sampling import (RowParams, SamplingParams, check_logits, fit_vocab, gumbel_rows, logits_to_probs,
                        merge_tensor_rows, split_rows)

__all__ = ["sample_draft", "greedy_draft", "to_target_vocab", "agreement", "gumbel_rows", "draft_chain"]

if TYPE_CHECKING:
    from .base import DraftAsk


def sample_draft(logits: torch.Tensor, params: SamplingParams | RowParams, method: str | Sequence[str] | torch.Tensor,
                 seeds: torch.Tensor, positions: torch.Tensor, draws: Draws = COUNTER, *,
                 block: torch.Tensor | None = None, starts: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """One draft step of a model drafter: q = each row's transform of the draft ``logits [B, V]``
    (target vocabulary) and the token d drawn from exactly that q. Returns ``(d [B], q [B, V])``.

    ``method``: ``"exact"`` (inverse CDF of a uniform) or ``"gumbel"`` (argmax of log q plus the
    shared noise), for every row or per row. The q returned is the q the verifier must be given:
    a drafter that reports any other distribution than the one it sampled from breaks exactness
    (certified, see :mod:`verispec.certify`, which drives this function through ``draws``).

    ``positions [B]``: each row's absolute position of this token. ``block`` (optional ``[B]``
    bool): rows verified by block verification; their uniform is keyed by the pass too, by
    ``starts [B]`` (the position of the pass's first draft slot; required when any row is block),
    see the module docstring. Block rows draw by inverse CDF ("gumbel" names a different rule:
    a row cannot be both). Without ``block`` every draw is keyed as before.
    """
    q = logits_to_probs(logits, params)  # [B, V]
    B = q.shape[0]
    gumbel = gumbel_rows(method, B, q.device)
    keys = _block_keys(block, starts, positions, gumbel, B)
    return _draw_from(q, params, gumbel, seeds, positions, draws, keys), q


def _block_keys(block: torch.Tensor | None, starts: torch.Tensor | None, positions: torch.Tensor,
                gumbel: torch.Tensor, B: int) -> torch.Tensor | None:
    """``[B]`` int64 the block rows' counters (:func:`~verispec.rng.block_draft_counter`), -1 on the
    other rows; ``None`` when no row is block (every draw keyed by position alone)."""
    if block is None:
        return None
    block = block.to(device=gumbel.device, dtype=torch.bool)
    if block.shape != (B,):
        raise ValueError(f"block must be a [B] = [{B}] bool tensor, got shape {tuple(block.shape)}")
    if not bool(block.any()):
        return None
    if bool((block & gumbel).any()):
        raise ValueError("block: a block-verified row draws by inverse CDF; it cannot also be a 'gumbel' row")
    if starts is None:
        raise ValueError("starts: block rows need the position of their pass's first draft slot")
    starts = torch.as_tensor(starts, dtype=torch.int64, device=positions.device).expand(B)
    b = block.to(positions.device)
    return torch.where(b, block_draft_counter(torch.where(b, starts, positions), positions), -1)


def _draw_from(q: torch.Tensor, params: SamplingParams | RowParams, gumbel: torch.Tensor, seeds: torch.Tensor,
               positions: torch.Tensor, draws: Draws, keys: torch.Tensor | None = None) -> torch.Tensor:
    """``[B]`` a token from each row of ``q [B, V]``: argmax for greedy rows (q is one-hot, both
    rules pick its token, so no noise is drawn), else by the row's rule. ``keys [B]`` (optional):
    the block rows' counters (>= 0), whose uniforms come from ``STREAM_BLOCK_DRAFT``."""
    B = q.shape[0]
    greedy = torch.full((B,), params.greedy, device=q.device) if isinstance(params, SamplingParams) \
        else params.greedy.to(q.device)
    keys = torch.full_like(positions, -1) if keys is None else keys

    def rows(r: torch.Tensor | None, *x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x if r is None else tuple(t[r] for t in x)

    def sampled(r: torch.Tensor | None) -> torch.Tensor:
        qs, ss, ps, gs, ks = rows(r, q, seeds, positions, gumbel, keys)
        return split_rows(gs, lambda g: draws.gumbel_argmax(*rows(g, qs, ss, ps)),
                          lambda c: _cdf_draw(*rows(c, qs, ss, ps, ks), draws), merge_tensor_rows)
    return split_rows(greedy, lambda r: rows(r, q)[0].argmax(-1), sampled, merge_tensor_rows)


def _cdf_draw(q: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor, keys: torch.Tensor, draws: Draws
              ) -> torch.Tensor:
    """Inverse-CDF draws of ``q [n, V]``: token-by-token rows (``keys`` -1) keyed by position,
    block rows by their counter ``keys`` (see the module docstring)."""
    def by_position(r: torch.Tensor | None) -> torch.Tensor:
        return draws.uniform(*((seeds, positions) if r is None else (seeds[r], positions[r])), STREAM_DRAFT)

    def by_pass(r: torch.Tensor | None) -> torch.Tensor:
        return draws.uniform(*((seeds, keys) if r is None else (seeds[r], keys[r])), STREAM_BLOCK_DRAFT)

    u = split_rows(keys >= 0, by_pass, by_position, merge_tensor_rows)
    return inverse_cdf(q, u)


def agreement(draft: list[int], emitted: list[int]) -> tuple[int, int]:
    """``(passed, tried)`` for a draft against what the target then emitted at the same slots:
    the leading run of equal tokens, and the slots compared up to and including the first
    difference. Equal means accepted: a rejected slot never emits its draft token (the residual
    is 0 there), and at the bonus slot a point-mass draft equals the bonus draw with exactly
    its acceptance probability."""
    n = min(len(draft), len(emitted))
    passed = next((j for j in range(n) if emitted[j] != draft[j]), n)
    return passed, passed + (passed < n)


def to_target_vocab(logits: torch.Tensor, vocab_map: torch.Tensor | None, V: int, dtype: torch.dtype) -> torch.Tensor:
    """Draft logits ``[B, V_d]`` -> ``[B, V]`` over the target vocabulary.

    Row i of a reduced head scores target id ``vocab_map[i]``; every other id gets -inf (q = 0,
    which the exact verifier handles). Without a map, a padded head is cut to V and a short
    one padded with -inf.
    """
    logits = logits.to(dtype)
    if vocab_map is not None:
        full = logits.new_full((logits.shape[0], V), float("-inf"))
        return full.index_copy_(1, vocab_map.to(logits.device), logits)
    return fit_vocab(logits, V)  # a padded head's extra ids: the target gives them probability 0 anyway


def greedy_draft(logits: torch.Tensor, vocab_map: torch.Tensor | None, V: int) -> torch.Tensor:
    """``[B]`` the greedy draft token of draft logits ``[B, V_d]``: the argmax of
    ``to_target_vocab(logits, vocab_map, V, ...)`` (ties to the lowest target id, as
    :func:`logits_to_probs`), without building the ``[B, V]`` rows. Under greedy sampling q is
    this token's point mass, so drafters pass no dense q at all (``Draft.probs = None``).

    Raises:
        ValueError: NaN or +inf logits, as :func:`logits_to_probs`.
    """
    x = logits if vocab_map is not None else logits[:, :V]
    check_logits(x, "draft logits")
    if vocab_map is None:
        return x.argmax(-1)  # [B], the first maximum = the lowest id
    if not bool((vocab_map[1:] > vocab_map[:-1]).all()):
        # an unsorted map: the first maximum in row order need not be the lowest target id
        return to_target_vocab(logits, vocab_map, V, logits.dtype).argmax(-1)
    return vocab_map.to(logits.device)[x.argmax(-1)]


def draft_chain(logits: torch.Tensor, step: Callable[[torch.Tensor], torch.Tensor], ask: DraftAsk,
                vocab_map: torch.Tensor | None, positions: torch.Tensor) -> tuple[Draft, int]:
    """Draft a chain token by token, the loop every model drafter shares.

    ``logits [B, V_d]``: the draft model's logits after each row's context; ``step(d [B])`` feeds
    the tokens just drafted and returns the next logits. Row b drafts up to ``ask.k[b]`` tokens,
    and stops earlier where ``ask.more`` says so (asked after each token, with the drafter's own
    probability of it). ``positions [B]``: absolute position of each row's first draft token,
    which is also the pass start that keys block rows' draws (``ask.block``; module docstring).
    Returns the draft (with ``confidence``) and the number of ``step`` calls.
    """
    B, V, device = logits.shape[0], ask.vocab_size, logits.device
    K = int(ask.k.max()) if B else 0
    tokens = torch.zeros(B, K, dtype=torch.int64, device=device)
    probs = None if ask.all_greedy else torch.zeros(B, K, V, dtype=ask.dtype, device=device)
    conf = torch.full((B, K), float("nan"), dtype=torch.float64, device=device)
    k, num = ask.k.to(device), torch.zeros(B, dtype=torch.int64, device=device)
    alive, seeds, steps = k > 0, ask.seeds.to(device), 0
    for i in range(K):
        if probs is None:  # greedy: q is the point mass on the argmax
            d = greedy_draft(logits, vocab_map, V)
            if ask.more is not None:
                conf[:, i] = torch.softmax(logits.double(), -1).amax(-1)
        else:
            d, q = sample_draft(to_target_vocab(logits, vocab_map, V, ask.dtype), ask.params, ask.gumbel, seeds,
                                positions + i, block=ask.block, starts=positions)  # [B], [B, V]
            probs[:, i] = q
            conf[:, i] = q.gather(1, d[:, None]).squeeze(1).double()
        tokens[:, i] = d
        num = torch.where(alive, i + 1, num)
        alive &= i + 1 < k
        if ask.more is not None and bool(alive.any()):
            alive &= ask.more(i, conf[:, i]).to(device)
        if not bool(alive.any()):
            break
        logits = step(d)
        steps += 1
    width = int(num.max()) if B else 0
    draft = Draft(tokens[:, :width], None if probs is None else probs[:, :width], num, forwards=steps + (K > 0),
                  confidence=conf[:, :width])
    return draft, steps
