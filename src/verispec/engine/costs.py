"""What a target pass and a draft step cost on this machine: measured once, before requests run.

The draft-length policy weighs expected tokens against these costs. They are measured when a
decoder with a drafter first starts a batch, and kept in a file per model, drafter and machine
(:func:`costs_file`; a table timed while the machine was busy serves until a process finds it
quiet and times it again), never updated from live timings: a sampled "exact" request's text
depends on its draft lengths, so the policy may read only the request's own history and a table
fixed before it started (same seed, same text, whatever else runs on the machine).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..drafters import DraftAsk, Drafter, EagleDrafter, HybridDrafter
from ..models import CausalLM, cache_dir, kernel_choice, kernel_report, machine_key, read_json, write_json
from ..runner import KVRunner
from ..sampling import SamplingParams

__all__ = ["PassCosts", "measure_pass_costs", "costs_file"]

_CONTEXT = 48  # tokens of context behind the timed passes
_REPEATS = 3  # timed passes per width (interleaved over widths); the median is kept
# Timed proposals for the draft step. Each is divided by the one-token target pass just before it:
# on a shared 2-vCPU machine both slow down together for seconds at a time (a draft step timed
# alone read 1.1 to 1.8 ms in one process), and the ratio is what the policy weighs.
_DRAFT_REPEATS = 11
# How the table is measured (part of the file's key: a change of method measures again). Draft
# steps are timed each right after a target pass, as in decoding: timed back to back, a draft
# model's weights stay in the CPU's cache and its steps look several times cheaper than they are.
_METHOD = f"draft steps after a target pass, median of {_DRAFT_REPEATS} ratios to it"


@dataclass(frozen=True)
class PassCosts:
    """Seconds of a target pass per width (1 = plain decoding) and of one draft step.

    ``verify`` need not hold every width: others are interpolated, and the table is read
    through a running maximum so that a wider pass never costs less than a narrower one
    (a measured dip is noise or a kernel switch, not a reason to draft more).
    """

    verify: dict[int, float] = field(default_factory=dict)
    draft_step: float = 0.0

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

    def table(self, max_w: int) -> torch.Tensor:
        """``[max_w + 1]`` float64: entry w is :meth:`verify_cost` (w), entry 0 unused."""
        return torch.tensor([0.0] + [self.verify_cost(w) for w in range(1, max_w + 1)], dtype=torch.float64)


_CACHE: dict[tuple[int, int], dict[int, float]] = {}  # (id(model), max width) -> seconds per width
_STEP_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # drafter -> draft step / one-token pass


def measure_pass_costs(target: CausalLM, drafter: Drafter | None, max_width: int) -> PassCosts:
    """Median seconds of a target pass of each width 1..``max_width`` and of a draft step of
    ``drafter`` (its median ratio to a one-token pass, times v(1)): read from the costs file
    (:func:`costs_file`) when it holds this model, drafter and machine, else measured and written
    there, so every process on a machine uses one table. A table timed while the machine was busy
    (:func:`_busy`) is marked so and timed again by the first process that finds the machine quiet."""
    disk_key = " | ".join([target.name, getattr(drafter, "name", "none"), machine_key(),
                           f"kernels {kernel_choice()} {_kernels_digest(target, drafter)}", f"widths {max_width}",
                           _METHOD])
    stored, stored_busy = _stored(disk_key)
    busy = _busy()
    if stored is not None and (busy or not stored_busy):  # a busy table waits for a quiet machine
        return stored
    key = (id(target.model), max_width)
    if key not in _CACHE or stored_busy:
        _CACHE[key] = _time_widths(target, max_width)
    verify = dict(_CACHE[key])
    costs = PassCosts(verify, _draft_ratio(target, drafter) * verify[1])
    _write_costs(disk_key, {"verify": costs.verify, "draft_step": costs.draft_step, "busy": busy})
    return costs


def _busy() -> bool:
    """Whether the machine runs more than it has cores for (1-minute load average above cores +
    0.5): a second 2-thread job on 2 cores made one-token passes time 100-115 ms instead of 21."""
    try:
        return os.getloadavg()[0] > (os.cpu_count() or 1) + 0.5
    except OSError:  # no load average on this platform
        return False


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


def _stored(key: str) -> tuple[PassCosts | None, bool]:
    """The table kept under ``key`` (None if absent or malformed: measured again) and whether it
    was timed on a busy machine."""
    entry = _read_costs().get(key)
    try:
        costs = PassCosts({int(w): float(t) for w, t in entry["verify"].items()}, float(entry["draft_step"]))
        return costs, bool(entry.get("busy", False))
    except (TypeError, KeyError, AttributeError, ValueError):
        return None, False


def _write_costs(key: str, entry: dict) -> None:
    """Add one entry to the costs file, atomically."""
    write_json(costs_file(), {**_read_costs(), key: entry})


@torch.inference_mode()
def _time_widths(target: CausalLM, max_width: int) -> dict[int, float]:
    model = target.model
    device = model.device
    runner = KVRunner(model, 1)
    runner.forward(torch.arange(4, 4 + _CONTEXT, device=device)[None] % target.vocab_size)
    feed = torch.arange(max_width, device=device)[None] % target.vocab_size
    runner.forward(feed[:, :1])  # warm-up
    runner.truncate(runner.lengths - 1)
    times: dict[int, list[float]] = {w: [] for w in range(1, max_width + 1)}
    for _ in range(_REPEATS):
        for w in times:  # interleaved over widths, so that drift hits all of them alike
            t0 = time.perf_counter()
            runner.forward(feed[:, :w], logits_to_keep=w)
            times[w].append(time.perf_counter() - t0)
            runner.truncate(runner.lengths - w)
    return {w: sorted(ts)[len(ts) // 2] for w, ts in times.items()}


def _draft_ratio(target: CausalLM, drafter: Drafter | None) -> float:
    """Seconds per drafted token over seconds of the one-token target pass timed just before it
    (median over proposals of 4 greedy tokens on a dummy prompt; cached per drafter). The pass
    leaves the CPU's caches as decoding does; the ratio cancels the machine's slow spells."""
    if drafter is None:
        return 0.0
    if drafter in _STEP_CACHE:
        return _STEP_CACHE[drafter]
    runner = KVRunner(target.model, 1)
    with torch.inference_mode():
        runner.forward(torch.arange(4, 4 + _CONTEXT, device=target.model.device)[None] % target.vocab_size)
    one = torch.full((1, 1), 7 % target.vocab_size, dtype=torch.int64, device=target.model.device)
    prompt = [(5 + i) % target.vocab_size for i in range(_CONTEXT)]
    features = None
    if drafter.reads_target_features:
        features = [torch.zeros(_CONTEXT - 1, target.model.config.hidden_size, dtype=target.model.dtype,
                                device=target.model.device)]
    drafter.keep(torch.zeros(0, dtype=torch.int64))
    drafter.add([prompt], features)
    ask = DraftAsk.of([4], target.vocab_size, SamplingParams(temperature=0), dtype=torch.float32)
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
        emitted = d.tokens[0, : int(d.num_draft[0])].tolist() or [5]  # as if all were accepted
        feats = None if features is None else [features[0][: len(emitted)]]
        drafter.update([emitted], feats)
    drafter.keep(torch.zeros(0, dtype=torch.int64))
    # a drafter without a model (prompt lookup) takes no forward: drafting is free
    ratio = sorted(ratios[1:])[len(ratios[1:]) // 2] if forwards else 0.0
    _STEP_CACHE[drafter] = ratio
    return ratio
