"""Toy models as tables (context -> distribution over V tokens) and the target's own sequence law."""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from .reference import Dist

__all__ = ["Context", "TableFn", "PointFn", "TableModel", "target_distribution"]

Context = tuple[int, ...]
#: A toy model: context (token ids so far) -> next-token distribution over V tokens.
TableFn = Callable[[Context], Dist]
#: A point-mass drafter: context -> the token it proposes.
PointFn = Callable[[Context], int]


@dataclass(frozen=True)
class TableModel:
    """A deterministic random table: context -> distribution over ``vocab`` tokens.

    ``kind``: "random" (exponential weights to the power ``sharpness``), "onehot" (a point
    mass), "near" (``base`` perturbed by ~1e-9), "even"/"odd" (support only on even/odd ids,
    for disjoint supports), "copy" (exactly ``base``), "ties" (two tokens share the largest
    probability), "mixed" (one-hot for about half the contexts, random otherwise), "padded"
    (random over all but the last two ids, which get 0: a padded vocabulary), "below"
    (``base`` scaled by 1 - 1e-10: an unnormalised row that lies below ``base`` everywhere),
    "large" (a large vocabulary: four heavy tokens in far-apart inverse-CDF chunks and Gumbel
    blocks, the last one in the final partial chunk, and mass 1e-7 to 3e-7 on every 8th other
    token: every chunk and block holds mass; 0 elsewhere),
    "large_q" (two of the heavy tokens of ``base``'s context and one other, zero elsewhere: few
    draft branches, and a residual with mass on every token).
    """

    vocab: int
    seed: int
    kind: str = "random"
    base: TableModel | None = None
    sharpness: float = 1.0

    def __call__(self, ctx: Context) -> Dist:
        return _table_row(self, ctx)


@functools.lru_cache(maxsize=1_000_000)
def _table_row(m: TableModel, ctx: Context) -> Dist:
    rnd = random.Random(f"{m.seed} {m.kind} {ctx}")  # a string seed: the same tables in every process
    V = m.vocab
    if m.kind in ("copy", "near", "below"):
        assert m.base is not None
        base = m.base(ctx)
        if m.kind == "copy":
            return base
        if m.kind == "below":
            return tuple(b * (1 - 1e-10) for b in base)
        w = [b * (1 + 1e-9 * rnd.uniform(-1, 1)) for b in base]
        return _normalised(w)
    if m.kind in ("large", "large_q"):
        heavy = _heavy_tokens(V, m.seed if m.base is None else m.base.seed, ctx)
        if m.kind == "large":
            w = [rnd.uniform(1e-7, 3e-7) if x % 8 == 0 else 0.0 for x in range(V)]
            for t in heavy:
                w[t] = rnd.expovariate(1.0) + 0.05
        else:
            w = [0.0] * V
            for t in (heavy[0], heavy[3], (heavy[1] + 1) % V):
                w[t] = rnd.expovariate(1.0) + 0.05
        return _normalised(w)
    if m.kind == "onehot" or (m.kind == "mixed" and rnd.random() < 0.5):
        t = rnd.randrange(V)
        return tuple(1.0 if i == t else 0.0 for i in range(V))
    w = [rnd.expovariate(1.0) ** m.sharpness for _ in range(V)]
    if m.kind == "even":
        w = [x if i % 2 == 0 else 0.0 for i, x in enumerate(w)]
    elif m.kind == "odd":
        w = [x if i % 2 == 1 else 0.0 for i, x in enumerate(w)]
    elif m.kind == "padded":
        w = [x if i < V - 2 else 0.0 for i, x in enumerate(w)]
    elif m.kind == "ties":
        top = max(range(V), key=lambda i: w[i])
        other = rnd.choice([i for i in range(V) if i != top])
        w[other] = w[top]
    return _normalised(w)


def _heavy_tokens(V: int, seed: int, ctx: Context) -> list[int]:
    """Four tokens in the first, a middle and a late quarter of the ids and the last 1/64th."""
    rnd = random.Random(f"heavy {seed} {ctx}")
    return [rnd.randrange(0, V // 8), rnd.randrange(3 * V // 8, V // 2), rnd.randrange(5 * V // 8, 3 * V // 4),
            rnd.randrange(V - V // 64, V)]


def _normalised(w: list[float]) -> Dist:
    s = math.fsum(w)
    return tuple(x / s for x in w)


def target_distribution(target: TableFn, n_tokens: int, *, eos: int | None = None,
                        prompt: Context = ()) -> dict[Context, float]:
    """Law of the first ``n_tokens`` tokens of target-only sampling (shorter if EOS ends it).

    Rows need not be normalised: each is scaled by its sum, as sampling by inverse CDF does.
    """
    dist: dict[Context, float] = {(): 1.0}
    for _ in range(n_tokens):
        nxt: dict[Context, float] = {}
        for seq, w in dist.items():
            if eos is not None and seq and seq[-1] == eos:
                nxt[seq] = nxt.get(seq, 0.0) + w
                continue
            row = target(prompt + seq)
            total = math.fsum(row)
            for x, px in enumerate(row):
                if px > 0:
                    nxt[seq + (x,)] = nxt.get(seq + (x,), 0.0) + w * px / total
        dist = nxt
    return dist
