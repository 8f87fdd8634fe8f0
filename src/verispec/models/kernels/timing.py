"""Timing alternatives on this machine, and the file that keeps what was measured.

:func:`time_calls` times calls interleaved (median, warm-up dropped, hopeless rivals pruned);
:func:`measured_choice` picks the fastest of named alternatives once per machine and keeps the
pick in :func:`kernels_file`; :func:`cache_evictor` pushes the CPU's caches out between timed
calls, as a target pass does between draft steps.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Hashable
from pathlib import Path

import torch

from ..paths import cache_dir, machine_key, read_json, write_json

__all__ = [
    "EVICT_BYTES",
    "kernels_file",
    "read_kernels",
    "write_kernels",
    "time_calls",
    "measured_choice",
    "cache_evictor",
]


EVICT_BYTES = 256 << 20  # what cache_evictor writes: more than the L3 of the CPUs this runs on
_REPEATS = 3  # timed calls per (shape, kernel, rows) after a warm-up; the median is kept
_LONG_CALL_S = 2e-3  # calls this long keep their warm-up sample and may be pruned
_PRUNE = 1.5  # a long call this many times slower than its fastest rival is timed only once
_FILE_FORMAT = 2  # 2: every module of a shape timed (1 timed up to 4, which stayed in cache)


def kernels_file() -> Path:
    """Where measured kernel choices are kept: ``$VERISPEC_KERNELS``, else ``cpu-kernels.json`` in
    verispec's cache directory. Delete it to measure again."""
    env = os.environ.get("VERISPEC_KERNELS")
    return Path(env).expanduser() if env else cache_dir() / "cpu-kernels.json"


def read_kernels() -> dict:
    """The stored entries (key -> entry); {} when there is no file or it cannot be read."""
    data = read_json(kernels_file())
    if not isinstance(data, dict) or data.get("format") != _FILE_FORMAT or not isinstance(data.get("entries"), dict):
        return {}
    return data["entries"]


def write_kernels(entries: dict) -> None:
    """Add ``entries`` to the kernels file, atomically."""
    write_json(kernels_file(), {"format": _FILE_FORMAT, "entries": {**read_kernels(), **entries}})


def time_calls(calls: dict[Hashable, Callable[[], object]], repeats: int = _REPEATS,
                rivals: Callable[[Hashable], Hashable] | None = None,
                before: Callable[[], object] | None = None) -> dict[Hashable, float]:
    """Median wall time in seconds of each call, over rounds in which every call runs once in
    turn (every other round reversed), so that drift and cache state hit all alike.

    Round 0 is a warm-up (oneDNN builds a primitive per shape on first use); its sample is
    dropped unless the call took over :data:`_LONG_CALL_S`, where that setup is negligible.
    Then ``repeats`` rounds; with ``rivals`` (call -> what it competes with) a call that took
    over :data:`_LONG_CALL_S` and :data:`_PRUNE` times its fastest rival's time in round 0 is
    not run again (it cannot win; its round-0 time stands). ``before``, if given, runs untimed
    before every call (e.g. :func:`cache_evictor`, to time calls as they run after a target pass)."""
    keys = list(calls)
    first: dict[Hashable, float] = {}
    with torch.inference_mode():
        for k in keys:
            if before is not None:
                before()
            t0 = time.perf_counter()
            calls[k]()
            first[k] = time.perf_counter() - t0
        best: dict[Hashable, float] = {}
        if rivals is not None:
            for k in keys:
                best[rivals(k)] = min(best.get(rivals(k), math.inf), first[k])
        samples = {k: [first[k]] if first[k] > _LONG_CALL_S else [] for k in keys}
        live = [k for k in keys if rivals is None or first[k] <= _LONG_CALL_S or first[k] <= _PRUNE * best[rivals(k)]]
        for r in range(repeats):
            for k in (live if r % 2 == 0 else live[::-1]):
                if before is not None:
                    before()
                t0 = time.perf_counter()
                calls[k]()
                samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) if v else first[k] for k, v in samples.items()}


def measured_choice(key: str, names: tuple[str, ...],
                    make_calls: Callable[[], dict[str, Callable[[], object]]],
                    before: Callable[[], object] | None = None) -> tuple[str, dict]:
    """The fastest of the alternatives ``names`` (computing the same thing) on this machine:
    read from :func:`kernels_file` under ``key`` (plus the machine), else timed now (the calls
    ``make_calls()`` returns, one per name, built only then) and stored. Ties go to the first
    name. ``before`` runs untimed before each timed call (see :func:`time_calls`). Returns
    ``(name, info)``, info holding ``"us"`` (median microseconds per alternative) and
    ``"cached"`` (whether it was read, not timed)."""
    full = f"{machine_key()} | {key}"
    entry = read_kernels().get(full)
    if isinstance(entry, dict) and entry.get("pick") in names and isinstance(entry.get("us"), dict):
        return entry["pick"], {"us": entry["us"], "cached": True}
    calls = make_calls()
    times = time_calls({name: calls[name] for name in names}, before=before)
    us = {name: round(times[name] * 1e6, 1) for name in names}
    pick = min(names, key=lambda name: times[name])
    write_kernels({full: {"pick": pick, "us": us}})
    return pick, {"us": us, "cached": False}


def cache_evictor(nbytes: int = EVICT_BYTES) -> Callable[[], None]:
    """A call that writes ``nbytes`` of memory, pushing what the CPU cached before out of its
    caches, as a target pass (~540 MB of weights for SmolLM2-135M) does between draft steps:
    timed back to back, a draft model's ~20 MB of weights would stay in a large L3 and look
    several times cheaper than in decoding. The buffer is made on the first call and lives as
    long as the returned call."""
    buf: list[torch.Tensor] = []

    def evict() -> None:
        if not buf:
            buf.append(torch.empty(nbytes // 4, dtype=torch.float32))
        buf[0].fill_(1.0)
    return evict
