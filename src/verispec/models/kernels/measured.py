"""Linear kernels chosen per row count by timing them on this machine (``kernel_choice="measured"``).

Which kernel is faster for how many rows depends on the CPU (AVX2 or AVX-512, cache sizes), the
torch build and the thread count. At load, for each distinct linear shape of the model and for
the output head, every candidate (plain ``F.linear``, oneDNN-packed, for the head ``(W @ x.T).T``,
and for float32 weights ``rowdot`` where it builds) is timed for 1..16 rows, and each row count
gets the fastest (:func:`measured_linears`). The choices are kept in :func:`~.timing.kernels_file`,
keyed by CPU model, torch version, thread count, shape and candidates, so later loads on the same
machine time nothing (and a new candidate is timed on first use).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

import torch
from torch import nn

from ..paths import machine_key
from ..rowdot import ROWDOT_VERSION, load_rowdot
from . import timing
from .fixed import fast_linear_forward
from .packed import pack_weight, packed_linear
from .plan import HEAD_MAX_ROWS, KERNELS, MAX_ROWS, MM_T, PACKED, PLAIN, ROWDOT, eligible, set_plan

__all__ = ["MEASURE_ROWS", "kernel_calls", "measured_linears"]


MEASURE_ROWS = (1, 2, 3, 4, 5, 6, 8, 9, 12, 16)  # row counts timed; the others up to 16 are interpolated


def _shape_key(mod: nn.Linear, is_head: bool, methods: tuple[str, ...]) -> str:
    """``"linear 576x1536 float32 [plain,packed]"``: in x out features, bias, dtype, candidates
    (rowdot with its source's digest, :data:`ROWDOT_VERSION`)."""
    kind = "head" if is_head else "linear"
    bias = " bias" if mod.bias is not None else ""
    dtype = str(mod.weight.dtype).removeprefix("torch.")
    names = [f"{m} {ROWDOT_VERSION}" if m == ROWDOT else m for m in methods]
    return f"{kind} {mod.in_features}x{mod.out_features}{bias} {dtype} [{','.join(names)}]"


def _plan_from_times(times: dict[str, dict[int, float]], methods: tuple[str, ...], is_head: bool) -> dict:
    """Per row count 1..16 (the head: 1..32) the kernel with the least time, interpolating
    linearly between the measured row counts (:data:`MEASURE_ROWS`) and keeping the choice at
    16 rows for 17..32; ties go to the earlier method (``plain`` first). ``beyond``: what runs
    more rows, ``plain`` for a decoder linear, for the head the faster of ``plain`` and ``mm_t`` at 16
    rows (``packed`` and ``rowdot`` are timed for few rows only)."""
    def at(method: str, n: int) -> float:
        t = times[method]
        if n in t:
            return t[n]
        lo = max(r for r in t if r < n)
        hi = min(r for r in t if r > n)
        return t[lo] + (t[hi] - t[lo]) * (n - lo) / (hi - lo)

    rows = [min(methods, key=lambda m: at(m, n)) for n in range(1, MAX_ROWS + 1)]
    beyond = PLAIN
    if is_head:
        rows += [rows[-1]] * (HEAD_MAX_ROWS - MAX_ROWS)
        beyond = min((m for m in methods if m not in (PACKED, ROWDOT)), key=lambda m: at(m, MAX_ROWS))
    us = {m: {str(n): round(times[m][n] * 1e6, 1) for n in sorted(times[m])} for m in methods}
    return {"rows": rows, "beyond": beyond, "us": us}


def _valid_plan(entry: object, methods: tuple[str, ...], is_head: bool) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("rows"), list)
            and len(entry["rows"]) == (HEAD_MAX_ROWS if is_head else MAX_ROWS)
            and all(m in methods for m in entry["rows"]) and entry.get("beyond") in methods)


def kernel_calls(mod: nn.Linear, rowdot_fn: Callable[..., torch.Tensor] | None,
                  packed_weight: torch.Tensor | None = None) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """``x [..., in] -> [..., out]`` per kernel name for ``mod`` (what is timed and what is
    installed): the packed kernel (on ``packed_weight``) and rowdot only for float32 inputs and
    weights (rowdot not where autograd would need its gradient: it has no backward), else
    ``F.linear``. They hold the module's Parameter objects, so in-place changes (``.to(dtype)``,
    loading a state dict) are seen."""
    w, b = mod.weight, mod.bias
    f32 = torch.float32
    linear = nn.functional.linear

    def plain(x: torch.Tensor) -> torch.Tensor:
        return linear(x, w, b)

    def packed(x: torch.Tensor) -> torch.Tensor:
        if x.dtype is not f32 or w.dtype is not f32:
            return linear(x, w, b)
        out = packed_linear(x.reshape(-1, x.shape[-1]), packed_weight, b)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def rowdot(x: torch.Tensor) -> torch.Tensor:
        if x.dtype is not f32 or w.dtype is not f32 or (w.requires_grad and torch.is_grad_enabled()):
            return linear(x, w, b)
        out = rowdot_fn(x.reshape(-1, x.shape[-1]), w, b)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def mm_t(x: torch.Tensor) -> torch.Tensor:
        return fast_linear_forward(mod, x)
    return {PLAIN: plain, PACKED: packed, ROWDOT: rowdot, MM_T: mm_t}


def measured_linears(model: nn.Module, *, head: bool = True, linears: bool = True) -> tuple[str, ...]:
    """Give each ``nn.Linear`` of a CPU model, per row count, the kernel that is fastest on this
    machine for its shape (in place; idempotent). Returns which of ``"fast_lm_head"`` and
    ``"fast_small_linears"`` it installed anywhere.

    Candidates: ``plain`` (``F.linear``) always; with ``linears``, ``packed`` (a oneDNN-packed
    float32 weight, :func:`pack_weight`); for the output head with ``head``, ``mm_t``
    (``(W @ x.T).T``, :func:`fast_lm_head`); for float32 weights (decoder linears with
    ``linears``, the head with ``head`` or ``linears``), ``rowdot`` (the compiled kernel of
    :mod:`..rowdot`, where it builds: :func:`load_rowdot`). The modules are grouped by
    (in_features, out_features, bias, dtype); for each group not in :func:`kernels_file` for this
    machine, all of its modules are timed in turn with each candidate on inputs of
    ``[n, in_features]`` for n in :data:`MEASURE_ROWS` (all groups in turn, so that between two
    reads of a weight the model's other weights pass through the caches, as in a forward pass;
    median of 3), and the choice is stored. (Timing only a few modules per shape kept them in a
    large L3: on a 480 MB-L3 Xeon that chose MKL for one row, 5% slower in real passes.) Decoder linears run ``F.linear`` for
    more than 16 rows; the head keeps its 16-row choice up to 32 rows and beyond its faster of
    ``plain`` and ``mm_t``. A module whose plan is ``plain`` throughout is left untouched. Every
    kernel computes the same linear (to float32 rounding). What was picked: :func:`kernel_report`.
    """
    t0 = time.perf_counter()
    get_head = getattr(model, "get_output_embeddings", None)
    head_mod = get_head() if callable(get_head) else None
    can_pack = linears and torch.backends.mkldnn.is_available()
    rowdot_fn: Callable[..., torch.Tensor] | None = None
    if any(eligible(m) and m.weight.dtype == torch.float32 and (linears or head and m is head_mod)
           for m in model.modules()):  # built (or loaded) only for a model that could use it
        rowdot_fn = load_rowdot()
    groups: dict[str, list[nn.Linear]] = {}
    group_methods: dict[str, tuple[str, ...]] = {}
    for mod in model.modules():
        if not eligible(mod):
            continue
        is_head = mod is head_mod
        f32 = mod.weight.dtype == torch.float32
        methods = (PLAIN,) + ((PACKED,) if can_pack and f32 else ()) + ((MM_T,) if is_head and head else ()) \
            + ((ROWDOT,) if rowdot_fn is not None and f32 and (linears or is_head and head) else ())
        if len(methods) == 1:
            continue
        key = _shape_key(mod, is_head, methods)
        groups.setdefault(key, []).append(mod)
        group_methods[key] = methods
    if not groups:  # nothing to choose for (or chosen already: the report of that choice stays)
        return ()
    machine = machine_key()
    stored = timing.read_kernels()
    plans = {key: stored[f"{machine} | {key}"] for key in groups
             if _valid_plan(stored.get(f"{machine} | {key}"), group_methods[key], key.startswith("head"))}
    todo = [key for key in groups if key not in plans]
    packed: dict[int, torch.Tensor] = {}
    timing_s = 0.0
    for key in todo:  # pack the modules to be timed; a build whose ops fail drops the packed candidate
        if PACKED in group_methods[key]:
            for mod in groups[key]:
                p = pack_weight(mod.weight)
                if p is None:
                    group_methods[key] = tuple(m for m in group_methods[key] if m != PACKED)
                    break
                packed[id(mod)] = p
    todo = [key for key in todo if len(group_methods[key]) > 1]
    if todo:
        gen = torch.Generator().manual_seed(0)
        calls: dict[Hashable, Callable[[], object]] = {}
        for n in MEASURE_ROWS:  # interleaved: each group's call comes between the other groups' calls
            for method in (PLAIN, PACKED, MM_T, ROWDOT):
                for key in todo:
                    if method not in group_methods[key]:
                        continue
                    mods = groups[key]
                    x = torch.randn(n, mods[0].in_features, generator=gen).to(mods[0].weight.dtype)
                    fns = [kernel_calls(mod, rowdot_fn, packed.get(id(mod)))[method] for mod in mods]

                    def sweep(fns: list = fns, x: torch.Tensor = x) -> None:
                        for f in fns:
                            f(x)
                    calls[(key, method, n)] = sweep
        t1 = time.perf_counter()
        times = timing.time_calls(calls, rivals=lambda k: (k[0], k[2]))  # rivals: other kernels, same shape and rows
        timing_s = time.perf_counter() - t1
        new = {}
        for key in todo:
            per = {m: {n: times[(key, m, n)] / len(groups[key]) for n in MEASURE_ROWS}
                   for m in group_methods[key]}
            plans[key] = _plan_from_times(per, group_methods[key], key.startswith("head"))
            new[f"{machine} | {key}"] = plans[key]
        timing.write_kernels(new)
    done: set[str] = set()
    for key, mods in groups.items():
        plan = plans[key]
        uses = set(plan["rows"]) | {plan["beyond"]}
        if uses == {PLAIN}:
            continue
        for mod in mods:
            if PACKED in uses:
                p = packed.get(id(mod))
                mod.packed_weight = p if p is not None else pack_weight(mod.weight)
                if mod.packed_weight is None:  # (not expected: the timed modules packed)
                    del mod.packed_weight
                    uses = uses - {PACKED}
                    plan = {**plan, "rows": [PLAIN if m == PACKED else m for m in plan["rows"]]}
            set_plan(mod, tuple(plan["rows"]), plan["beyond"],
                     kernel_calls(mod, rowdot_fn, getattr(mod, "packed_weight", None)))
        is_head = key.startswith("head")
        done |= {"fast_small_linears"} if PACKED in uses or ROWDOT in uses and not is_head else set()
        done |= {"fast_lm_head"} if MM_T in uses or ROWDOT in uses and is_head else set()
    model._verispec_kernels = {"choice": "measured", "machine": machine, "measured": todo,
                               "seconds": round(time.perf_counter() - t0, 3), "timing_seconds": round(timing_s, 3)}
    return tuple(k for k in KERNELS if k in done)
