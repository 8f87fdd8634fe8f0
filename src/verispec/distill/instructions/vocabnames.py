"""Closed-book questions about the names the target's own vocabulary holds: part 6 of the asked
instructions.

Parts 4 and 5 (:mod:`.trivia`, :mod:`.quiz`) ask 1,800 questions about 650 hand-written names and
subjects and moved the head's QA family where nothing else had; writing ten times as many by hand is
not a plan. The
target's tokenizer already lists the names its training text used most: a byte-pair vocabulary
gives a whole token to every word frequent enough, in the order of its merges (frequent first).
:func:`proper_nouns` keeps the capitalised whole words (``"ĠCopernicus"``, ``"ĠKabul"``) whose
lower-case form is not a word of the vocabulary (so "However" and "Water" drop out), that start
no longer such word (``"Canad"`` is a piece of "Canada"), that are not demonyms or calendar words,
that appear nowhere in the out-of-style split's file (prompts, passages and first answers), and
that are not among :data:`ANSWER_NAMES`, the names the target's own answers to the split use: the
split asks about none of them and is answered with none of them.

Each name is asked in ``per_name`` of :data:`ASKS`, wordings that fit a person, a place, a work or
a people alike; the answers are the target's own, whatever it makes of the name. The questions go
through part 4's guard and shapes (:func:`.trivia.trivia_instructions`: a question near a split
question dropped, two in three typed as into a search box).

``python -m verispec.distill.instructions.vocabnames --out asked6.jsonl`` writes
``{"id", "family": "qa", "source", "split": "train", "text"}`` lines, a pure function of this file,
the split's file and the target's tokenizer.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ...workloads.outofstyle import SPLIT_PATH
from .trivia import run_cli, trivia_instructions

__all__ = ["ANSWER_NAMES", "ASKS", "main", "proper_nouns", "split_words", "vocab_name_instructions"]

ASKS: tuple[str, ...] = (
    "what is {x} known for", "tell me about {x}", "why is {x} famous", "what should I know about {x}",
    "give me some facts about {x}", "what is the history of {x}", "what do you know about {x}",
    "what is special about {x}",
)

# The words of proper_nouns(vocab, split_words()) that occur in the target's greedy answers to the
# split's 254 prompts (2026-12-07, the split's archive of `distill features`; 27 of the 28 in QA's):
ANSWER_NAMES = frozenset(
    "Alan Alexander Allah Apollo Austen Berlin Canberra Celsius Danube Einstein England Fahrenheit Fleming "
    "Germany Graham Greece Hungary Kelvin Leonardo Lisa London Neil Neptune Nobel Turing Uranus Vinci Welsh".split())

_NAME = re.compile(r"[A-Z][a-z]{3,}")
_CALENDAR = frozenset(
    "January February March April June July August September October November December "
    "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split())
_DEMONYM_ENDS = ("ian", "ians", "ese", "ish", "ans", "ean", "eans", "ern", "ic")
_WORD = re.compile(r"[A-Za-z]+")


def split_words(path: Path = SPLIT_PATH) -> frozenset[str]:
    """Every word of the out-of-style split's file (its prompts, passages and first answers)."""
    return frozenset(_WORD.findall(path.read_text(encoding="utf-8")))


def proper_nouns(vocab: Mapping[str, int], exclude: Iterable[str] = ()) -> list[str]:
    """The names of a byte-level BPE ``vocab`` (token -> id; ``"Ġ"`` marks a leading space), in
    id order: capitalised whole words of four or more letters whose lower-case form is not a word
    of the vocabulary, that are not a proper prefix of another capitalised word (a merge's piece),
    not a month or weekday, not ending like a demonym or adjective, and not in ``exclude``."""
    words = {s[1:]: i for s, i in vocab.items() if s.startswith("Ġ") and _NAME.fullmatch(s[1:])}
    lower = {s[1:] for s in vocab if s.startswith("Ġ")}
    drop = set(exclude) | _CALENDAR
    names = [w for w in words if w.lower() not in lower and w not in drop and not w.endswith(_DEMONYM_ENDS)]
    ordered = sorted(words)  # the words that start with a word follow it at once in sorted order
    pieces = {a for a, b in zip(ordered, ordered[1:]) if b.startswith(a)}
    return sorted((w for w in names if w not in pieces), key=words.__getitem__)


def vocab_name_instructions(per_name: int = 1, names: Sequence[str] | None = None) -> list[dict]:
    """The part 6 lines: every name of ``names`` (default: :func:`proper_nouns` of the built-in
    target's tokenizer less :func:`split_words` and :data:`ANSWER_NAMES`) asked in ``per_name`` of
    :data:`ASKS`."""
    if names is None:
        from ...models import load_causal_lm

        names = proper_nouns(load_causal_lm("smollm2-135m").tokenizer.get_vocab(), split_words() | ANSWER_NAMES)
    return trivia_instructions(per_name, asks={"name": ASKS}, things={"name": tuple(names)}, part=6,
                               source="vocab")


def main(argv: Sequence[str] | None = None) -> int:
    """Write the part 6 instructions; print the count."""
    return run_cli(argv, "python -m verispec.distill.instructions.vocabnames",
                   "Closed-book questions about the names the target's vocabulary holds (part 6).",
                   vocab_name_instructions)


if __name__ == "__main__":
    sys.exit(main())
