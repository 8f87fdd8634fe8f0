"""The engine: :class:`SpeculativeDecoder`, a batch of requests advanced one step at a time.

``start(requests) -> state``, then ``step(state) -> outputs`` until the state is empty;
``add(state, requests)`` and ``cancel(state, request_id)`` between steps change the batch
(continuous batching). ``generate`` and ``stream`` are thin loops over those. What a step does
is in :mod:`verispec.engine.step`.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Sequence

import numpy as np
import torch

from ..drafters import Drafter
from ..models import CausalLM, load_causal_lm
from ..rng import random_seeds
from ..kv import KVRunner, prefill
from ..sampling import RowParams, SamplingParams
from ..verify import VERIFY_METHODS
from .costs import CostTables, PassCosts, load_costs, measure_pass_costs, reference_costs
from .kpolicy import ADAPTIVE, KPolicy, KRows, ModeMemory, check_k
from .requests import Completion, Request, RequestOutput, int64_seeds, int_list
from .state import BatchState, Row
from .stats import GenerationResult, GenerationStats
from .step import Models, first_tokens, keep_rows, retire
from .step import step as _step
from .text import RowText

__all__ = ["SpeculativeDecoder", "TextDelta", "GenerationStream"]


class SpeculativeDecoder:
    """Exact speculative decoding over a HuggingFace target and a drafter.

    Args:
        target: a :class:`CausalLM` or anything :func:`load_causal_lm` accepts.
        drafter: a :class:`~verispec.drafters.Drafter`, or ``None`` for target-only decoding.
        k: default draft-length policy of a request: an int (fixed), ``"heuristic"`` (HF's: +2
            after a fully accepted draft, -1 otherwise) or ``"auto"`` (maximise expected tokens
            per second: draft while the next token's calibrated chance of acceptance pays for
            its draft step and the wider verify pass, possibly nothing; see
            :mod:`verispec.engine.kpolicy`). Draft lengths never change the output's
            distribution; they change which text an "exact"-method sampled run draws for a
            seed, so "auto" decides a sampled "exact" row's draft lengths from the request's own
            history and a cost table that involves no timing (see ``costs``): same seed, same
            text, in any batch, in any process, under any load.
        method: default method of a request: ``"exact"`` (rejection sampling, token by token),
            ``"gumbel"`` (drafter-invariant) or ``"block"`` (block verification of the draft
            chain, Sun et al. 2025: exact like "exact", never fewer tokens per pass in
            expectation; greedy rows are greedy; trees and point-mass drafts:
            :mod:`verispec.verify.block`).
        max_k: upper bound for the adaptive policies.
        costs: the pass and draft-step costs the ``"auto"`` policy weighs. Default: greedy and
            Gumbel rows (whose text does not depend on draft lengths) read a table measured on
            this machine when the first ``"auto"`` row joins an empty batch
            (:func:`~verispec.engine.costs.measure_pass_costs`, kept in the costs file; a decoder
            whose rows all have a fixed K times nothing), seeded sampled "exact" rows the
            timing-free reference table (:func:`~verispec.engine.costs.reference_costs`). A
            :class:`PassCosts`, or the path of a JSON file holding one
            (:func:`~verispec.engine.costs.load_costs`), pins the table every row reads.
    """

    def __init__(self, target: CausalLM | str, drafter: Drafter | None = None, *, k: KPolicy = 4,
                 method: str = "exact", max_k: int = 12, costs: PassCosts | str | os.PathLike | None = None) -> None:
        target = target if isinstance(target, CausalLM) else load_causal_lm(target)
        if method not in VERIFY_METHODS:
            raise ValueError(f"method must be one of {VERIFY_METHODS}, got {method!r}")
        self.k = check_k(k)
        if isinstance(max_k, bool) or not isinstance(max_k, int) or not 1 <= max_k <= 64:
            raise ValueError(f"max_k must be an int in [1, 64], got {max_k!r}")
        self.method, self.max_k = method, max_k
        if drafter is not None:
            drafter.bind(target)
        self.models = Models.of(target, drafter)
        self._epoch = 0
        self._ids = itertools.count()
        self._modes = ModeMemory()  # what trees and chains gave earlier requests' measured "tree" rows
        if isinstance(costs, (str, os.PathLike)):
            costs = load_costs(costs, "costs")
        elif costs is not None and not isinstance(costs, PassCosts):
            raise TypeError(f"costs must be a PassCosts, the path of a costs file or None, got {type(costs).__name__}")
        self.pinned_costs = costs is not None
        self._costs = costs
        self._tables: CostTables | None = None

    @property
    def target(self) -> CausalLM:
        """The target model."""
        return self.models.target

    @property
    def drafter(self) -> Drafter | None:
        """The drafter (``None``: target-only decoding)."""
        return self.models.drafter

    @property
    def costs(self) -> PassCosts:
        """The table greedy and Gumbel rows weigh: pinned, or measured on first use (see ``costs``
        above)."""
        if self._costs is None:
            self._costs = measure_pass_costs(self.target, self.drafter, self.max_k + 1)
        return self._costs

    @property
    def cost_tables(self) -> CostTables:
        """Both tables the K policy reads: :attr:`costs`, and the one sampled "exact" rows read
        (the pinned table, else the timing-free :func:`~verispec.engine.costs.reference_costs`)."""
        if self._tables is None:
            fixed = self._costs if self.pinned_costs else reference_costs(self.target, self.drafter, self.max_k + 2)
            self._tables = CostTables(self.costs, fixed)
        return self._tables

    # -- the step API ---------------------------------------------------------------------------

    def start(self, requests: Sequence[Request] = ()) -> BatchState:
        """A new batch holding ``requests`` (prefilled). The decoder runs one batch at a time:
        a state from an earlier ``start`` can no longer be stepped."""
        self._epoch += 1
        device = self.target.model.device
        # No cost table yet: only "auto" rows read one, and the first to join times it (see add).
        state = BatchState([], KVRunner(self.target.model, 0), torch.zeros(0, dtype=torch.int64, device=device),
                           torch.zeros(0, dtype=torch.int64, device=device), RowParams.of([]),
                           torch.zeros(0, dtype=torch.bool), KRows(self.max_k, self._modes), _UNTIMED,
                           GenerationStats(), self._epoch)
        if self.drafter is not None:
            self.drafter.keep(torch.zeros(0, dtype=torch.int64))
        if requests:
            self.add(state, requests)
        return state

    def add(self, state: BatchState, requests: Sequence[Request]) -> None:
        """Admit ``requests`` to a running batch: validated, encoded, and their prompts prefilled.
        The prefill emits each row's first token; the next :meth:`step` returns it (a row that
        this token finishes has then left the batch)."""
        self._check_current(state)
        t0 = time.perf_counter()
        rows = [self._row(r, state) for r in requests]
        ids = [r.request_id for r in rows]
        if len(set(ids)) != len(ids):
            raise ValueError(f"request ids must be unique within a batch, got {ids}")
        if not rows:
            return
        if state.costs is _UNTIMED and self.drafter is not None \
                and any((r.k if r.k is not None else self.k) in ADAPTIVE for r in requests):
            state.costs = self._tables_for(state)
        first = len(state.rows)
        logits, features = self._prefill(state, [r.prompt for r in rows])
        self._append(state, rows, requests)
        state.pending += first_tokens(self.models, state, first, logits)
        if self.drafter is not None:  # each row's context: its prompt and first token
            self.drafter.add([r.prompt + r.generated for r in rows], features)
        retire(self.drafter, state)
        dt = time.perf_counter() - t0
        state.stats.time_prefill += dt
        state.stats.wall += dt

    def cancel(self, state: BatchState, request_id: Hashable) -> None:
        """Drop a running request from the batch (its tokens so far are discarded)."""
        self._check_current(state)
        ids = [r.request_id for r in state.rows]
        if request_id not in ids:
            raise KeyError(f"request_id {request_id!r} is not running in this batch")
        state.pending = [o for o in state.pending if o.request_id != request_id]
        keep_rows(self.drafter, state, [b for b, i in enumerate(ids) if i != request_id])

    def step(self, state: BatchState) -> list[RequestOutput]:
        """One target pass for every running request: what each got (one output per request,
        its first token included when it was admitted since the last step); finished ones leave."""
        self._check_current(state)
        pending, state.pending = state.pending, []
        outputs = merge_outputs(pending, _step(self.models, state) if state.rows else [])
        for o in outputs:
            if o.completion is not None:
                state.stats.emitted += len(o.completion.token_ids)
        return outputs

    # -- loops over the step --------------------------------------------------------------------

    def generate(
        self,
        prompts: str | Sequence[str | Sequence[int]],
        max_new_tokens: int = 128,
        sampling: SamplingParams | None = None,
        *,
        stop: Sequence[str] | None = None,
        stream: bool = False,
        chat: bool = False,
        seeds: Sequence[int] | None = None,
        max_batch: int | None = None,
    ) -> GenerationResult | GenerationStream:
        """Generate continuations of ``prompts``.

        Args:
            prompts: a string, or a list of strings or token-id lists.
            max_new_tokens: exactly this many tokens per row unless EOS or a stop string ends it.
            sampling: the sampling transform; default ``SamplingParams()`` (temperature 1).
            stop: strings that end a row; the text is cut before the stop string.
            stream: return a :class:`GenerationStream` of :class:`TextDelta` (per prompt, as its
                tokens are accepted; any number of prompts) instead of the result; the result
                is the stream's ``result`` once it is exhausted.
            chat: apply the tokenizer's chat template to string prompts.
            seeds: one int64 seed per row (default: ``sampling.seed`` for every row, or fresh
                seeds from torch's global generator).
            max_batch: run at most this many prompts at once, admitting the rest as rows finish
                (see :meth:`run`); default all at once. Outputs do not depend on it.
        """
        requests = self.requests(prompts, max_new_tokens, sampling, stop=stop, chat=chat, seeds=seeds,
                                 stream=stream)
        check_max_batch(max_batch)
        if stream:
            return GenerationStream(self, requests, max_batch)
        state = self.start()
        done = {o.request_id: o.completion for o in self.run(requests, max_batch=max_batch, state=state)
                if o.completion is not None}
        return _result([done[r.request_id] for r in requests], state.stats)

    def run(self, requests: Iterable[Request], *, max_batch: int | None = None,
            state: BatchState | None = None) -> Iterator[RequestOutput]:
        """Step until every request is done, with at most ``max_batch`` running at once
        (continuous batching: waiting requests are admitted in order as rows finish, in groups of
        at least ``max_batch // 8`` so their prefill is not one pass per step). Yields every
        step's outputs; ``state`` (from :meth:`start`) lets the caller read its ``stats``.

        ``requests`` may be a lazy iterable: it is read only as far as admission needs.
        """
        cap = check_max_batch(max_batch)
        state = self.start() if state is None else state
        pending = iter(requests)
        waiting: deque[Request] = deque()
        exhausted = False
        while True:
            free = cap - len(state.rows)
            while not exhausted and len(waiting) < free:
                nxt = next(pending, None)
                exhausted = nxt is None
                if nxt is not None:
                    waiting.append(nxt)
            if waiting and (not state.rows or free >= min(len(waiting), max(1, cap // 8))):
                self.add(state, [waiting.popleft() for _ in range(min(free, len(waiting)))])
            if not len(state):
                return
            yield from self.step(state)

    def requests(self, prompts: str | Sequence[str | Sequence[int]], max_new_tokens: int = 128,
                 sampling: SamplingParams | None = None, *, stop: Sequence[str] | None = None, chat: bool = False,
                 seeds: Sequence[int] | None = None, stream: bool = False) -> list[Request]:
        """:class:`Request` objects for ``generate``'s arguments (validated; ids 0..B-1)."""
        sampling = sampling or SamplingParams()
        if not isinstance(sampling, SamplingParams):
            raise TypeError("sampling must be a SamplingParams")
        single = isinstance(prompts, str)
        ids = self.encode([prompts] if single else prompts, chat=chat)
        B = len(ids)
        if seeds is not None:
            seed_list = int64_seeds(seeds)
            if len(seed_list) != B:
                raise ValueError(f"seeds has {len(seed_list)} entries for {B} prompts")
        elif sampling.seed is not None:
            seed_list = [sampling.seed] * B
        else:
            seed_list = random_seeds(B).tolist()
        return [Request(p, max_new_tokens, _with_seed(sampling, s), stop or (), stream=stream, request_id=i)
                for i, (p, s) in enumerate(zip(ids, seed_list))]

    def encode(self, prompts: Sequence[str | Sequence[int]], chat: bool = False) -> list[list[int]]:
        """Token ids for each prompt (strings go through the tokenizer, with the chat template if ``chat``).

        A prompt is a ``str`` or its token ids: a list/tuple of ints or a 1-D integer tensor or
        array. Anything else (bytes, floats, bools, nested lists) raises ``TypeError`` naming it.
        """
        tok = self.target.tokenizer
        if isinstance(prompts, (bytes, bytearray)):
            raise TypeError("prompts is bytes: decode it to str first (or pass token ids)")
        if isinstance(prompts, str) or not isinstance(prompts, Sequence):
            raise TypeError(f"prompts must be a list of strings or of token-id lists, got {type(prompts).__name__}")
        if len(prompts) == 0:
            raise ValueError("prompts is empty")
        out = []
        for i, p in enumerate(prompts):
            if isinstance(p, str):
                if chat:
                    if not getattr(tok, "chat_template", None):
                        raise ValueError(f"chat=True but the tokenizer of {self.target.name!r} has no chat template")
                    ids = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                                  tokenize=True, return_dict=False)
                    ids = list(ids["input_ids"]) if isinstance(ids, dict) else list(ids)
                else:
                    ids = tok(p, add_special_tokens=True)["input_ids"]
            else:
                if not isinstance(p, (Sequence, torch.Tensor, np.ndarray)):
                    raise TypeError(f"prompts[{i}] must be a string or a list of token ids, got {type(p).__name__}")
                ids = int_list(p, f"prompts[{i}]")
                bad = [t for t in ids if not 0 <= t < self.target.vocab_size]
                if bad:
                    raise ValueError(f"prompts[{i}] has token ids outside [0, {self.target.vocab_size}): {bad[:5]}")
            if len(ids) == 0:
                raise ValueError(f"prompts[{i}] is empty (no tokens to condition on)")
            out.append(ids)
        return out

    # -- internals ------------------------------------------------------------------------------

    def _check_current(self, state: BatchState) -> None:
        if not isinstance(state, BatchState):
            raise TypeError(f"state must be a BatchState from start(), got {type(state).__name__}")
        if state.epoch != self._epoch:
            raise RuntimeError("this batch state is stale: the decoder has started another batch since")

    def _row(self, request: Request, state: BatchState) -> Row:
        """A validated row for ``request`` (its prompt encoded, its id fresh and unique)."""
        if not isinstance(request, Request):
            raise TypeError(f"requests must be Request objects, got {type(request).__name__}")
        r = request
        if not isinstance(r.sampling, SamplingParams):
            raise TypeError(f"request {r.request_id!r}: sampling must be a SamplingParams")
        if isinstance(r.max_new_tokens, bool) or not isinstance(r.max_new_tokens, int) or r.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {r.max_new_tokens!r}")
        stop = r.stop
        if isinstance(stop, str) or not isinstance(stop, Sequence) or any(not isinstance(s, str) or not s for s in stop):
            raise ValueError(f"stop must be a list of non-empty strings, got {stop!r}")
        method = r.method or self.method
        if method not in VERIFY_METHODS:
            raise ValueError(f"request {r.request_id!r}: method must be one of {VERIFY_METHODS}, got {method!r}")
        if r.k is not None:
            check_k(r.k)
        prompt = self.encode([r.prompt], chat=r.chat)[0]
        limit = getattr(self.target.model.config, "max_position_embeddings", None)
        if limit is not None and len(prompt) + r.max_new_tokens > limit:
            raise ValueError(f"prompt of request {r.request_id!r} has {len(prompt)} tokens; with max_new_tokens="
                             f"{r.max_new_tokens} it exceeds the model's context of {limit} tokens")
        rid = r.request_id if r.request_id is not None else f"req-{next(self._ids)}"
        if rid in {row.request_id for row in state.rows}:
            raise ValueError(f"request_id {rid!r} is already running in this batch")
        text = RowText(tuple(stop)) if stop or r.stream else None
        return Row(r, rid, prompt, method, text=text)

    def _tables_for(self, state: BatchState) -> CostTables:
        """The cost tables of a batch whose first "auto" row joins now. Timing them runs the drafter
        on a dummy request, so that happens only while the batch holds no row (or was done or
        pinned before); an "auto" row joining running rows of fixed K before anything was timed
        reads the timing-free table for every row (which changes no output: see ``costs``)."""
        if not state.rows or self._tables is not None or self.pinned_costs:
            return self.cost_tables
        fixed = reference_costs(self.target, self.drafter, self.max_k + 2)
        return CostTables(fixed, fixed)

    def _prefill(self, state: BatchState, prompts: list[list[int]]) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Run the new prompts through the target on runners of their own (no padding) and append
        their rows to the batch's cache: each prompt's next-token logits ``[n, V_t]``, and its
        features if the drafter reads them."""
        new = prefill(self.target.model, prompts, return_hidden=self.models.reads_features,
                      hidden_taps=self.models.taps)
        state.runner.extend(new.runner)
        return new.logits, new.hidden

    def _append(self, state: BatchState, rows: list[Row], requests: Sequence[Request]) -> None:
        device = state.last.device
        seeds = [r.sampling.seed if r.sampling.seed is not None else int(random_seeds(1)[0]) for r in requests]
        state.rows += rows
        state.last = torch.cat([state.last, torch.zeros(len(rows), dtype=torch.int64, device=device)])  # first_tokens sets it
        state.seeds = torch.cat([state.seeds, torch.tensor(seeds, dtype=torch.int64, device=device)])
        params = RowParams.of([r.sampling for r in requests])
        gumbel = torch.tensor([r.method == "gumbel" for r in rows])
        state.params = state.params.cat(params)
        state.gumbel = torch.cat([state.gumbel, gumbel])
        # seeded sampled "exact" rows (text depends on draft lengths) read the timing-free cost table;
        # an unseeded one promises no text, so it weighs the measured costs and drafts less under load
        seeded = torch.tensor([r.sampling.seed is not None for r in requests])
        state.policy.add([r.k if r.k is not None else self.k for r in requests],
                         fixed=~params.greedy.cpu() & ~gumbel & seeded)

    def target_step_seconds(self, context: Sequence[int], repeats: int = 3) -> float:
        """Median seconds of one-token target forwards after ``context`` (for speedup estimates)."""
        runner = KVRunner(self.target.model, 1)
        device = self.target.model.device
        ids = torch.tensor([list(context)], dtype=torch.int64, device=device)
        runner.forward(ids, logits_to_keep=1)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            runner.forward(ids[:, -1:], logits_to_keep=1)
            times.append(time.perf_counter() - t0)
            runner.truncate(runner.lengths - 1)
        return sorted(times)[len(times) // 2]



class TextDelta:
    """New text of one prompt of a streamed ``generate`` (``index``: the prompt's position);
    ``finish_reason`` is set on the prompt's last delta."""

    __slots__ = ("index", "text", "finish_reason")

    def __init__(self, index: int, text: str, finish_reason: str | None = None) -> None:
        self.index, self.text, self.finish_reason = index, text, finish_reason

    def __repr__(self) -> str:
        return f"TextDelta(index={self.index}, text={self.text!r}, finish_reason={self.finish_reason!r})"


class GenerationStream:
    """Iterates :class:`TextDelta` pieces as a streamed ``generate`` runs; ``result`` holds the
    :class:`GenerationResult` once the iteration is over."""

    def __init__(self, decoder: SpeculativeDecoder, requests: list[Request], max_batch: int | None = None) -> None:
        self._decoder, self._requests, self._max_batch = decoder, requests, max_batch
        self.result: GenerationResult | None = None

    def __iter__(self) -> Iterator[TextDelta]:
        dec = self._decoder
        state = dec.start()
        done: dict[Hashable, Completion] = {}
        for o in dec.run(self._requests, max_batch=self._max_batch, state=state):
            reason = o.completion.finish_reason if o.completion is not None else None
            if o.text or reason is not None:
                yield TextDelta(int(o.request_id), o.text, reason)
            if o.completion is not None:
                done[o.request_id] = o.completion
        self.result = _result([done[r.request_id] for r in self._requests], state.stats)


#: The cost tables of a batch no row of which reads one (fixed K or heuristic rows, or no drafter):
#: nothing is timed for it.
_UNTIMED = CostTables.of(PassCosts())


def check_max_batch(max_batch: int | None) -> int:
    """``max_batch`` validated (an int >= 1, or ``None`` for no limit) as a row cap."""
    if max_batch is None:
        return 1 << 62
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max_batch must be an int >= 1 or None, got {max_batch!r}")
    return max_batch


def merge_outputs(first: list[RequestOutput], later: list[RequestOutput]) -> list[RequestOutput]:
    """One output per request: a row's first token (emitted at its prefill, in ``first``) joins
    what its first step emitted (in ``later``)."""
    early = {o.request_id: o for o in first}
    merged = []
    for o in later:
        f = early.pop(o.request_id, None)
        merged.append(o if f is None else RequestOutput(o.request_id, f.token_ids + o.token_ids, f.text + o.text,
                                                        o.completion))
    return list(early.values()) + merged


def _result(completions: list[Completion], stats: GenerationStats) -> GenerationResult:
    return GenerationResult([c.text for c in completions], [c.token_ids for c in completions],
                            [c.finish_reason for c in completions], stats)


def _with_seed(sampling: SamplingParams, seed: int) -> SamplingParams:
    from dataclasses import replace

    return replace(sampling, seed=seed)
