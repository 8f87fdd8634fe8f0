"""What CPU kernels a model runs, for printing or checking (:func:`kernel_report`).
"""

from __future__ import annotations

from torch import nn

from .fixed import fast_linear_forward
from .plan import HEAD_MAX_ROWS, MAX_ROWS, MM_T, PACKED, PANEL, PLAIN, ROWDOT

__all__ = ["kernel_report"]


def _rows_of(kinds: tuple[str, ...] | list[str], kind: str) -> list[int]:
    return [n for n, k in enumerate(kinds, start=1) if k == kind]


def kernel_report(model: object) -> dict:
    """What CPU kernels a model (an ``nn.Module``, a ``CausalLM`` or a bound EAGLE draft model)
    runs, for printing (``verispec bench``) or checking.

    Keys: ``choice`` (``"measured"``, ``"fixed"``, or None where no CPU kernel was chosen);
    ``machine`` (CPU model | torch | threads the choice holds for, measured only); ``measured`` (the
    shape keys timed at this load, [] when all came from :func:`kernels_file`), ``seconds`` (wall
    time of the measured choice at load, packing the weights included) and ``timing_seconds`` (the
    part spent timing kernels, 0 when read from the file); ``linears``: per decoder shape
    ``"<in>x<out>"``, ``{"modules": count, "packed_rows": [row counts 1..16 that use the packed
    kernel], "rowdot_rows": [those that use rowdot]}``; ``head``: ``{"shape", "rows": {kernel: [row
    counts 1..32]}, "beyond": kernel for more rows}`` or None; and for an EAGLE draft model
    ``eagle``: ``{"weights": "fp32", "fp16" or "int8", "choice", "us": median microseconds of a one-row
    draft step's linears per weight type (measured only), "cached"}``.
    """
    module = model if isinstance(model, nn.Module) else getattr(model, "model", None)
    if not isinstance(module, nn.Module):
        raise TypeError(f"kernel_report needs a model, got {type(model).__name__}")
    meta = dict(getattr(module, "_verispec_kernels", None) or {})
    get_head = getattr(module, "get_output_embeddings", None)
    head_mod = get_head() if callable(get_head) else None
    report: dict = {"choice": meta.get("choice"), "machine": meta.get("machine"),
                    "measured": meta.get("measured", []), "seconds": meta.get("seconds"),
                    "timing_seconds": meta.get("timing_seconds"),
                    "linears": {}, "head": None}
    for mod in module.modules():
        if not isinstance(mod, nn.Linear):
            continue
        shape = f"{mod.in_features}x{mod.out_features}"
        if hasattr(mod, "kernel_rows"):  # measured
            kinds = list(mod.kernel_rows)
            beyond = mod.kernel_beyond
        elif hasattr(mod, "packed_weight"):  # fast_small_linears (fixed)
            own = getattr(mod.unpacked_forward, "__func__", None)
            unpacked = MM_T if own is fast_linear_forward else PLAIN
            kinds = [PACKED if mod.min_rows <= n <= mod.max_rows else unpacked
                     for n in range(1, (HEAD_MAX_ROWS if mod is head_mod else MAX_ROWS) + 1)]
            beyond = unpacked
            report["choice"] = report["choice"] or "fixed"
        elif getattr(vars(mod).get("forward"), "__func__", None) is fast_linear_forward:  # fast_lm_head alone
            kinds, beyond = [MM_T] * (HEAD_MAX_ROWS if mod is head_mod else MAX_ROWS), MM_T
            report["choice"] = report["choice"] or "fixed"
        else:
            kinds, beyond = [PLAIN] * (HEAD_MAX_ROWS if mod is head_mod else MAX_ROWS), PLAIN
        if mod is head_mod:
            report["head"] = {"shape": shape, "rows": {k: _rows_of(kinds, k) for k in (PACKED, ROWDOT, PANEL, MM_T, PLAIN)
                                                       if k in kinds}, "beyond": beyond}
        else:
            entry = report["linears"].setdefault(shape, {"modules": 0, "packed_rows": _rows_of(kinds, PACKED),
                                                         "rowdot_rows": _rows_of(kinds, ROWDOT)})
            if PANEL in kinds:
                entry["panel_rows"] = _rows_of(kinds, PANEL)
            entry["modules"] += 1
            if entry["packed_rows"] != _rows_of(kinds, PACKED) or entry["rowdot_rows"] != _rows_of(kinds, ROWDOT):
                entry["mixed"] = True  # modules of one shape with different plans (e.g. bias or not)
    if "eagle" in meta:
        report["eagle"] = meta["eagle"]
    return report
