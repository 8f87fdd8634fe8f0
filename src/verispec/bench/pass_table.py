"""The pass-cost table every ``verispec bench`` run prints: where this machine stands.

Speedup = tokens per pass / (verify cost + draft cost), so a run is read against what a pass of
n tokens costs relative to a one-token pass, v(n)/v(1) for n = 1..16, and what one draft step
costs, c = draft step / v(1). These are the numbers ``k="auto"`` weighs
(:mod:`verispec.engine.costs`): measured once per model, drafter and machine before the run,
on one row after a short context, each draft step right after a target pass (as in decoding,
where the pass has pushed the draft model's weights out of the CPU's caches). They are printed
as measured, not judged: what a pass may cost is a fact of the CPU and the kernels, and which K
pays for it is the policy's and the theory's question.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..drafters import EagleDrafter, HybridDrafter
from ..engine.costs import measure_pass_costs
from ..models import CausalLM, kernel_report

__all__ = ["pass_cost_table"]

MAX_WIDTH = 16


def pass_cost_table(target: CausalLM, drafters: Sequence, cpu: str) -> dict:
    """``{"cpu", "v1_ms", "ratio": {n: v(n)/v(1)}, "drafters": {label: {"draft_step_ms", "c"}},
    "kernels"}`` for the bench entries ``drafters`` (objects with ``label``, ``drafter`` and
    ``kind``); ``kernels`` holds :func:`verispec.models.kernel_report` of the target and of each
    EAGLE head (which CPU kernels the load picked)."""
    base = measure_pass_costs(target, None, MAX_WIDTH)
    v1 = base.verify[1]
    ratio = {n: base.verify[n] / v1 for n in range(1, MAX_WIDTH + 1)}
    rows = {}
    for d in drafters:
        step = measure_pass_costs(target, d.drafter, MAX_WIDTH).draft_step
        rows[d.label] = {"kind": d.kind, "draft_step_ms": 1e3 * step, "c": step / v1}
    kernels = {"target": kernel_report(target)}
    for d in drafters:
        inner = d.drafter.model if isinstance(d.drafter, HybridDrafter) else d.drafter
        if isinstance(inner, EagleDrafter) and inner.model is not None:
            kernels[d.label] = kernel_report(inner.model)
    return {"cpu": cpu, "v1_ms": 1e3 * v1, "ratio": ratio, "drafters": rows, "kernels": kernels}
