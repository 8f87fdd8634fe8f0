"""A broad, offline corpus of user instructions for self-distillation.

The EAGLE draft head learns from the target's answers to chat prompts, so it should see what
people ask a chat model: open questions and writing tasks, questions about a passage, summaries,
translations, math word problems, retrieval-augmented answers with citations, code tasks, and
edits of a given text -- the task families of the benchmark workloads
(:data:`verispec.workloads.BUILTIN_WORKLOADS`), without ever using the benchmark prompts.

Everything is built on this machine, without network access, as a pure function of the files on
disk and a seed:

* :mod:`.sources` reads the material (man pages via :mod:`.roff`, ``/usr/share/doc``,
  ``pydoc_data``, stdlib docstrings and functions, package metadata), each piece with a source id;
* :mod:`.topics` lists everyday subjects and phrasings; :mod:`.mathgen` generates math problems;
* :mod:`.families` builds candidates per family; :mod:`.build` dedups them, drops anything that
  shares an 8-word shingle with a bench prompt, splits train / held-out by source and reads and
  writes JSONL (``python -m verispec.distill.instructions --n 12000 --seed 0 --out FILE``);
* :mod:`.selfinstruct` turns the target's own questions into more ``chat`` instructions.

Instructions worded the way people ask, from other sources, are :mod:`.asked`'s (parts 1-3, with
:mod:`.general`'s trivia), :mod:`.trivia`'s (part 4: questions about well-known things),
:mod:`.quiz`'s (part 5: records, counts, firsts, abbreviations and countries) and
:mod:`.vocabnames`'s (part 6: questions about the names the target's tokenizer holds) and
:mod:`.famous`'s (part 7: more closed-book questions about well-known things).
"""

from __future__ import annotations

from .build import (
    HELDOUT_FRAC,
    MAX_CHARS,
    WEIGHTS,
    Instruction,
    bench_shingles,
    build_instructions,
    drop_bench_overlap,
    new_beside,
    normalise,
    read_jsonl,
    shingles,
    split_counts,
    split_of,
    write_jsonl,
)
from .families import FAMILIES
from .selfinstruct import default_subjects, parse_question, self_instruct, target_generator
from .sources import Sources, load_sources

__all__ = [
    "FAMILIES",
    "HELDOUT_FRAC",
    "MAX_CHARS",
    "WEIGHTS",
    "Instruction",
    "Sources",
    "bench_shingles",
    "build_instructions",
    "default_subjects",
    "drop_bench_overlap",
    "load_sources",
    "new_beside",
    "normalise",
    "parse_question",
    "read_jsonl",
    "self_instruct",
    "shingles",
    "split_counts",
    "split_of",
    "target_generator",
    "write_jsonl",
]
