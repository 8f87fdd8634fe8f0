"""Self-instruct: let the target model itself propose user questions, as more ``chat`` instructions.

The templated corpus (:mod:`.build`) only asks what its lists think of; the target knows what
chat users ask about. :func:`self_instruct` asks the model, through any ``target_generate``
callable (prompt texts -> reply texts, so tests pass a fake), for one question about each of
a set of seed subjects, and keeps the replies that are one clean question: the first line that
ends in "?", 20-200 characters, not seen before and not close to a benchmark prompt (the same
8-word shingle guard as the corpus). Each subject is a source (``self:<subject>``), so the
held-out split by source applies as in the corpus.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Sequence

from . import topics as T
from .build import Instruction, bench_shingles, drop_bench_overlap, normalise, split_of

__all__ = ["PROMPTS", "default_subjects", "parse_question", "self_instruct", "target_generator"]

PROMPTS = (
    "Write one question a user might ask an AI assistant about {subject}. Reply with the question only.",
    "Think of a realistic question that someone could ask a helpful assistant about {subject}. "
    "Reply with the question only.",
    "Write one question a curious beginner might ask about {subject}. Reply with the question only.",
    "What is a practical question a person might type into a chat assistant about {subject}? "
    "Reply with the question only.",
)

_QUOTED = re.compile(r'"([^"]+\?)"|“([^”]+\?)”')
_LEAD = re.compile(r"^(?:[-*•\d.)\s]+|q(?:uestion)?\s*\d*\s*[:.-]\s*)+", re.I)


def default_subjects() -> list[str]:
    """Broad seed subjects: the chat family's activities, concepts and list topics."""
    return sorted(set(T.ACTIVITIES) | set(T.CONCEPTS) | set(T.LIST_TOPICS))


def parse_question(reply: str, min_chars: int = 20, max_chars: int = 200) -> str | None:
    """The first line of ``reply`` that is one question (ends in "?", ``min_chars``..``max_chars``
    long), or None. Small models wrap the question ("A person might ask: "...?""), so a quoted
    question, or else the part after the line's last colon, is taken; list markers, a
    "Question:" label and quotes are stripped."""
    for line in reply.splitlines():
        line = line.strip()
        quoted = _QUOTED.search(line)
        if quoted:
            line = quoted.group(1) or quoted.group(2)
        elif ": " in line and not line.rstrip().endswith(":"):
            head, _, tail = line.rpartition(": ")
            if tail.rstrip(" \"'”").endswith("?") and not head.endswith("?"):
                line = tail
        q = _LEAD.sub("", line).strip().strip("\"'“”*` ").strip()
        if q.endswith("?") and min_chars <= len(q) <= max_chars and q.count("?") == 1 and q[:1].isalpha():
            return q[:1].upper() + q[1:]
    return None


def self_instruct(target_generate: Callable[[list[str]], list[str]], seeds: Sequence[str], n: int, seed: int = 0,
                  *, batch_size: int = 16, max_prompts: int | None = None) -> list[Instruction]:
    """Up to ``n`` distinct ``chat`` instructions written by the model (see the module docstring).

    Args:
        target_generate: maps a list of prompt texts to the model's reply texts (same length).
        seeds: the subjects to ask about (cycled in a seeded random order).
        n: how many instructions to return at most.
        seed: the RNG seed for the order of subjects and prompt phrasings.
        batch_size: prompts per ``target_generate`` call.
        max_prompts: stop after this many prompts (default ``4 * n``) even if fewer than ``n``
            replies were usable.
    """
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    subjects = [s.strip() for s in seeds if s and s.strip()]
    if not subjects:
        raise ValueError("self_instruct needs at least one seed subject")
    rng = random.Random(f"verispec-self-instruct:{seed}")
    limit = 4 * n if max_prompts is None else max_prompts
    bench = bench_shingles()
    seen: set[str] = set()
    out: list[Instruction] = []
    order: list[str] = []
    asked = 0
    while len(out) < n and asked < limit:
        batch = []
        while len(batch) < min(batch_size, limit - asked):
            if not order:
                order = list(subjects)
                rng.shuffle(order)
            batch.append(order.pop())
        prompts = [rng.choice(PROMPTS).format(subject=s) for s in batch]
        replies = target_generate(prompts)
        if len(replies) != len(prompts):
            raise ValueError(f"target_generate returned {len(replies)} replies for {len(prompts)} prompts")
        asked += len(prompts)
        for subject, reply in zip(batch, replies):
            q = parse_question(reply if isinstance(reply, str) else "")
            if q is None or normalise(q) in seen or not drop_bench_overlap([q], bench)[0]:
                continue
            seen.add(normalise(q))
            source = "self:" + re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
            out.append(Instruction(id=f"chat-{hashlib.sha1(q.encode('utf-8')).hexdigest()[:12]}", family="chat",
                                   source=source, split=split_of(source), text=q))
            if len(out) == n:
                break
    return out


def target_generator(target, max_new_tokens: int = 48, temperature: float = 0.7,
                     seed: int = 0) -> Callable[[list[str]], list[str]]:
    """A ``target_generate`` for :func:`self_instruct` over a loaded verispec target model
    (its chat template, target-only decoding with verispec's engine)."""
    from ...engine import SpeculativeDecoder
    from ...sampling import SamplingParams

    dec = SpeculativeDecoder(target, None)

    def generate(prompts: list[str]) -> list[str]:
        res = dec.generate(prompts, max_new_tokens, SamplingParams(temperature=temperature, seed=seed), chat=True)
        return list(res.texts)

    return generate
