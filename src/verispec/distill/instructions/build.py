"""Assemble the instruction corpus: per-family quotas, dedup, the benchmark guard, the held-out
split by source, and JSONL reading / writing.

:func:`build_instructions` is a pure function of (files on disk, ``n``, ``seed``):

1. each family of :data:`.families.FAMILIES` builds more candidates than its quota (its share
   of ``n`` in :data:`WEIGHTS`) with its own seeded RNG;
2. candidates longer than :data:`MAX_CHARS` are dropped, then exact duplicates (same text after
   lower-casing and collapsing whitespace) and near duplicates (same family and source, same
   first 80 normalised characters, and word-trigram Jaccard similarity >= 0.8);
3. any candidate that shares an 8-word shingle (lower-cased words) with a built-in benchmark
   prompt (:func:`verispec.workloads.load_workload`) is dropped, so that no bench prompt, nor a
   large piece of one, is ever trained on;
4. each family keeps its first ``quota`` survivors; a family that falls short (a small pool of
   passages) leaves its shortfall to the families that can make more (chat, math, grounded);
5. the split: a stable hash of the ``source`` id puts about :data:`HELDOUT_FRAC` of the sources
   in "heldout", so every instruction of a source is on one side. A family with fewer than
   ``min(MIN_HELDOUT, quota // 5)`` held-out instructions (few sources: math's templates) moves
   more of its sources to "heldout", in hash order (again whole sources, in every family).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .families import FAMILIES, Candidate
from .sources import Sources, load_sources, stable_fraction

__all__ = ["HELDOUT_FRAC", "MAX_CHARS", "MIN_HELDOUT", "WEIGHTS", "Instruction", "bench_shingles",
           "build_instructions", "drop_bench_overlap", "new_beside", "normalise", "read_jsonl", "shingles",
           "split_counts", "split_of", "write_jsonl"]

WEIGHTS = {"chat": 0.20, "qa": 0.13, "summarization": 0.10, "translation": 0.12, "math": 0.13, "rag": 0.10,
           "code": 0.10, "grounded": 0.12}
ELASTIC = ("chat", "math", "grounded")  # families whose pools do not run dry: they fill shortfalls
MAX_CHARS = 2000
HELDOUT_FRAC = 0.05
MIN_HELDOUT = 40
SHINGLE = 8
SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class Instruction:
    """One user instruction of the corpus. ``id`` is ``<family>-<sha1 of the text>``, stable
    across ``n`` and seeds; ``split`` is "train" or "heldout" (by ``source``)."""

    id: str
    family: str
    source: str
    split: str
    text: str


def normalise(text: str) -> str:
    """Lower-cased with runs of whitespace collapsed to one space (digits kept)."""
    return " ".join(text.lower().split())


_WORD = re.compile(r"\w+")


def shingles(text: str, k: int = SHINGLE) -> set[str]:
    """The ``k``-word shingles of ``text`` (case-folded words, punctuation ignored)."""
    words = _WORD.findall(text.casefold())
    return {" ".join(words[i:i + k]) for i in range(len(words) - k + 1)}


def bench_shingles(k: int = SHINGLE) -> frozenset[str]:
    """The ``k``-word shingles of every built-in benchmark prompt."""
    from ...workloads import load_workload

    return frozenset(s for p in load_workload("all") for s in shingles(p.text, k))


def drop_bench_overlap(texts: Sequence[str], bench: frozenset[str], k: int = SHINGLE) -> list[bool]:
    """For each text, whether to keep it: False when it shares a ``k``-word shingle with ``bench``."""
    return [bench.isdisjoint(shingles(t, k)) for t in texts]


def split_of(source: str, heldout_frac: float = HELDOUT_FRAC) -> str:
    """The base split of a source id: "heldout" for a stable ``heldout_frac`` of ids."""
    return "heldout" if stable_fraction("split:" + source) < heldout_frac else "train"


def _trigrams(text: str) -> frozenset[str]:
    words = _WORD.findall(text.casefold())
    return frozenset(" ".join(words[i:i + 3]) for i in range(max(len(words) - 2, 1)))


class _Dedup:
    """Exact and near duplicate detection over the candidates seen so far."""

    def __init__(self, jaccard: float = 0.8) -> None:
        self.exact: set[str] = set()
        self.near: dict[tuple[str, str, str], list[frozenset[str]]] = defaultdict(list)
        self.jaccard = jaccard

    def check(self, family: str, d: Candidate) -> str:
        """"" if new (and remembered), else "exact" or "near"."""
        norm = normalise(d.text)
        if norm in self.exact:
            return "exact"
        grams = _trigrams(d.text)
        bucket = self.near[(family, d.source, norm[:80])]
        for other in bucket:
            if len(grams & other) >= self.jaccard * len(grams | other):
                return "near"
        self.exact.add(norm)
        bucket.append(grams)
        return ""


def _quotas(n: int) -> dict[str, int]:
    raw = {f: n * w / sum(WEIGHTS.values()) for f, w in WEIGHTS.items()}
    q = {f: int(v) for f, v in raw.items()}
    for f in sorted(raw, key=lambda f: (q[f] - raw[f], f))[: n - sum(q.values())]:
        q[f] += 1
    return q


def build_instructions(n: int, seed: int = 0, *, sources: Sources | None = None,
                       stats: dict | None = None) -> list[Instruction]:
    """``n`` distinct instructions over all families (fewer only if every pool runs dry), in a
    seeded order; see the module docstring. ``stats``, if given, is filled with counts:
    candidates and drops by reason (``drops``, and ``drops_by_family``), the quotas, and the
    result per family and split."""
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    src = load_sources() if sources is None else sources
    quotas = _quotas(n)
    bench = bench_shingles()
    dedup = _Dedup()
    drops: Counter[tuple[str, str]] = Counter()
    kept: dict[str, list[Candidate]] = {}
    for family in FAMILIES:
        rng = random.Random(f"verispec-instructions:{seed}:{family}")
        want = math.ceil(quotas[family] * (1.6 if family in ELASTIC else 1.25)) + 20
        cands = FAMILIES[family](src, rng, want)
        drops[(family, "candidates")] += len(cands)
        ok = drop_bench_overlap([c.text for c in cands], bench)
        out = []
        for c, clean in zip(cands, ok):
            text = c.text.strip()
            if not text or len(text) > MAX_CHARS:
                drops[(family, "too long or empty")] += 1
                continue
            if not clean:
                drops[(family, "bench overlap")] += 1
                continue
            why = dedup.check(family, Candidate(c.source, text))
            if why:
                drops[(family, f"{why} duplicate")] += 1
                continue
            out.append(Candidate(c.source, text))
        kept[family] = out
    # quotas, with shortfalls passed on to the elastic families
    take = {f: min(quotas[f], len(kept[f])) for f in FAMILIES}
    short = n - sum(take.values())
    while short > 0:
        room = [f for f in ELASTIC if len(kept[f]) > take[f]]
        if not room:
            break
        for f in room:
            if short > 0 and len(kept[f]) > take[f]:
                take[f] += 1
                short -= 1
    chosen = [(f, d) for f in FAMILIES for d in kept[f][:take[f]]]
    heldout = _heldout_sources(chosen, take)
    result = [Instruction(id=f"{f}-{hashlib.sha1(d.text.encode('utf-8')).hexdigest()[:12]}", family=f,
                          source=d.source, split="heldout" if d.source in heldout else "train", text=d.text)
              for f, d in chosen]
    random.Random(f"verispec-instructions:{seed}:order").shuffle(result)
    if stats is not None:
        stats.clear()
        stats.update(_stats(result, drops, quotas))
    return result


def new_beside(instructions: Sequence[Instruction], known: Sequence[Instruction]) -> list[Instruction]:
    """The ``instructions`` that ``known`` (an earlier corpus) does not hold, split so that the two
    corpora never disagree on a source: a source ``known`` has keeps ``known``'s split (so nothing
    from an earlier held-out source is trained on, and an earlier training source is never held
    out), a new source keeps its own. "Holds" is the same text after :func:`normalise`. Order kept."""
    texts = {normalise(i.text) for i in known}
    split = {i.source: i.split for i in known}
    return [replace(i, split=split.get(i.source, i.split)) for i in instructions if normalise(i.text) not in texts]


def _heldout_sources(chosen: Sequence[tuple[str, Candidate]], take: dict[str, int]) -> set[str]:
    """Held-out source ids: the base split, then more sources (hash order) for families below
    their minimum."""
    held = {d.source for _, d in chosen if split_of(d.source) == "heldout"}
    for family in FAMILIES:
        counts = Counter(d.source for f, d in chosen if f == family)
        need = min(MIN_HELDOUT, take[family] // 5)
        have = sum(c for s, c in counts.items() if s in held)
        for s in sorted((s for s in counts if s not in held), key=lambda s: (stable_fraction("split:" + s), s)):
            if have >= need:
                break
            held.add(s)
            have += counts[s]
    return held


def _stats(result: Sequence[Instruction], drops: Counter, quotas: dict[str, int]) -> dict:
    total: Counter[str] = Counter()
    for (_, reason), c in drops.items():
        total[reason] += c
    return {
        "drops": dict(total),
        "drops_by_family": {f: {r: c for (g, r), c in sorted(drops.items()) if g == f} for f in FAMILIES},
        "quotas": quotas,
        **split_counts(result),
    }


def split_counts(result: Sequence[Instruction]) -> dict:
    """``total``, instructions per family and split (``families``), sources per split (``sources``)."""
    by = Counter((i.family, i.split) for i in result)
    return {"total": len(result), "families": {f: {s: by[(f, s)] for s in SPLITS} for f in FAMILIES},
            "sources": {s: len({i.source for i in result if i.split == s}) for s in SPLITS}}


def write_jsonl(instructions: Iterable[Instruction], path: str | Path) -> None:
    """One JSON object per line (keys id, family, source, split, text), written atomically."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for i in instructions:
            f.write(json.dumps(asdict(i), ensure_ascii=False) + "\n")
    tmp.replace(path)


def read_jsonl(path: str | Path) -> list[Instruction]:
    """Instructions written by :func:`write_jsonl`; a malformed line is a ValueError naming it."""
    out = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            inst = Instruction(**{k: obj[k] for k in ("id", "family", "source", "split", "text")})
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}, line {lineno}: not an instruction ({e})") from None
        if inst.split not in SPLITS or not isinstance(inst.text, str):
            raise ValueError(f"{path}, line {lineno}: split must be train or heldout, got {inst.split!r}")
        out.append(inst)
    return out
