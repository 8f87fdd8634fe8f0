"""One engine step: draft, target pass, verify, commit. Each is a short function.

For a batch of B rows (each has emitted ``n_b`` tokens so far):

1. :func:`draft`: the drafter proposes up to ``k_b`` tokens per row (``k_b`` from the row's K
   policy, capped so that a row never exceeds its ``max_new_tokens``), as a tree per row;
2. :func:`target_pass`: ONE target forward over ``[newest token, draft nodes]`` gives p after
   the root and after every node; a drafter that reads the target's features also gets its
   final hidden states, from the same pass;
3. :func:`verify_step`: the verifier accepts a path per row and emits one more token;
4. :func:`commit`: emitted tokens are appended (EOS, length and stop strings end rows), the
   target's cache keeps the accepted path, the drafter is told what was emitted, and finished
   rows leave the batch.

Every function reads only what it is given: the :class:`Models` (the target, the drafter and what
follows from them) and the :class:`~verispec.engine.state.BatchState` (rows, caches, policies,
cost tables, stats). A row's first token comes from its prefill (:func:`first_tokens`, called by
``SpeculativeDecoder.add``): the pass that reads the prompt also emits, as in HF and vLLM. The
target cache holds every emitted token except each row's newest, which the next pass feeds first
together with the new drafts. Target-only
decoding is the same step with no drafter (zero nodes): the same sampler and the same
counter-based draws, so baselines compare like with like. All randomness is keyed by (row
seed, absolute position): a row produces the same tokens alone or in any batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..draft import Draft
from ..drafters import DraftAsk
from ..sampling import RowParams, check_logits, fit_vocab, logits_to_probs, split_rows
from ..verify import Verification, merge_rows, verify_argmax, verify_argmax_tree, verify_draft
from .requests import Completion, RequestOutput
from .state import BatchState, Row
from .stats import (BONUS, GenerationStats, account, account_copied, account_tree, add_calibration, copied_origin,
                    residual_origin, tree_depths, uncount)
from .text import find_stop, trim_to_text

if TYPE_CHECKING:
    from ..drafters import Drafter
    from ..models import CausalLM

__all__ = ["Models", "step", "first_tokens", "keep_rows", "retire"]


@dataclass(frozen=True)
class Models:
    """What a step runs besides the batch: the target, the drafter (``None``: target-only
    decoding) and what follows from them.

    Attributes:
        dtype: of p and q: the target's float32 / float64, else float32.
        eos_ids: the token ids that end a row.
        reads_features: the drafter reads the target's final hidden states.
        taps: and its states after these decoder layers (hidden ``[B, T, 1 + n, H]``).
    """

    target: CausalLM
    drafter: Drafter | None
    dtype: torch.dtype
    eos_ids: frozenset[int]
    reads_features: bool
    taps: tuple[int, ...] = ()

    @classmethod
    def of(cls, target: CausalLM, drafter: Drafter | None) -> Models:
        """The models of a decoder over ``target`` and ``drafter`` (already bound to it)."""
        dtype = target.model.dtype if target.model.dtype in (torch.float32, torch.float64) else torch.float32
        reads = bool(drafter is not None and drafter.reads_target_features)
        taps = tuple(getattr(drafter, "feature_taps", ())) if reads else ()
        return cls(target, drafter, dtype, frozenset(target.eos_token_ids), reads, taps)


def step(m: Models, state: BatchState) -> list[RequestOutput]:
    """Advance every row of ``state`` by one target pass; what each request got, finished rows retired."""
    t0 = state.step_started = time.perf_counter()
    d = draft(m, state)
    logits, hidden = target_pass(m, state, d)
    out = verify_step(m, state, d, logits)
    outputs = commit(m, state, d, out, hidden)
    state.stats.wall += time.perf_counter() - t0
    return outputs


def draft(m: Models, state: BatchState) -> Draft:
    """The nodes to verify per row (each row's K policy decides how many)."""
    B = len(state.rows)
    if m.drafter is None:
        empty = torch.zeros(B, 0, dtype=torch.int64)
        return Draft(empty, None, torch.zeros(B, dtype=torch.int64))
    room = (state.remaining() - 1).clamp_min(0)  # drafts + the bonus never overshoot max_new_tokens
    scoring = m.drafter.scores_drafts
    policy = state.policy
    k, k_cap = policy.ask(room, state.costs, scoring)
    more = policy.more(state.costs) if policy.any_auto else None
    nodes = policy.nodes(k_cap) if m.drafter.drafts_trees else None
    ask = DraftAsk(k, k_cap, state.params, state.gumbel, state.seeds, m.target.vocab_size, m.dtype, more,
                   nodes=nodes, block=state.block_rows())
    t0 = time.perf_counter()
    proposal = m.drafter.propose(ask)
    state.stats.time_draft += time.perf_counter() - t0
    state.stats.draft_forwards += proposal.forwards
    if proposal.parents is not None:  # a tree: nodes come best first, keep the prefix that pays
        proposal.num_draft = policy.cut_tree(proposal.num_draft.cpu(), proposal.parents, proposal.accept_prob,
                                             state.costs)
        return proposal.cut(int(proposal.num_draft.max()) if B else 0)
    n = torch.minimum(proposal.num_draft.cpu(), k_cap)
    if scoring and proposal.accept_prob is not None:  # lookup tokens: cut where they stop paying
        n = policy.cut(n, proposal.accept_prob, state.costs)[0]
    if policy.any_auto:  # in a batch, greedy and Gumbel rows: one length, the batch's best (their text is the same)
        n = policy.squeeze(n, proposal.accept_prob, proposal.confidence, state.costs)
    # Verify only as wide as the longest draft: a pass of K+1 tokens costs more than one of fewer
    # (a prompt-lookup miss should cost a one-token step, not K+1).
    proposal.num_draft = n
    return proposal.cut(int(n.max()) if B else 0)


def target_pass(m: Models, state: BatchState, d: Draft) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits ``[B, N+1, V_t]`` after the root and after each node (and hidden ``[B, N+1, H]``
    when the drafter reads features, ``[B, N+1, 1 + n, H]`` with taps)."""
    device = m.target.model.device
    feed = torch.cat([state.last[:, None], d.tokens.to(device)], dim=1)  # [B, N+1]
    parents = None
    if not d.is_chain:  # column 0 is the root; node i sits in column i + 1
        parents = torch.cat([torch.full_like(feed[:, :1], -1), d.parent_index().to(device) + 1], dim=1)
    t0 = time.perf_counter()
    out = state.runner.forward(feed, parents=parents, return_hidden=m.reads_features, hidden_taps=m.taps)
    dt = time.perf_counter() - t0
    stats = state.stats
    stats.time_target += dt
    stats.target_forwards += 1
    stats.verify_width_seconds.setdefault(feed.shape[1], []).append(dt)
    return out if m.reads_features else (out, None)


def verify_step(m: Models, state: BatchState, d: Draft, logits: torch.Tensor) -> Verification:
    """p = each row's transform of the target's logits; the verifier's outcome per row."""
    return _verify(m, state, d, logits, state.params, state.seeds, state.positions(), state.methods())


def _verify(m: Models, state: BatchState, d: Draft, logits: torch.Tensor, params: RowParams,
            seeds: torch.Tensor, positions: torch.Tensor, methods: str | list[str]) -> Verification:
    """The verifier's outcome for rows with these sampling ``params``, ``seeds`` and ``positions``
    (of each row's slot 0) given the target's ``logits [B, N+1, V_t]``.

    A greedy row's p is one-hot at the argmax, so only the sampled rows need p (chains or trees): a
    batch that mixes both verifies its greedy rows from the argmax alone and builds
    ``[b, N+1, V]`` for its b sampled rows only (each row's outcome depends on that row alone)."""
    t0 = time.perf_counter()
    device, V = logits.device, m.target.vocab_size

    def greedy(g: torch.Tensor | None) -> Verification:
        return _verify_greedy(d, logits, V) if g is None else _verify_greedy(d.rows(g), logits[g.to(device)], V)

    def sampled(s: torch.Tensor | None) -> Verification:
        if s is None:
            return _verify_sampled(m, d, logits, params, seeds, positions, methods)
        picked = methods if isinstance(methods, str) else [methods[i] for i in s.tolist()]
        return _verify_sampled(m, d.rows(s), logits[s.to(device)], params.rows(s), seeds[s.to(seeds.device)],
                               positions[s], picked)

    def merge(B: int, *parts: tuple[torch.Tensor, Verification]) -> Verification:
        return merge_rows(B, *((i.to(device), v) for i, v in parts), num_draft=d.num_draft.to(device))

    out = split_rows(_argmax_rows(params, d), greedy, sampled, merge)
    state.stats.time_verify += time.perf_counter() - t0
    return out


def _verify_greedy(d: Draft, logits: torch.Tensor, V: int) -> Verification:
    """Greedy rows: only argmax p matters, no ``[B, N+1, V]`` transform (chains or trees)."""
    device = logits.device
    if not d.is_chain:
        return verify_argmax_tree(_argmax_tokens(logits, V), d)
    return verify_argmax(_argmax_tokens(logits, V), d.tokens.to(device), d.num_draft.to(device))


def _verify_sampled(m: Models, d: Draft, logits: torch.Tensor, params: RowParams, seeds: torch.Tensor,
                    positions: torch.Tensor, methods: str | list[str]) -> Verification:
    """Any rows: p = each row's transform of its logits ``[B, N+1, V]``, then the verifier."""
    device = logits.device
    p = logits_to_probs(fit_vocab(logits.to(m.dtype), m.target.vocab_size), params)  # [B, N+1, V]
    return verify_draft(p, d.to(device), seeds=seeds, positions=positions.to(device), method=methods,
                        greedy=params.greedy.to(device), validate=False)


def commit(m: Models, state: BatchState, d: Draft, out: Verification, hidden: torch.Tensor | None
           ) -> list[RequestOutput]:
    """Append what each row emitted, roll the caches back to it, end and retire finished rows."""
    n_draft = d.num_draft.cpu()
    seen = None if d.parents is None else tree_depths(out, d.parents, n_draft)  # a tree's path as a chain
    account(state.stats, out, n_draft, seen)
    if d.parents is not None:
        account_tree(state.stats, out, d.parents, n_draft)
    copied = account_copied(state.stats, out, d.copied, n_draft)  # [B, K]
    emitted = _emit(state.rows, state.stats, out, n_draft if seen is None else seen, copied, m.eos_ids)
    if m.drafter is not None:  # the K policies learn from what was drafted
        if d.parents is not None:
            state.policy.observe_tree(out.accepted_nodes(), d.parents, n_draft, d.accept_prob)
        if m.drafter.drafts_trees and bool(state.policy.tree.any()):  # "tree" rows weigh trees against chains
            state.policy.observe_mode(d.parents is not None, out.num_accepted.cpu() + 1, d.width + 1, d.forwards,
                                      d.fed, state.costs, time.perf_counter() - state.step_started)
        evidence = state.policy.observe(out.num_accepted.cpu(), n_draft, d.confidence)
        if evidence is not None:
            add_calibration(state.stats, evidence)
    _rollback(m.drafter, state, out, emitted, hidden)
    outputs = [_output(m.target.tokenizer, state, row, new) for row, new in zip(state.rows, emitted)]
    retire(m.drafter, state)
    return outputs


def _emit(rows: list[Row], stats: GenerationStats, out: Verification, n_draft: torch.Tensor, copied: torch.Tensor,
          eos_ids: frozenset[int]) -> list[list[int]]:
    """Per row of ``rows`` (the verification's rows), the emitted tokens, cut after an EOS; rows ending by EOS or length get their reason.

    The stats count the whole verification first; tokens then dropped (after an EOS, or by a
    stop string later) are taken back out by their origins, so stats describe only the tokens
    returned.
    """
    n_emit, n_acc, n_dr = out.num_emitted.tolist(), out.num_accepted.tolist(), n_draft.tolist()
    rows_tokens, rows_copied = out.tokens.tolist(), copied.tolist()
    emitted = []
    for b, row in enumerate(rows):
        new = rows_tokens[b][: n_emit[b]]
        # accepted drafts at slots 0..n_acc-1, then the bonus or the residual after a rejection
        why = [copied_origin(s) if rows_copied[b][s] else s for s in range(n_acc[b])]
        why.append(BONUS if n_acc[b] == n_dr[b] else residual_origin(n_acc[b]))
        eos = next((i for i, t in enumerate(new) if t in eos_ids), None)
        if eos is not None:
            uncount(stats, why[eos + 1:])
            new, why = new[: eos + 1], why[: eos + 1]
            row.finish = "eos"
        row.generated += new
        row.origins += why
        if row.finish is None and row.remaining <= 0:
            row.finish = "length"
        emitted.append(new)
    return emitted


def _rollback(drafter: Drafter | None, state: BatchState, out: Verification, emitted: list[list[int]],
              hidden: torch.Tensor | None) -> None:
    """The target keeps the root and the accepted path; the drafter learns what was emitted."""
    device = state.runner.lengths.device
    nodes = out.accepted_nodes().to(device)  # [B, N]
    N = nodes.shape[1]
    if N:  # with no drafts the pass's one column per row stays
        kept = torch.zeros(len(state.rows), N + 1, dtype=torch.bool, device=device)
        kept.scatter_(1, (nodes + 1).clamp_min(0), nodes >= 0)  # node i sits in column i + 1
        kept[:, 0] = True  # the root: the token emitted last step
        state.runner.commit(kept)
    state.last = torch.tensor([r.generated[-1] if r.generated else r.prompt[-1] for r in state.rows],
                              dtype=torch.int64, device=state.last.device)
    if drafter is None:
        return
    features = None
    if hidden is not None:  # the target's features at the columns before each emitted token
        root = torch.zeros(len(state.rows), 1, dtype=torch.int64, device=device)
        cols = torch.cat([root, (nodes + 1).clamp_min(0)], dim=1)  # [B, N+1]
        feats = hidden[torch.arange(len(state.rows), device=device)[:, None], cols]  # [B, N+1, (1 + n,) H]
        features = [feats[b, : len(e)] for b, e in enumerate(emitted)]
    drafter.update(emitted, features)


def _output(tok, state: BatchState, row: Row, new: list[int]) -> RequestOutput:
    """The row's text (if tracked) and stop strings; its output for this step."""
    text = ""
    if row.text is not None:
        piece = row.text.advance(tok, row.generated)
        if row.finish is None and row.text.stop_in(piece):
            new = _cut_at_stop(tok, state, row, new)
        text = row.text.delta() if row.request.stream and row.finish is None else ""
    completion = _complete(tok, row) if row.finish is not None else None
    if completion is not None and row.text is not None and row.request.stream:
        text = row.text.delta() + row.text.flush(completion.text)
    return RequestOutput(row.request_id, new, text, completion)


def _cut_at_stop(tok, state: BatchState, row: Row, new: list[int]) -> list[int]:
    """End the row at its earliest stop string: text cut before it, tokens after it dropped."""
    full = tok.decode(row.generated, skip_special_tokens=True)
    cut = find_stop(full, row.request.stop)
    if cut is None:  # the incremental text and the full decode disagree: trust the full one
        return new
    n_keep = len(trim_to_text(tok, row.generated, full[:cut]))
    dropped = len(row.generated) - n_keep
    uncount(state.stats, row.origins[n_keep:])
    row.generated, row.origins = row.generated[:n_keep], row.origins[:n_keep]
    row.text.text = full[:cut]
    row.finish = "stop"
    return new[: max(0, len(new) - dropped)]


def _complete(tok, row: Row) -> Completion:
    """The finished row: its final text (decoded once, or the stop-cut text)."""
    if row.finish == "stop" and row.text is not None:
        text = row.text.text
    else:
        text = tok.decode(row.generated, skip_special_tokens=True)
    return Completion(row.request_id, list(row.generated), text, row.finish or "length")


def first_tokens(m: Models, state: BatchState, first: int, logits: torch.Tensor) -> list[RequestOutput]:
    """Rows ``first:`` were just prefilled: each emits its first token from the prefill's logits
    after its last prompt token ``[n, V_t]``, drawn exactly as a step with no drafts would draw it
    (the same p, the same draw keyed by seed and position). The pass that reads the prompt thus
    emits, as in HF's ``generate`` and vLLM: target-only decoding of N tokens takes N passes, and
    a row's first drafts are verified with the first token already known."""
    rows = state.rows[first:]
    n = len(rows)
    index = torch.arange(first, first + n)
    d = Draft(torch.zeros(n, 0, dtype=torch.int64), None, torch.zeros(n, dtype=torch.int64))
    positions = torch.tensor([len(r.prompt) for r in rows], dtype=torch.int64)
    names = [r.method for r in rows]
    methods = names[0] if len(set(names)) == 1 else names
    out = _verify(m, state, d, logits[:, None], state.params.rows(index), state.seeds[index.to(state.seeds.device)],
                  positions, methods)
    account(state.stats, out, d.num_draft)  # a pass of the row that drafted nothing
    emitted = _emit(rows, state.stats, out, d.num_draft, torch.zeros(n, 0, dtype=torch.bool), m.eos_ids)
    state.last[first:] = torch.tensor([r.generated[-1] for r in rows], dtype=torch.int64, device=state.last.device)
    return [_output(m.target.tokenizer, state, row, new) for row, new in zip(rows, emitted)]


def retire(drafter: Drafter | None, state: BatchState) -> None:
    """Finished rows leave the batch: the target's cache, the drafter and the engine's tensors."""
    keep = [b for b, r in enumerate(state.rows) if r.finish is None]
    if len(keep) < len(state.rows):
        keep_rows(drafter, state, keep)


def keep_rows(drafter: Drafter | None, state: BatchState, keep: list[int]) -> None:
    """Keep only the rows ``keep`` of the batch: in the target's cache, the drafter and the state.

    The last kept rows move into the places of the dropped ones (rows are not kept in admission
    order), so the caches copy only the moved rows, not the whole batch."""
    keep = fill_holes(keep, len(state.rows))
    index = torch.tensor(keep, dtype=torch.int64)
    state.runner.select(index)
    if drafter is not None:
        drafter.keep(index)
    state.keep(keep)


def fill_holes(keep: list[int], B: int) -> list[int]:
    """The rows ``keep`` (ascending, of ``B``) in the order that moves the fewest: row i stays at
    i when kept; the places of dropped rows below ``len(keep)`` take the kept rows above it."""
    n = len(keep)
    kept = set(keep)
    order = list(range(n))
    holes = [i for i in range(n) if i not in kept]
    movers = [j for j in range(n, B) if j in kept]
    for h, m in zip(holes, movers):
        order[h] = m
    return order


def _argmax_rows(params: RowParams, d: Draft) -> torch.Tensor:
    """``[B]`` bool: the rows verified from the argmax alone, the greedy rows (temperature 0: p is
    one-hot at the argmax, whatever the method), chains or trees (tests force the general path here)."""
    return params.greedy


def _argmax_tokens(logits: torch.Tensor, V: int) -> torch.Tensor:
    """``[B, N+1]`` argmax of the logits over the engine's first V ids (the lowest id on ties, as
    :func:`verispec.logits_to_probs` takes it); NaN, +inf or an all -inf row raise as there.
    One read of the logits: ``max`` propagates NaN, so only the row maxima need checking."""
    top, index = logits[..., :V].max(-1)  # [B, N+1] each: the first maximum's value and id
    check_logits(logits[..., :V], top=top)
    return index

