"""The rule's own law, symbolically: the algorithm of docs/design.md section 2 run on table models.

:func:`emitted_distribution` follows every draft branch (weighted by q), every accept/reject
outcome (weighted by the accept probability) and every residual/bonus token of the float64
reference primitives. It proves the *rule* exact on a case; the shipped code is certified by
:mod:`verispec.certify.cells`, which runs :func:`verispec.verify` itself.
"""

from __future__ import annotations

from .reference import accept_probability, gumbel_max_law, residual_distribution
from .tables import Context, PointFn, TableFn

__all__ = ["emitted_distribution"]


def emitted_distribution(
    target: TableFn,
    draft: TableFn | PointFn,
    *,
    k: int,
    n_tokens: int,
    method: str = "exact",
    point_mass: bool = False,
    eos: int | None = None,
    prompt: Context = (),
) -> dict[Context, float]:
    """Exact law of the first ``n_tokens`` tokens emitted by speculative decoding.

    Args:
        target: table giving p for a context.
        draft: table giving q (or, with ``point_mass=True``, a function giving the proposed token).
        k: draft length per iteration.
        n_tokens: how many emitted tokens to look at.
        method: "exact" or "gumbel".
        eos: end-of-sequence token; tokens after an emitted EOS are dropped and the sequence ends.
        prompt: context before the first emitted token.
    """
    finished: dict[Context, float] = {}
    frontier: dict[Context, float] = {(): 1.0}
    while frontier:
        nxt: dict[Context, float] = {}
        for seq, w in frontier.items():
            for block, wb in _one_iteration(target, draft, k, method, point_mass, prompt + seq).items():
                out = seq + block
                if eos is not None and eos in out:
                    out = out[: out.index(eos) + 1]
                done = len(out) >= n_tokens or (eos is not None and out and out[-1] == eos)
                out = out[:n_tokens]
                bucket = finished if done else nxt
                bucket[out] = bucket.get(out, 0.0) + w * wb
        frontier = nxt
    return finished


def _one_iteration(target: TableFn, draft: TableFn | PointFn, k: int, method: str, point_mass: bool,
                   ctx: Context) -> dict[Context, float]:
    """Law of the block of tokens one draft-and-verify iteration emits after ``ctx``."""
    law: dict[Context, float] = {}

    def emit(block: Context, w: float) -> None:
        if w > 0:
            law[block] = law.get(block, 0.0) + w

    def branch(drafted: Context, w: float) -> None:
        here = ctx + drafted
        p = target(here)
        if len(drafted) == k:  # every draft accepted: bonus token
            law_p = gumbel_max_law(p) if method == "gumbel" else p
            for x, px in enumerate(law_p):
                emit(drafted + (x,), w * px)
            return
        if point_mass:
            proposals = [(draft(here), 1.0)]  # type: ignore[arg-type]
            q = None
        else:
            q = draft(here)  # type: ignore[assignment]
            proposals = [(d, qd) for d, qd in enumerate(q) if qd > 0]
        for d, qd in proposals:
            if method == "gumbel":
                # The target's token t ~ Gumbel-max law of p; accept iff d == t, else emit t.
                for t, pt in enumerate(gumbel_max_law(p)):
                    if pt == 0:
                        continue
                    if t == d:
                        branch(drafted + (d,), w * qd * pt)
                    else:
                        emit(drafted + (t,), w * qd * pt)
                continue
            qvec = tuple(1.0 if i == d else 0.0 for i in range(len(p))) if q is None else q
            a = accept_probability(p[d], qvec[d])
            branch(drafted + (d,), w * qd * a)
            for x, rx in enumerate(residual_distribution(p, qvec)):
                emit(drafted + (x,), w * qd * (1 - a) * rx)

    branch((), 1.0)
    return law
