"""What a target pass and a draft step cost: the tables the draft-length policy weighs.

Two kinds of table, and which rows read which (:class:`CostTables`):

* **measured** (:func:`measure_pass_costs`): timed on this machine when a decoder with a drafter
  first starts a batch, and kept in a file per model, drafter and machine (:func:`costs_file`,
  written read-modify-write under a file lock; a table timed while the machine was busy serves
  until a process finds it quiet and times it again; ``verispec bench`` times its tables afresh,
  :func:`retime_costs`). Greedy and Gumbel rows read it: their text
  does not depend on draft lengths, only their speed does. The table holds passes of one row
  (``verify``) and of B = 2, 4, 8, 16 rows (``rows``, a few widths per B, interpolated): a
  greedy or Gumbel row reads the pass-width curve of the batch it runs in
  (:meth:`PassCosts.table` with ``rows=B``), so it drafts less, down to nothing, as the batch
  grows and the pass stops being memory-bound.
* **reference** (:func:`reference_costs`): no timing at all. A target pass of w tokens costs
  ``1 + 0.05 (w - 1)`` one-token passes, and a draft step the bytes of weights the drafter reads
  per step over the bytes the target reads per pass, plus 0.02 (a memory-bound model of a small
  CPU). Sampled "exact" rows read it: their text depends on their draft lengths, which must
  depend only on the request, the models and the kind of draft weights, never on a timing (same
  seed, same text, in any process, under any load, whatever the costs file holds). It is one
  row's table, read at every batch size: sampled exact rows are not turned down as the batch
  grows (their draft lengths must not depend on what else runs), and pay for it in speed.

A table the user pins (``SpeculativeDecoder(costs=...)``, ``--costs FILE``: :func:`load_costs`)
serves every row instead.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..drafters import DraftAsk, Drafter, EagleDrafter, HybridDrafter, stand_in_features
from ..models import CausalLM, cache_dir, kernel_choice, kernel_report, machine_key, read_json, write_json
from ..kv import KVRunner
from ..sampling import SamplingParams

__all__ = ["PassCosts", "CostTables", "measure_pass_costs", "reference_costs", "load_costs", "costs_file",
           "machine_busy", "retime_costs", "REFERENCE_VERIFY_SLOPE", "REFERENCE_STEP_OVERHEAD"]

_CONTEXT = 256  # tokens of context behind the timed passes (wide passes cost more behind a real context)
_REPEATS = 5  # timed passes per width (interleaved over widths, after one untimed round); the median is kept
# Timed proposals for the draft step. Each is divided by the one-token target pass just before it:
# on a shared 2-vCPU machine both slow down together for seconds at a time (a draft step timed
# alone read 1.1 to 1.8 ms in one process), and the ratio is what the policy weighs.
_DRAFT_REPEATS = 11
_ROW_REPEATS = 3  # timed passes per (rows, width) after an untimed round; the median is kept
# How the table is measured (part of the file's key: a change of method measures again). Draft
# steps are timed each right after a target pass, as in decoding: timed back to back, a draft
# model's weights stay in the CPU's cache and its steps look several times cheaper than they are.
# Passes of several rows: B rows x w tokens for B in _ROWS and the widths of _ROW_WIDTHS with
# B * w <= _ROW_TOKENS (widths 1 and 2 always); other widths and B are interpolated (beyond the
# widest timed width, linearly in tokens: a pass of many tokens is compute-bound).
_ROWS = (2, 4, 8, 16)
_ROW_WIDTHS = (1, 2, 3, 5, 9, 13)
_ROW_TOKENS = 40
_DRAFT_ROWS = 8  # a draft step is timed for one row and for this many (interpolated between, constant beyond)
_ROW_CONTEXT = 16  # tokens of context behind passes of several rows (their prefill is most of the timing's time)
_METHOD = (f"widths after {_CONTEXT} tokens, warmed, median of {_REPEATS} (rows: {_ROW_REPEATS}); draft steps after a target pass, median of {_DRAFT_REPEATS} ratios to it; rows {_ROWS} widths "
           f"{_ROW_WIDTHS} up to {_ROW_TOKENS} tokens after {_ROW_CONTEXT}; draft steps of 1 and {_DRAFT_ROWS} rows (one-token proposals)")
# The reference model (no timing): v(w) / v(1) = 1 + slope (w - 1); a draft step costs the ratio
# of bytes read plus a fixed overhead. On the 2-core CPUs of BENCHMARKS.md the measured tables
# read v(5) 1.07-1.37, v(9) 1.31-1.58, v(16) 1.85 one-token passes, and an EAGLE head's step
# 0.045-0.057 (int8 weights, ~0.02 by bytes) and 0.10 (float32, ~0.08 by bytes).
REFERENCE_VERIFY_SLOPE = 0.05
REFERENCE_STEP_OVERHEAD = 0.02


@dataclass(frozen=True)
class PassCosts:
    """Seconds of a target pass per width (1 = plain decoding) and of one draft step, and of
    passes of several rows.

    ``verify`` (one row) need not hold every width: others are interpolated, and the table is
    read through a running maximum so that a wider pass never costs less than a narrower one
    (a measured dip is noise or a kernel switch, not a reason to draft more). ``rows`` maps a
    batch size B >= 2 to seconds of a pass of B rows per width (each row feeding w tokens);
    empty: a pass costs the same per row at any B (a pinned table, the reference table).
    """

    verify: dict[int, float] = field(default_factory=dict)
    draft_step: float = 0.0
    rows: dict[int, dict[int, float]] = field(default_factory=dict)
    draft_rows: dict[int, float] = field(default_factory=dict)  # B -> seconds of a draft step of B rows
    _memo: dict = field(default_factory=dict, compare=False, repr=False)  # (max_w, B) -> table

    def verify_cost(self, w: int) -> float:
        """Seconds of a target pass of width ``w`` (monotone in ``w``)."""
        if not self.verify:
            return 1.0 + 0.05 * (w - 1)  # relative units when nothing is measured (tests)
        widths = sorted(self.verify)
        best = 0.0
        for x in widths:  # running maximum over the measured widths up to w
            if x > w:
                break
            best = max(best, self.verify[x])
        lo = max((x for x in widths if x <= w), default=None)
        hi = min((x for x in widths if x > w), default=None)
        if lo is None:
            return self.verify[widths[0]]
        if hi is None or lo == w:
            return max(best, self.verify[lo] * (1 + 0.02 * (w - lo)))
        mid = self.verify[lo] + (self.verify[hi] - self.verify[lo]) * (w - lo) / (hi - lo)
        return max(best, mid)

    def batch_cost(self, B: int, w: int) -> float:
        """Seconds of a pass of ``B`` rows x ``w`` tokens (monotone in ``w``): the one-row table
        for B = 1 or without ``rows``, times B; else interpolated linearly between the timed
        batch sizes (beyond the largest: proportional to B)."""
        if B <= 1 or not self.rows:
            return max(1, B) * self.verify_cost(w)
        sizes = sorted(self.rows)
        lo = max((x for x in sizes if x <= B), default=1)
        hi = min((x for x in sizes if x > B), default=None)
        v_lo = self.verify_cost(w) if lo == 1 else _curve(self.rows[lo], w)
        if hi is None:
            return v_lo * B / lo
        if lo == B:
            return v_lo
        return v_lo + (_curve(self.rows[hi], w) - v_lo) * (B - lo) / (hi - lo)

    def draft_cost(self, B: int) -> float:
        """A draft step for one row of a batch of ``B`` rows, in the units of :meth:`table`
        (``rows=B``): v(1) D(B) / V(B, 1), the ratio of a draft step of B rows to a one-token
        pass of B rows interpolated linearly in B between the timed sizes (1: ``draft_step``;
        beyond the largest, its ratio)."""
        if B <= 1 or not self.rows or not self.draft_rows:
            return self.draft_step
        v1 = self.verify_cost(1)
        points = {1: self.draft_step / v1, **{b: t / self.batch_cost(b, 1) for b, t in self.draft_rows.items()}}
        sizes = sorted(points)
        lo = max(x for x in sizes if x <= B)
        hi = min((x for x in sizes if x > B), default=None)
        r = points[lo] if hi is None else points[lo] + (points[hi] - points[lo]) * (B - lo) / (hi - lo)
        return r * v1

    def to_json(self) -> dict:
        """What :func:`load_costs` reads."""
        out = {"verify": {str(w): t for w, t in sorted(self.verify.items())}, "draft_step": self.draft_step}
        if self.rows:
            out["rows"] = {str(b): {str(w): t for w, t in sorted(ts.items())} for b, ts in sorted(self.rows.items())}
        if self.draft_rows:
            out["draft_rows"] = {str(b): t for b, t in sorted(self.draft_rows.items())}
        return out

    @classmethod
    def from_json(cls, data: object, name: str = "costs") -> PassCosts:
        """The table in ``data`` (see :meth:`to_json`); ``ValueError`` naming ``name`` if malformed."""
        if not isinstance(data, dict) or not isinstance(data.get("verify"), dict) or not data["verify"]:
            raise ValueError(f'{name}: expected {{"verify": {{"1": seconds, ...}}, "draft_step": seconds}}')
        verify = _widths(data["verify"], name, "verify")
        step = data.get("draft_step", 0.0)
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not math.isfinite(step) or step < 0:
            raise ValueError(f"{name}: draft_step must be a finite number >= 0, got {step!r}")
        rows = data.get("rows", {})
        if not isinstance(rows, dict):
            raise ValueError(f'{name}: rows must be {{"B": {{"w": seconds, ...}}, ...}}, got {rows!r}')
        batch = {}
        for b, ts in rows.items():
            try:
                size = int(b)
            except (TypeError, ValueError):
                size = 0
            if size < 2 or not isinstance(ts, dict) or not ts:
                raise ValueError(f"{name}: rows entry {b!r} needs a batch size >= 2 and widths with costs")
            batch[size] = _widths(ts, name, f"rows {b}")
        steps = data.get("draft_rows", {})
        if not isinstance(steps, dict):
            raise ValueError(f'{name}: draft_rows must be {{"B": seconds, ...}}, got {steps!r}')
        draft_rows = {}
        for b, t in steps.items():
            try:
                size, secs = int(b), float(t)
            except (TypeError, ValueError):
                size, secs = 0, math.nan
            if size < 2 or isinstance(t, bool) or not math.isfinite(secs) or secs < 0:
                raise ValueError(f"{name}: draft_rows entry {b!r}: {t!r} needs a batch size >= 2 and seconds >= 0")
            draft_rows[size] = secs
        return cls(verify, float(step), batch, draft_rows)

    def table(self, max_w: int, rows: int = 1) -> torch.Tensor:
        """``[max_w + 1]`` float64: entry w is the cost of a pass of width w for one row of a
        batch of ``rows`` rows, entry 0 unused. For one row, :meth:`verify_cost` (w); for B rows,
        the batch's curve scaled to a one-row pass at width 1, v(1) V(B, w) / V(B, 1): a draft
        step keeps its ratio to a one-token pass (both models slow down alike with B) and the
        pass-width curve is the batch's own, steeper as the batch stops being memory-bound."""
        B = 1 if rows <= 1 or not self.rows else rows
        key = (max_w, B)
        got = self._memo.get(key)
        if got is None:
            if B == 1:
                vals = [self.verify_cost(w) for w in range(1, max_w + 1)]
            else:
                one = self.verify_cost(1) / self.batch_cost(B, 1)
                vals = [self.batch_cost(B, w) * one for w in range(1, max_w + 1)]
            got = self._memo[key] = torch.tensor([0.0] + vals, dtype=torch.float64)
        return got


def _widths(data: dict, name: str, what: str) -> dict[int, float]:
    """``{"w": seconds}`` as ints and floats; ``ValueError`` naming ``name`` and ``what``."""
    out = {}
    for w, t in data.items():
        try:
            width, secs = int(w), float(t)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: {what} entry {w!r}: {t!r} is not a width and a number") from None
        if width < 1 or not math.isfinite(secs) or secs <= 0 or isinstance(t, bool):
            raise ValueError(f"{name}: {what} entry {w!r}: {t!r} needs a width >= 1 and a finite cost > 0")
        out[width] = secs
    return out


def _curve(times: dict[int, float], w: int) -> float:
    """Seconds of width ``w`` from a few timed widths: interpolated, linear in tokens beyond the
    widest (the slope of its last two, at least 0), never below a narrower width's."""
    widths = sorted(times)
    best = max((times[x] for x in widths if x <= w), default=times[widths[0]])
    lo = max((x for x in widths if x <= w), default=None)
    hi = min((x for x in widths if x > w), default=None)
    if lo is None:
        return times[widths[0]]
    if lo == w:
        return best
    if hi is None:
        prev = max((x for x in widths if x < lo), default=None)
        slope = 0.0 if prev is None else max(0.0, (times[lo] - times[prev]) / (lo - prev))
        return max(best, times[lo] + slope * (w - lo))
    return max(best, times[lo] + (times[hi] - times[lo]) * (w - lo) / (hi - lo))


@dataclass(frozen=True)
class CostTables:
    """The two tables of a batch: ``measured`` for rows whose text does not depend on draft
    lengths (greedy, Gumbel), ``fixed`` for sampled "exact" rows (no timing: the reference
    model, or a table the user pinned). Which rows read ``fixed`` is the K policy's per-row flag
    (:class:`verispec.engine.kpolicy.KRows`)."""

    measured: PassCosts
    fixed: PassCosts

    @classmethod
    def of(cls, costs: PassCosts | CostTables) -> CostTables:
        """``costs`` as a pair (one table: every row reads it)."""
        return costs if isinstance(costs, CostTables) else cls(costs, costs)


def reference_costs(target: CausalLM, drafter: Drafter | None, max_width: int) -> PassCosts:
    """The timing-free table (in one-token passes): v(w) = 1 + :data:`REFERENCE_VERIFY_SLOPE` (w - 1)
    for w = 1..``max_width``, and a draft step of (bytes of weights the drafter reads per step) /
    (bytes the target reads per pass) + :data:`REFERENCE_STEP_OVERHEAD` (0 for a drafter without
    a model: prompt lookup). A function of the models' shapes and dtypes and of the kind of an
    EAGLE head's draft weights only."""
    verify = {w: 1.0 + REFERENCE_VERIFY_SLOPE * (w - 1) for w in range(1, max(2, max_width) + 1)}
    draft = _draft_bytes(drafter)
    step = draft / max(1, _linear_bytes(target.model)) + REFERENCE_STEP_OVERHEAD if draft else 0.0
    return PassCosts(verify, step)


def _linear_bytes(model: torch.nn.Module) -> int:
    """Bytes of the weights (and biases) of every linear layer of ``model``, the output head
    included: what a one-token pass reads (an embedding gives one row)."""
    total = 0
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            total += sum(t.numel() * t.element_size() for t in (m.weight, m.bias) if t is not None)
    return total


_WEIGHT_BYTES = {"fp16": 2, "int8": 1}  # an EAGLE head's draft weights; fp32: the head's dtype


def _draft_bytes(drafter: Drafter | None) -> int:
    """Bytes a draft step reads: an EAGLE head's linears and output rows in the kind of weights
    its steps read, a draft model's linears, nothing for prompt lookup or a drafter without a
    model we know."""
    inner = drafter.model if isinstance(drafter, HybridDrafter) else drafter
    if isinstance(inner, EagleDrafter):
        model = inner.model
        if model is None:
            return 0
        n = sum(m.weight.numel() + (m.bias.numel() if m.bias is not None else 0)
                for m in model.head.modules() if isinstance(m, torch.nn.Linear)) + model.out_rows.numel()
        return n * _WEIGHT_BYTES.get(model.weights, model.out_rows.element_size())
    lm = getattr(inner, "lm", None)
    if isinstance(lm, CausalLM):
        return _linear_bytes(lm.model)
    return 0


def load_costs(path: str | os.PathLike, name: str = "costs") -> PassCosts:
    """A pinned cost table from a JSON file ``{"verify": {"1": v1, "2": v2, ...}, "draft_step": c}``
    (seconds or any unit, the same for both; :meth:`PassCosts.to_json` writes one). Raises
    ``ValueError`` naming ``name`` (the argument it came from) when the file cannot be read or is
    malformed."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"{name}: cannot read {str(path)!r}: {e.strerror or e}") from None
    except ValueError as e:
        raise ValueError(f"{name}: {str(path)!r} is not JSON: {e}") from None
    return PassCosts.from_json(data, f"{name} ({path})")


# (id(model), max width) -> (one row's widths, {B: widths} of several rows, busy)
_CACHE: dict[tuple[int, int], tuple[dict[int, float], dict[int, dict[int, float]], bool]] = {}
_STEP_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # drafter -> (step / one-token pass, busy)
_STEP_ROWS_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # the same for _DRAFT_ROWS rows


# retime_costs(): whether tables are timed afresh in this process, and those it timed (disk key -> table)
_RETIME: dict = {"on": False, "tables": {}}


def retime_costs(on: bool = True) -> None:
    """From now on in this process (``on``), time every measured table afresh the first time it
    is asked for instead of reading the costs file's, and serve that one for the rest of the
    process. ``verispec bench`` does, so that the drafters it compares are weighed with tables
    timed under the same conditions: on a shared machine a table kept from other hours can weigh
    a draft step far off (2.5 ms against 1.5 ms timed in the run). The new table replaces the
    file's entry, except a quiet one by one timed busy. ``on=False``: read the file again."""
    _RETIME["on"] = on
    _RETIME["tables"] = {}
    _CACHE.clear()  # the in-process timings too: afresh means after this call
    _STEP_CACHE.clear()
    _STEP_ROWS_CACHE.clear()


def measure_pass_costs(target: CausalLM, drafter: Drafter | None, max_width: int) -> PassCosts:
    """Median seconds of a target pass of each width 1..``max_width`` and of a draft step of
    ``drafter`` (its median ratio to a one-token pass, times v(1)): read from the costs file
    (:func:`costs_file`) when it holds this model, drafter and machine, else measured and written
    there, so every process on a machine uses one table. A table timed while the machine was busy
    (:func:`machine_busy`) is marked so and timed again by the first process that finds the machine quiet;
    widths or a draft step timed busy are never kept as quiet (the in-memory caches remember it).
    Reading, timing and writing happen under the costs file's lock (:func:`_locked`), so two
    processes started together time a key once and never drop each other's entries. After
    :func:`retime_costs`, a table is timed afresh once per process whatever the file holds. Only
    rows whose text does not depend on draft lengths read this table (:class:`CostTables`)."""
    disk_key = " | ".join([target.name, getattr(drafter, "name", "none"), machine_key(),
                           f"kernels {kernel_choice()} {_kernels_digest(target, drafter)}", f"widths {max_width}",
                           _METHOD])
    busy = machine_busy()
    with _locked():  # one process times and writes a key at a time; the others read what it wrote
        stored, stored_busy = _stored(disk_key, drafter is not None)
        if _RETIME["on"]:
            if disk_key in _RETIME["tables"]:
                return _RETIME["tables"][disk_key]
        elif stored is not None and (busy or not stored_busy):  # a busy table waits for a quiet machine
            return stored
        key = (id(target.model), max_width)
        cached = _CACHE.get(key)
        if cached is None or stored_busy or (cached[2] and not busy):  # never reuse busy widths as quiet
            cached = _CACHE[key] = (_time_widths(target, max_width), _time_rows(target, max_width), busy)
        widths, rows, widths_busy = cached
        ratio, ratio_busy = _draft_ratio(target, drafter, busy)
        ratio_rows, rows_busy = _draft_ratio_rows(target, drafter, busy)
        verify = dict(widths)
        costs = PassCosts(verify, ratio * verify[1], {b: dict(ts) for b, ts in rows.items()},
                          {_DRAFT_ROWS: ratio_rows * _curve(rows[_DRAFT_ROWS], 1)} if drafter is not None else {})
        timed_busy = widths_busy or ratio_busy or rows_busy  # as busy as the busiest of its parts' timings
        if _RETIME["on"]:
            _RETIME["tables"][disk_key] = costs
        if not (timed_busy and stored is not None and not stored_busy):  # a quiet table is never replaced by a busy one
            _write_costs(disk_key, {**costs.to_json(), "busy": timed_busy})
    return costs


def machine_busy(load: float | None = None) -> bool:
    """Whether the machine runs more than it has cores for: ``load`` (default: the 1-minute load
    average; False where the platform has none) above cores + 0.5. A second 2-thread job on 2
    cores made one-token passes time 100-115 ms instead of 21."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average on this platform
            return False
    return load > (os.cpu_count() or 1) + 0.5


def _kernels_digest(target: CausalLM, drafter: Drafter | None) -> str:
    """A short digest of the CPU kernels the target and an EAGLE drafter run: costs measured
    under other kernels (a plan measured again, another kind of draft weights) are not reused."""
    plan = kernel_report(target.model)
    parts: dict = {"linears": plan["linears"], "head": plan["head"]}
    inner = drafter.model if isinstance(drafter, HybridDrafter) else drafter
    if isinstance(inner, EagleDrafter) and inner.model is not None:
        parts["eagle"] = (kernel_report(inner.model).get("eagle") or {}).get("weights")
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def costs_file() -> Path:
    """Where measured costs are kept: ``$VERISPEC_COSTS``, else ``pass-costs.json`` in verispec's
    cache directory. Delete it to measure again (e.g. after a change of kernels)."""
    env = os.environ.get("VERISPEC_COSTS")
    return Path(env).expanduser() if env else cache_dir() / "pass-costs.json"


def _read_costs() -> dict:
    data = read_json(costs_file())
    return data if isinstance(data, dict) else {}


def _stored(key: str, drafts: bool = False) -> tuple[PassCosts | None, bool]:
    """The table kept under ``key`` (None if absent or malformed: measured again) and whether it
    was timed on a busy machine."""
    entry = _read_costs().get(key)
    try:
        costs = PassCosts.from_json(entry)
        if "draft_step" not in entry or sorted(costs.rows) != list(_ROWS) \
                or (drafts and list(costs.draft_rows) != [_DRAFT_ROWS]):  # an entry cut short: time it again
            return None, False
        return costs, bool(entry.get("busy", False))
    except (TypeError, KeyError, AttributeError, ValueError):
        return None, False


def _write_costs(key: str, entry: dict) -> None:
    """Add one entry to the costs file: read, add, write (atomically), under the file lock so
    that two processes never lose each other's entries."""
    with _locked():
        write_json(costs_file(), {**_read_costs(), key: entry})


_HELD = threading.local()  # .paths: lock path -> depth held by this thread (flock is per open file)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """An exclusive lock on ``<costs file>.lock`` (``fcntl.flock``; re-entrant in one process).
    Where the lock file cannot be made (a read-only cache), nothing is locked: nothing is written
    either."""
    path = str(costs_file()) + ".lock"
    held = _HELD.__dict__.setdefault("paths", {})
    if held.get(path):
        held[path] += 1
        try:
            yield
        finally:
            held[path] -= 1
        return
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held[path] = 1
        try:
            yield
        finally:
            held.pop(path, None)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@torch.inference_mode()
def _time_widths(target: CausalLM, max_width: int) -> dict[int, float]:
    model = target.model
    device = model.device
    runner = KVRunner(model, 1)
    runner.forward(torch.arange(4, 4 + _CONTEXT, device=device)[None] % target.vocab_size)
    feed = torch.arange(max_width, device=device)[None] % target.vocab_size
    times: dict[int, list[float]] = {w: [] for w in range(1, max_width + 1)}
    # Round 0 warms every width up untimed: a kernel's first call at a new shape (oneDNN builds a
    # primitive per shape) once made v(2) read 1.5 v(1) in a quiet run, and the running maximum
    # of the table then charged every wider pass as much, so k=auto all but stopped drafting.
    for r in range(_REPEATS + 1):
        for w in times:  # interleaved over widths, so that drift hits all of them alike
            t0 = time.perf_counter()
            runner.forward(feed[:, :w], logits_to_keep=w)
            if r:
                times[w].append(time.perf_counter() - t0)
            runner.truncate(runner.lengths - w)
    return {w: sorted(ts)[len(ts) // 2] for w, ts in times.items()}


@torch.inference_mode()
def _time_rows(target: CausalLM, max_width: int) -> dict[int, dict[int, float]]:
    """Median seconds of passes of B rows x w tokens, for B in :data:`_ROWS` and the widths of
    :data:`_ROW_WIDTHS` up to ``max_width`` with B * w <= :data:`_ROW_TOKENS` (1 and 2 always),
    interleaved over (B, w) so that drift hits all of them alike."""
    model = target.model
    device = model.device
    runners, plan = {}, []
    for B in _ROWS:
        runner = runners[B] = KVRunner(model, B)
        runner.forward((torch.arange(4, 4 + _ROW_CONTEXT, device=device)[None] % target.vocab_size).expand(B, -1))
        runner.forward(torch.full((B, 1), 7 % target.vocab_size, device=device), logits_to_keep=1)  # warm-up
        runner.truncate(runner.lengths - 1)
        plan += [(B, w) for w in _ROW_WIDTHS if w <= max(2, max_width) and (w <= 2 or B * w <= _ROW_TOKENS)]
    times: dict[tuple[int, int], list[float]] = {bw: [] for bw in plan}
    for r in range(_ROW_REPEATS + 1):  # round 0 untimed: every shape's first call (see _time_widths)
        for B, w in plan:
            feed = (torch.arange(w, device=device)[None] % target.vocab_size).expand(B, -1)
            t0 = time.perf_counter()
            runners[B].forward(feed, logits_to_keep=w)
            if r:
                times[B, w].append(time.perf_counter() - t0)
            runners[B].truncate(runners[B].lengths - w)
    out: dict[int, dict[int, float]] = {B: {} for B in _ROWS}
    for (B, w), ts in times.items():
        out[B][w] = sorted(ts)[len(ts) // 2]
    return out


def _draft_ratio(target: CausalLM, drafter: Drafter | None, busy: bool) -> tuple[float, bool]:
    """Seconds per drafted token over seconds of the one-token target pass timed just before it
    (median over proposals of 4 greedy tokens on a dummy prompt; cached per drafter, with whether
    the machine was ``busy`` then: a ratio timed busy is timed again once it is quiet). The pass
    leaves the CPU's caches as decoding does; the ratio cancels the machine's slow spells."""
    if drafter is None:
        return 0.0, False
    cached = _STEP_CACHE.get(drafter)
    if cached is not None and not (cached[1] and not busy):
        return cached
    ratio = _time_draft(target, drafter, 1)
    _STEP_CACHE[drafter] = (ratio, busy)
    return ratio, busy


def _draft_ratio_rows(target: CausalLM, drafter: Drafter | None, busy: bool) -> tuple[float, bool]:
    """As :func:`_draft_ratio` for :data:`_DRAFT_ROWS` rows: a one-token proposal of that many rows
    over a one-token target pass of as many rows (a draft model's step need not slow down with B
    as the target's pass does, and the proposal's fixed costs count)."""
    if drafter is None:
        return 0.0, False
    cached = _STEP_ROWS_CACHE.get(drafter)
    if cached is not None and not (cached[1] and not busy):
        return cached
    ratio = _time_draft(target, drafter, _DRAFT_ROWS, tokens=1)
    _STEP_ROWS_CACHE[drafter] = (ratio, busy)
    return ratio, busy


def _time_draft(target: CausalLM, drafter: Drafter, B: int, tokens: int = 4) -> float:
    """The median ratio of a draft step of ``B`` rows to the ``B``-row one-token pass before it,
    from proposals of ``tokens`` tokens (1 for a batch: the lengths a batch drafts, so the
    proposal's fixed cost is charged to its one step)."""
    runner = KVRunner(target.model, B)
    with torch.inference_mode():
        runner.forward((torch.arange(4, 4 + _CONTEXT, device=target.model.device)[None] % target.vocab_size)
                       .expand(B, -1))
    one = torch.full((B, 1), 7 % target.vocab_size, dtype=torch.int64, device=target.model.device)
    prompt = [(5 + i) % target.vocab_size for i in range(_CONTEXT)]
    features = None
    if drafter.reads_target_features:
        features = [stand_in_features(drafter, _CONTEXT - 1, target.model.config.hidden_size,
                                      dtype=target.model.dtype, device=target.model.device) for _ in range(B)]
    drafter.keep(torch.zeros(0, dtype=torch.int64))
    drafter.add([prompt] * B, features)
    ask = DraftAsk.of([tokens] * B, target.vocab_size, SamplingParams(temperature=0), dtype=torch.float32)
    ratios, forwards = [], 0
    for _ in range(_DRAFT_REPEATS + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        with torch.inference_mode():
            runner.forward(one, logits_to_keep=1)
            runner.truncate(runner.lengths - 1)
        t1 = time.perf_counter()
        d = drafter.propose(ask)
        ratios.append((time.perf_counter() - t1) / max(1, d.forwards) / (t1 - t0))
        forwards += d.forwards
        emitted = [d.tokens[b, : int(d.num_draft[b])].tolist() or [5] for b in range(B)]  # as if all were accepted
        feats = None if features is None else [features[b][: len(e)] for b, e in enumerate(emitted)]
        drafter.update(emitted, feats)
    drafter.keep(torch.zeros(0, dtype=torch.int64))
    # a drafter without a model (prompt lookup) takes no forward: drafting is free
    return sorted(ratios[1:])[len(ratios[1:]) // 2] if forwards else 0.0
