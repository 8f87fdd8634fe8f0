"""The scheduler: the one thread that owns the engine (continuous batching).

Requests wait in a bounded queue; between engine steps the thread cancels the rows whose
clients left (``decoder.cancel``), admits waiting requests up to ``max_batch`` rows
(``decoder.add``), sets each row's draft-length cap (:mod:`.drafting`) and runs one
``decoder.step``. What a step emitted goes back to each request's owner through its ``emit``
callback (the app hands results to the asyncio side with ``loop.call_soon_threadsafe``); no
other thread touches the model.

Events a job's ``emit`` receives: ``("delta", text)`` (streamed requests), ``("done",
Completion, stats)`` once, or ``("error", status, message)`` once (shutdown, an engine failure).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..engine import Request, SpeculativeDecoder, accepted_slot
from .drafting import NO_CAP, CappedDrafter, load_cap
from .metrics import Metrics
from .protocol import CompletionSpec

__all__ = ["Scheduler", "Job"]

log = logging.getLogger("verispec.serve")

_TRIM_EVERY = 4096  # steps between trims of the batch's per-step histories (a long-lived batch)


@dataclass
class Job:
    """One request in the scheduler: what it asked for and what it got so far."""

    id: str
    spec: CompletionSpec
    emit: Callable[[tuple], None]
    arrival: float = field(default_factory=time.perf_counter)
    first_at: float | None = None
    last_at: float | None = None
    tokens: int = 0
    passes: int = 1  # the prefill is the row's first pass (it emits the first token)
    drafted: int = 0
    drafts: int = 0  # passes that verified at least one draft token
    row: object | None = None  # the engine's Row while running (its token origins count accepted drafts)

    @property
    def text_fixed(self) -> bool:
        """The text cannot depend on draft lengths: greedy, gumbel, or unseeded (any draw is as good)."""
        s = self.spec.sampling
        return s.greedy or self.spec.method == "gumbel" or s.seed is None

    def request(self) -> Request:
        return Request(self.spec.prompt_ids, self.spec.max_tokens, self.spec.sampling, stop=list(self.spec.stop),
                       method=self.spec.method, stream=self.spec.stream, request_id=self.id)


class Scheduler:
    """Owns ``decoder`` on a thread of its own; :meth:`submit` and :meth:`cancel` from any thread."""

    def __init__(self, decoder: SpeculativeDecoder, *, max_batch: int = 16, max_queue: int = 64,
                 verify_budget: int = 0, metrics: Metrics | None = None) -> None:
        self.decoder = decoder
        self.capped = decoder.drafter if isinstance(decoder.drafter, CappedDrafter) else None
        self.max_batch, self.max_queue, self.verify_budget = max_batch, max_queue, verify_budget
        self.metrics = metrics or Metrics()
        self._cond = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._cancels: set[str] = set()
        self._jobs: dict[str, Job] = {}  # running (admitted) jobs
        self._admitting = True
        self._deadline: float | None = None  # drain: cancel what is left at this time
        self._stop = False
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="verispec-scheduler", daemon=True)
        self.steps = 0

    # -- any thread ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> str:
        """Queue ``job``: ``"ok"``, ``"full"`` (the queue is at ``max_queue``) or ``"closed"`` (draining)."""
        with self._cond:
            if not self._admitting or self._stop:
                return "closed"
            if len(self._waiting) >= self.max_queue:
                return "full"
            self._waiting.append(job)
            self.metrics.waiting.set(len(self._waiting))
            self._cond.notify()
        return "ok"

    def cancel(self, job_id: str) -> None:
        """Drop a request whose client is gone (at the next step; nothing more is emitted for it)."""
        with self._cond:
            self._cancels.add(job_id)
            self._cond.notify()

    def drain(self, timeout: float) -> None:
        """Stop admitting; what is queued or running may finish for ``timeout`` seconds, then is cancelled."""
        with self._cond:
            self._admitting = False
            self._deadline = time.perf_counter() + max(0.0, timeout)
            self._cond.notify()

    @property
    def admitting(self) -> bool:
        return self._admitting

    def idle(self) -> bool:
        with self._cond:
            return not self._waiting and not self._jobs

    def stop(self, join: float | None = 5.0) -> None:
        with self._cond:
            self._admitting = False
            self._stop = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(join)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # -- the scheduler thread -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self.decoder.drafter is not None and self.decoder.k in ("auto", "tree"):
                _ = self.decoder.cost_tables  # timed once, before serving: no request pays for it
            self.state = self.decoder.start()
        except BaseException as e:  # noqa: BLE001 - reported by the server's startup
            self.failed = e
            self.ready.set()
            return
        self.ready.set()
        while True:
            if not self._jobs and (self.state.rows or self.state.pending or self.state.stats.iterations):
                self.state = self.decoder.start()  # idle: a fresh batch (its stats start over)
            with self._cond:
                while not self._waiting and not self._jobs and not self._cancels and not self._stop \
                        and self._deadline is None:
                    self._cond.wait(1.0)
                if (self._stop or self._deadline is not None) and not self._waiting and not self._jobs:
                    self._stop = True
                    break
                cancels, self._cancels = self._cancels, set()
                gone = [j for j in self._waiting if j.id in cancels]
                if gone:  # cancelled while still queued: never admitted
                    self._waiting = deque(j for j in self._waiting if j.id not in cancels)
                    cancels -= {j.id for j in gone}
                    self.metrics.aborted.inc(len(gone))
                expired = self._deadline is not None and time.perf_counter() >= self._deadline
                if self._stop or expired:
                    leftover = list(self._waiting) + list(self._jobs.values())
                    self._waiting.clear()
                else:
                    leftover = []
                free = self.max_batch - len(self._jobs)
                admit = []
                while free > 0 and self._waiting:
                    admit.append(self._waiting.popleft())
                    free -= 1
                self.metrics.waiting.set(len(self._waiting))
            for job in leftover:
                self._abort(job, 503, "the server is shutting down; the request was cancelled")
            for jid in cancels:
                self._drop(jid)
            if admit:
                self._admit(admit)
            self.metrics.running.set(len(self._jobs))
            if self._jobs:
                self._step()
        self.metrics.running.set(0)
        self.metrics.waiting.set(0)

    def _drop(self, jid: str) -> None:
        """A cancelled request leaves the batch (if running) without another event."""
        job = self._jobs.pop(jid, None)
        if job is None:
            return
        self.metrics.aborted.inc()
        if any(r.request_id == jid for r in self.state.rows):
            self.decoder.cancel(self.state, jid)
        self.state.pending = [o for o in self.state.pending if o.request_id != jid]
        log.info("%s cancelled by the client after %d tokens", jid, job.tokens)

    def _abort(self, job: Job, status: int, message: str) -> None:
        if self._jobs.pop(job.id, None) is not None:
            if any(r.request_id == job.id for r in self.state.rows):
                self.decoder.cancel(self.state, job.id)
            self.state.pending = [o for o in self.state.pending if o.request_id != job.id]
        self.metrics.aborted.inc()
        log.info("%s aborted (%d): %s", job.id, status, message)
        job.emit(("error", status, message))

    def _admit(self, jobs: list[Job]) -> None:
        try:
            self.decoder.add(self.state, [j.request() for j in jobs])
            added = jobs
        except (ValueError, TypeError):  # validation happens before any prefill: try one by one
            added = []
            for j in jobs:
                try:
                    self.decoder.add(self.state, [j.request()])
                    added.append(j)
                except (ValueError, TypeError) as e:
                    log.info("%s refused by the engine: %s", j.id, e)
                    j.emit(("error", 400, str(e)))
        except Exception as e:  # noqa: BLE001 - a broken prefill must not take the server down
            self._fail(jobs, "engine prefill failed", e)
            return
        rows = {r.request_id: r for r in self.state.rows}
        for j in added:
            j.row = rows.get(j.id)
            self._jobs[j.id] = j
            self.metrics.prompt_tokens.inc(len(j.spec.prompt_ids))

    def _step(self) -> None:
        dec, state = self.decoder, self.state
        ids = [r.request_id for r in state.rows]
        for r in state.rows:  # rows admitted this round, or any whose Row we have not seen
            job = self._jobs.get(r.request_id)
            if job is not None and job.row is None:
                job.row = r
        if self.capped is not None:
            cap = load_cap(len(ids), self.verify_budget)
            caps = []
            for rid in ids:
                job = self._jobs.get(rid)
                caps.append(NO_CAP if job is None else 0 if job.spec.draft_off else cap if job.text_fixed else NO_CAP)
            self.capped.caps = torch.tensor(caps, dtype=torch.int64)
        self.metrics.running.set(len(self._jobs))
        self.metrics.batch_size.observe(len(ids))
        try:
            outputs = dec.step(state)
        except Exception as e:  # noqa: BLE001 - one broken step must not take the server down
            self._fail([], "engine step failed", e)
            return
        finally:
            if self.capped is not None:
                self.capped.caps = None
        self.steps += 1
        drafted = self.capped.drafted() if self.capped is not None else None
        for b, rid in enumerate(ids):
            job = self._jobs.get(rid)
            if job is not None:
                job.passes += 1
                if drafted is not None and drafted[b] > 0:
                    job.drafted += drafted[b]
                    job.drafts += 1
        now = time.perf_counter()
        for o in outputs:
            job = self._jobs.get(o.request_id)
            if job is None:
                continue
            n = len(o.token_ids)
            if n:
                if job.first_at is None:
                    job.first_at = now
                    self.metrics.ttft.observe(now - job.arrival)
                    if n > 1:
                        self._itl(0.0, n - 1)
                else:
                    self._itl((now - job.last_at) / n, n)
                job.last_at = now
                job.tokens += n
                self.metrics.generation_tokens.inc(n)
            if o.text:
                job.emit(("delta", o.text))
            if o.completion is not None:
                self._finish(job, o.completion, now)
        if self.steps % _TRIM_EVERY == 0:  # the batch lives as long as the server is busy
            state.stats.k_history.clear()
            state.stats.verify_width_seconds.clear()
        self.metrics.running.set(len(self._jobs))

    def _fail(self, joining: list[Job], what: str, error: Exception) -> None:
        """An engine failure: every running request and ``joining`` get a 500, and a fresh batch
        starts (the failed one's state cannot be trusted); the server keeps serving."""
        jobs = list(self._jobs.values()) + joining
        log.exception("%s; aborting %d requests", what, len(jobs))
        for job in jobs:
            job.emit(("error", 500, f"engine error: {error}"))
        self._jobs.clear()
        self.state = self.decoder.start()

    def _itl(self, seconds: float, n: int) -> None:
        for _ in range(n):
            self.metrics.itl.observe(seconds)

    def _finish(self, job: Job, completion, now: float) -> None:
        del self._jobs[job.id]
        origins = list(getattr(job.row, "origins", []) or [])
        slots = [s for s in map(accepted_slot, origins) if s is not None]  # the accepted drafts' slots
        accepted = len(slots)
        tokens = len(completion.token_ids)
        stats = {"drafted": job.drafted, "accepted": accepted, "target_passes": job.passes,
                 "tau": round(tokens / job.passes, 4) if job.passes else None,
                 "draft": "none" if job.spec.draft_off or self.capped is None else "on"}
        m = self.metrics
        m.num_drafts.inc(job.drafts)
        m.num_draft_tokens.inc(job.drafted)
        m.num_accepted_tokens.inc(accepted)
        for s in slots:
            m.accepted_per_pos.labels(position=str(s)).inc()
        m.e2e.observe(now - job.arrival)
        m.finished.labels(finished_reason=completion.finish_reason).inc()
        ttft = (job.first_at - job.arrival) if job.first_at is not None else float("nan")
        log.info("%s done: prompt=%d tokens=%d finish=%s drafted=%d accepted=%d passes=%d tau=%.2f ttft=%.3fs "
                 "latency=%.3fs", job.id, len(job.spec.prompt_ids), tokens, completion.finish_reason, job.drafted,
                 accepted, job.passes, tokens / max(job.passes, 1), ttft, now - job.arrival)
        job.emit(("done", completion, stats))
