"""The out-of-style evaluation split (``verispec/data/outofstyle``): its size per family, its
Spec-Bench format, and that none of its prompts shares text with what the draft head trained on.

Overlap is measured in 12-word windows (case-folded ``\\w+`` words, the shingles the instruction
generator already uses against the built-in workloads): cheaper than tokenising and stricter
(no punctuation or spacing difference hides a copy). Two references: the decoded user turns of
every answer archive kept in ``datasets/`` (the prompts the shipped head really trained on) and
``verispec distill instructions --n 2000 --seed 0`` built here (the generator on this machine's
sources, ~10 s). Chat-template text is not a prompt's own and is left out on both sides.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from verispec.distill.archive import read_archive
from verispec.distill.instructions.build import shingles
from verispec.workloads import load_prompt_file
from verispec.workloads.outofstyle import (CATEGORIES, SOURCES_PATH, SPLIT_PATH, handwritten_lines, passage_lines,
                                           render_turns, source_versions)

ROOT = Path(__file__).resolve().parent.parent
ARCHIVES = sorted((ROOT / "datasets").glob("*/*.safetensors"))
TOKENIZER = ROOT / "src" / "verispec" / "data" / "smollm2-135m-draft"  # SmolLM2's tokenizer and chat template
WINDOW = 12
USER, END = "<|im_start|>user\n", "<|im_end|>"


def _lines(path: Path = SPLIT_PATH) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


def _own_text(line: dict) -> list[str]:
    """The text a line's author wrote: its turns, or for a rendered two-turn line its two turns
    (its first answer is the target's)."""
    return list(line["turns_source"]) if "turns_source" in line else list(line["turns"])


def check_split(lines: list[dict], per_family: int = 40) -> None:
    """Raise AssertionError unless ``lines`` is a valid split (see the tests below)."""
    counts = Counter(d["category"] for d in lines)
    assert set(counts) == set(CATEGORIES), counts
    assert min(counts.values()) >= per_family, counts
    assert len({d["question_id"] for d in lines}) == len(lines), "question_id repeated"
    for d in lines:
        assert isinstance(d["turns"], list) and d["turns"] and all(isinstance(t, str) and t.strip() for t in d["turns"])
        assert d.get("source"), f"{d['question_id']}: no source"
        if d["category"] == "mt_bench":
            t1, t2 = d["turns_source"]
            text = d["turns"][0]
            assert d["chat"] is False and text.endswith("<|im_start|>assistant\n")
            a, b, c = text.find(t1), text.find(d["first_answer"]), text.rfind(t2)
            assert 0 <= a < b < c, f"{d['question_id']}: the turns are not in order in the prompt"
            assert d["first_answer"].strip(), f"{d['question_id']}: empty first answer"


def test_split_has_every_family_in_spec_bench_format() -> None:
    lines = _lines()
    check_split(lines)
    prompts = load_prompt_file(SPLIT_PATH)  # the loader bench and distill use accepts every line
    assert len(prompts) == len(lines)
    assert Counter(p.category for p in prompts) == Counter(d["category"] for d in lines)


def test_check_split_catches_broken_splits() -> None:
    lines = _lines()
    short = [d for d in lines if d["category"] != "qa"] + [d for d in lines if d["category"] == "qa"][:39]
    with pytest.raises(AssertionError):
        check_split(short)
    swapped = [dict(d) for d in lines]
    mt = next(d for d in swapped if d["category"] == "mt_bench")
    mt["turns_source"] = mt["turns_source"][::-1]
    with pytest.raises(AssertionError):
        check_split(swapped)


def test_handwritten_families_are_what_the_builder_writes() -> None:
    built = {d["question_id"]: d for d in handwritten_lines()}
    shipped = {d["question_id"]: d for d in _lines() if d["category"] in ("translation", "qa", "math_reasoning")}
    assert built == shipped


def test_passage_families_are_what_the_builder_writes_from_the_same_sources() -> None:
    if source_versions() != json.loads(SOURCES_PATH.read_text()):
        pytest.skip("numpy / scipy / networkx or the licence files here differ from those the split was built from")
    built = {d["question_id"]: d for d in passage_lines()}
    shipped = {d["question_id"]: d for d in _lines() if d["category"] in ("summarization", "rag")}
    assert built == shipped


def test_two_turn_prompts_are_the_chat_template_of_the_conversation() -> None:
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(TOKENIZER))
    for d in _lines():
        if d["category"] == "mt_bench":
            assert d["turns"][0] == render_turns(tok, *d["turns_source"][:1], d["first_answer"], d["turns_source"][1])


@lru_cache(maxsize=1)
def _archive_user_turns() -> tuple[str, ...]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER / "tokenizer.json"))
    texts = []
    for path in ARCHIVES:
        a = read_archive(path)
        prompts = tok.decode_batch([list(s[:n]) for s, n in zip(a.sequences, a.prompt_len)], skip_special_tokens=False)
        texts += [p.split(USER, 1)[-1].rsplit(END, 1)[0] for p in prompts]
    return tuple(texts)


def _shared_windows(lines: list[dict], reference: list[str] | tuple[str, ...]) -> dict[str, set[str]]:
    ref: set[str] = set()
    for t in reference:
        ref |= shingles(t, WINDOW)
    out = {}
    for d in lines:
        common = set().union(*(shingles(t, WINDOW) for t in _own_text(d))) & ref
        if common:
            out[d["question_id"]] = common
    return out


def test_no_prompt_shares_12_words_with_the_kept_training_archives() -> None:
    reference = _archive_user_turns()
    assert len(reference) > 5000  # every kept archive decoded
    assert _shared_windows(_lines(), reference) == {}


def test_no_prompt_shares_12_words_with_the_instruction_generator() -> None:
    from verispec.distill.instructions.build import build_instructions

    reference = [i.text for i in build_instructions(2000, seed=0)]
    assert _shared_windows(_lines(), reference) == {}


def test_the_overlap_check_finds_a_copied_prompt() -> None:
    lines = _lines()
    copied = dict(lines[100], turns=["Please answer this. " + _archive_user_turns()[7]])
    assert set(_shared_windows([copied], _archive_user_turns())) == {copied["question_id"]}
