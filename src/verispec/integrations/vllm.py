"""verispec's prompt lookup, with its scored matches and its per-request cost cut, as a vLLM proposer.

vLLM (0.32+) loads a proposer class by dotted path::

    LLM(model, speculative_config={"method": "custom_class",
                                   "model": "verispec.integrations.vllm.VerispecLookupProposer",
                                   "num_speculative_tokens": 8})

and each step, in the worker that owns the model, after the sampled tokens are booked, calls
``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=...)``: the tokens
each request emitted this step, each request's length, and the runner's token buffer
``[max_num_reqs, max_model_len]`` (row i = request i of the batch: prompt and output so far).
It returns one list of draft tokens per request; an empty list means a plain step. vLLM verifies
the drafts with its own rejection sampler, as point masses (exact: the output is the target's).

What runs per request, as in verispec's own engine with ``--draft ngram --k auto``:

* the longest earlier match of the context's tail (:meth:`PromptLookupDrafter.match`), up to K
  tokens of its continuation, each scored with the acceptance the match length it extends
  predicts (the prior, updated with what the target then emitted for this request);
* the cost cut (:meth:`KRows.cut`): the draft length that maximises expected tokens per second of
  the step, down to nothing where no draft pays.

State is kept per vLLM request id. vLLM's custom-class call passes no request ids, so the proposer
reads them from the model runner that built it (``runner.input_batch.req_ids``, in the order of the
rows; found once, from the constructor's caller), or takes ``req_ids=`` from a caller that passes
them. Requests join (fresh state), leave (their state is parked, up to :data:`PARKED` of them) and,
preempted, come back with their calibration (a parked request whose tokens no longer start as
they did is a new one). Drafts proposed before a preemption are never scored against tokens that
do not follow them.

The cost table: vLLM's own step cost, measured inside vLLM while it serves (:class:`StepClock`):
the wall time between two consecutive ``propose`` calls is one engine step (scheduling, the
target pass, rejection sampling, booking, drafting), and the tokens it fed are known (each row's
1 + the drafts proposed for it). Steps where a request joined or left (a prefill, or a finished
row) are not counted. Until a width has :data:`MIN_SAMPLES` steps it is priced by verispec's
reference model (a w-token pass costs 1 + 0.05 (w - 1) one-token passes) from the nearest
measured width, and the first steps explore: a draft is shortened so that the step feeds the
narrowest width below the chosen one not measured yet (shorter drafts only: the text stays the
target's). Why not at start-up: the plug-in gets a ``VllmConfig`` at construction and the
model in ``load_model(model)``, before the KV cache exists; a vLLM model's attention runs only in
the runner's forward context (attention metadata, slot mappings, KV cache), which the plug-in API
does not give a proposer, so a proposer cannot time a pass before serving. ``$VERISPEC_VLLM_COSTS``
(a verispec cost file, ``{"verify": {"1": s1, ...}}``, as ``--costs`` reads) pins a table instead;
``$VERISPEC_VLLM_STATS`` (a path) has the proposer write its counters and measured costs there.

In a batch of B requests vLLM packs each row's drafts without padding: a pass feeds
sum(1 + n_i) tokens. Each row is cut against the marginal curve c(B - 1 + w) / c(B) (the others at
one token each), not against the longest draft (verispec's own engine pads to it and cuts the
batch jointly; vLLM does not pad).

Imports: torch, numpy and verispec's drafters and engine (transformers among them), all within
what vLLM's own pins install; nothing of verispec's CLI, server or benchmark.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np
import torch

from ..drafters.base import DraftAsk
from ..drafters.drawing import agreement
from ..drafters.lookup import PromptLookupDrafter
from ..engine.costs import REFERENCE_VERIFY_SLOPE, PassCosts, load_costs
from ..engine.kpolicy import KRows

__all__ = ["VerispecLookupProposer", "StepClock", "PROPOSER", "PARKED", "MIN_SAMPLES", "COSTS_ENV", "STATS_ENV"]

PROPOSER = "verispec.integrations.vllm.VerispecLookupProposer"  # the dotted path vLLM loads
PARKED = 4096  # states of requests absent from the batch (finished or preempted) kept, oldest dropped first
MIN_SAMPLES = 3  # steps of a width before its median replaces the reference model
_WINDOW = 32  # most recent steps kept per width
_PREFIX = 16  # leading tokens that identify a request's state (a reused id with other tokens starts afresh)
COSTS_ENV = "VERISPEC_VLLM_COSTS"
STATS_ENV = "VERISPEC_VLLM_STATS"  # a path: the proposer writes its counters and measured step costs there
_STATS_EVERY = 16  # steps between writes


class StepClock:
    """Seconds of a vLLM engine step per tokens fed (all rows together), measured between
    consecutive ``propose`` calls; the median of the last :data:`_WINDOW` steps per width."""

    def __init__(self) -> None:
        self.samples: dict[int, deque[float]] = {}
        self._last: tuple[float, tuple[str, ...], int] | None = None  # (time, ids, tokens fed) of the last call

    def tick(self, now: float, ids: tuple[str, ...], ready: bool, fed_next: int) -> None:
        """A ``propose`` call at ``now`` for requests ``ids``: the step that just ran counts if the
        same requests ran it (``ready``: each emitted tokens, none joined nor left) and the last
        call said what it fed; ``fed_next``: tokens the next step feeds (rows + drafts)."""
        last = self._last
        if last is not None and ready and last[1] == ids and last[2] > 0:
            dt = now - last[0]
            med = self.seconds(last[2])
            if dt > 0 and (med is None or dt < 5 * med):  # an idle gap between calls is not a step
                self.samples.setdefault(last[2], deque(maxlen=_WINDOW)).append(dt)
        self._last = (now, ids, fed_next)

    def forget_last(self) -> None:
        self._last = None

    def seconds(self, tokens: int) -> float | None:
        got = self.samples.get(tokens)
        if got is None or len(got) < MIN_SAMPLES:
            return None
        return float(np.median(np.fromiter(got, dtype=np.float64)))

    def curve(self, rows: int, max_w: int) -> PassCosts:
        """One row's cost of widths 1..``max_w`` in a batch of ``rows`` rows (the others at one
        token): c(rows - 1 + w), measured where :data:`MIN_SAMPLES` steps ran, else the reference
        model from the nearest measured width (relative units if none is measured)."""
        measured = {w: s for w in range(1, max_w + 1) if (s := self.seconds(rows - 1 + w)) is not None}
        ref = [1.0 + REFERENCE_VERIFY_SLOPE * (w - 1) for w in range(max_w + 1)]
        verify = {}
        for w in range(1, max_w + 1):
            if w in measured:
                verify[w] = measured[w]
            elif measured:
                a = min(measured, key=lambda x: (abs(x - w), -x))  # nearest measured, the wider on a tie
                verify[w] = measured[a] * ref[w] / ref[a]
            else:
                verify[w] = ref[w]
        return PassCosts(verify)

    def to_json(self) -> dict:
        """The measured medians, for logs and the benchmark: ``{"tokens fed": seconds}``."""
        return {str(t): s for t in sorted(self.samples) if (s := self.seconds(t)) is not None}


@dataclass
class _State:
    """One request's lookup calibration (as one row of :class:`PromptLookupDrafter`) and the
    proposal awaiting its score."""

    prefix: tuple[int, ...]
    tried: torch.Tensor
    passed: torch.Tensor
    pending: tuple[list[int], int] | None = None  # (tokens found, match length)
    at: int = -1  # the context length the pending proposal follows
    draft: list[int] = field(default_factory=list)  # what was proposed to vLLM (after the cut)


class VerispecLookupProposer:
    """A vLLM proposer: verispec's prompt lookup with the per-request cost cut (see the module).

    ``vllm_config`` needs ``speculative_config.num_speculative_tokens`` (K, the longest draft)
    and ``model_config.max_model_len``. ``costs``: a pinned :class:`PassCosts` (default
    ``$VERISPEC_VLLM_COSTS``, else measured in vLLM as it runs). ``clock``: the time source.
    """

    def __init__(self, vllm_config, *, costs: PassCosts | None = None, clock=time.perf_counter,
                 max_ngram: int = 32) -> None:
        spec = getattr(vllm_config, "speculative_config", None)
        k = getattr(spec, "num_speculative_tokens", None)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
            raise ValueError(f"speculative_config.num_speculative_tokens must be an int in [1, 64], got {k!r}")
        self.max_k = k
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        if costs is None and os.environ.get(COSTS_ENV):
            costs = load_costs(os.environ[COSTS_ENV], f"${COSTS_ENV}")
        self.pinned = costs
        self.clock = StepClock()
        self._now = clock
        self.lookup = PromptLookupDrafter(max_ngram=max_ngram)
        self.states: dict[str, _State] = {}
        self.parked: OrderedDict[str, _State] = OrderedDict()
        self.stats = {"steps": 0, "drafted": 0, "rows": 0, "empty": 0, "found": 0, "explored": 0}
        self._runner = _find_runner()
        self._stats_path = os.environ.get(STATS_ENV) or None

    # vLLM's CPU runner calls load_model(model) on every drafter; prompt lookup needs no model.
    def load_model(self, *args, **kwargs) -> None:
        return None

    def request_ids(self, batch: int) -> list[str]:
        """The vLLM request ids of the first ``batch`` rows, read from the model runner."""
        runner = self._runner or _find_runner()
        ids = getattr(getattr(runner, "input_batch", None), "req_ids", None)
        if ids is None:
            raise RuntimeError("VerispecLookupProposer: no vLLM model runner found to read request ids from; "
                               "pass req_ids= to propose (vLLM's custom_class call passes none)")
        self._runner = runner
        ids = list(ids[:batch])
        if len(ids) != batch or any(not isinstance(i, str) for i in ids):
            raise RuntimeError(f"VerispecLookupProposer: the runner's input_batch holds {ids!r} for {batch} rows")
        return ids

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray,
                token_ids_cpu: np.ndarray, slot_mappings=None, req_ids: list[str] | None = None) -> list[list[int]]:
        """Draft tokens per row (see the module). ``req_ids``: the rows' request ids (default:
        the runner's)."""
        now = self._now()
        B = len(sampled_token_ids)
        ids = list(req_ids) if req_ids is not None else self.request_ids(B)
        if len(ids) != B:
            raise ValueError(f"req_ids: {len(ids)} ids for {B} rows")
        self._leave(set(ids))
        states, contexts, ready, joined = [], [], [], False
        for b, rid in enumerate(ids):
            n = int(num_tokens_no_spec[b])
            new = [int(t) for t in sampled_token_ids[b]]
            ctx = token_ids_cpu[b, :n].tolist()
            st, fresh = self._state(rid, ctx)
            joined |= fresh
            if st.pending is not None and new and st.at == n - len(new):  # score the last proposal
                found, m = st.pending
                passed, tried = agreement(found, new)
                i = self.lookup._buckets(m, tried)
                st.tried.index_add_(0, i, torch.ones(tried, dtype=torch.float64))
                st.passed.index_add_(0, i[:passed], torch.ones(passed, dtype=torch.float64))
            st.pending, st.draft = None, []
            states.append(st)
            contexts.append(ctx)
            ready.append(bool(new) and n < self.max_model_len)
        drafts = self._draft(states, contexts, ready)
        fed = sum(1 + len(d) for d in drafts)
        # a step counts when the same rows ran it, each decoding (no prefill chunk, no joiner)
        self.clock.tick(now, tuple(ids), all(ready) and not joined, fed if all(ready) else 0)
        self.stats["steps"] += 1
        self.stats["rows"] += B
        self.stats["drafted"] += sum(map(len, drafts))
        self.stats["empty"] += sum(1 for r, d in zip(ready, drafts) if r and not d)
        if self._stats_path and self.stats["steps"] % _STATS_EVERY == 0:
            self.write_stats(self._stats_path)
        return drafts

    def write_stats(self, path: str) -> None:
        """Counters and the measured step costs as JSON (atomically), for logs and benchmarks."""
        data = {"proposer": PROPOSER, "max_k": self.max_k, "pinned_costs": self.pinned is not None,
                **self.stats, "step_seconds": self.clock.to_json()}
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)

    def costs(self, rows: int) -> PassCosts:
        """The table a row of a batch of ``rows`` rows is cut against."""
        return self.pinned if self.pinned is not None else self.clock.curve(rows, self.max_k + 1)

    # -- internals -------------------------------------------------------------------------------

    def _draft(self, states: list[_State], contexts: list[list[int]], ready: list[bool]) -> list[list[int]]:
        B = len(states)
        drafts: list[list[int]] = [[] for _ in range(B)]
        rows = [b for b in range(B) if ready[b]]
        if not rows:
            return drafts
        lk = self.lookup  # one batch of the ready rows, exactly as verispec's engine drives it
        lk.contexts = [contexts[b] for b in rows]
        lk.tried = torch.stack([states[b].tried for b in rows])
        lk.passed = torch.stack([states[b].passed for b in rows])
        lk._pending = [None] * len(rows)
        room = [max(0, min(self.max_k, self.max_model_len - len(contexts[b]) - 1)) for b in rows]
        proposal = lk.propose(DraftAsk.of(room, 1, k_cap=room))
        policy = KRows(self.max_k)
        policy.add(["auto"] * len(rows))
        n = torch.minimum(proposal.num_draft, torch.tensor(room, dtype=torch.int64))
        if int(n.max()) > 0:
            n = policy.cut(n, proposal.accept_prob, self.costs(B))[0]
        if self.pinned is None and len(rows) == B:
            n = self._explore(n)
        for j, b in enumerate(rows):
            st = states[b]
            st.pending, st.at = lk._pending[j], len(contexts[b])
            if st.pending is not None:
                self.stats["found"] += 1
            st.draft = proposal.tokens[j, : int(n[j])].tolist()
            drafts[b] = st.draft
        return drafts

    def _explore(self, n: torch.Tensor) -> torch.Tensor:
        """Drafts shortened so that the step feeds the narrowest width below the chosen one that
        is not measured yet (each needs :data:`MIN_SAMPLES` steps): the reference model prices
        unmeasured widths only relative to measured ones, so a width never fed would never be
        learnt. Only ever shorter drafts (a plain step at worst): the text is the target's."""
        B, total = len(n), len(n) + int(n.sum())
        width = next((t for t in range(B, total) if self.clock.seconds(t) is None), None)
        if width is None:
            return n
        budget, out = width - B, n.clone()
        for j in range(B):
            out[j] = min(int(n[j]), budget)
            budget -= int(out[j])
        self.stats["explored"] += 1
        return out

    def _state(self, rid: str, ctx: list[int]) -> tuple[_State, bool]:
        """The request's state (parked ones come back) and whether it is new to this batch."""
        prefix = tuple(ctx[:_PREFIX])
        st = self.states.get(rid)
        fresh = st is None
        if st is None:
            st = self.parked.pop(rid, None)
        if st is None or st.prefix != prefix[: len(st.prefix)]:
            nb = len(self.lookup.ACCEPT_PRIOR)
            st = _State(prefix, torch.zeros(nb, dtype=torch.float64), torch.zeros(nb, dtype=torch.float64))
        self.states[rid] = st
        return st, fresh

    def _leave(self, present: set[str]) -> None:
        """Requests no longer in the batch (finished or preempted): parked, the oldest dropped."""
        for rid in [r for r in self.states if r not in present]:
            st = self.parked[rid] = self.states.pop(rid)
            st.pending = None  # drafts proposed before it left are never verified
            self.parked.move_to_end(rid)
        while len(self.parked) > PARKED:
            self.parked.popitem(last=False)


def _find_runner(depth: int = 12):
    """The vLLM model runner among the callers (a ``self`` whose class has ``execute_model`` and
    ``propose_draft_token_ids``): it constructs the proposer, and later calls ``propose``."""
    try:
        frame = sys._getframe(2)
    except ValueError:
        return None
    for _ in range(depth):
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        # the runner's input_batch is made after its drafter: it is read at each propose
        if obj is not None and hasattr(type(obj), "execute_model") and hasattr(type(obj), "propose_draft_token_ids"):
            return obj
        frame = frame.f_back
    return None


def describe() -> str:
    """One line for logs: what this proposer is."""
    return (f"{PROPOSER}: verispec prompt lookup (longest match, scored tokens, per-request cost cut; "
            f"costs measured in vLLM, or ${COSTS_ENV})")

