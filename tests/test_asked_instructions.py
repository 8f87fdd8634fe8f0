"""Training instructions worded the way people ask (``verispec.distill.instructions.asked``): their
sources are not the out-of-style split's, their parts read what they say, and a line marked
``"chat": false`` (a rendered conversation) reaches the target as it is.

The whole build reads the docstrings of 21 packages (~50 s), so these tests check its parts; the
archive its answers went into is checked against the split by ``test_outofstyle`` (no 12-word
window of the split in any kept archive)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verispec.distill.answers import AnswerJob, generate_answers, read_answer_shard, read_jobs
from verispec.distill.instructions import asked
from verispec.engine import SpeculativeDecoder
from verispec.workloads import outofstyle
from verispec.workloads.outofstyle_text import QA_QUESTIONS


def test_sources_are_not_the_out_of_style_splits() -> None:
    assert not set(asked.PACKAGES) & set(outofstyle.DOC_PACKAGES)
    assert not set(asked.PACKAGES) & {"numpy", "scipy", "networkx"}


def test_city_names_are_tzdata_cities() -> None:
    cities = asked.city_names()
    assert len(cities) > 300
    assert {"Lisbon", "New York", "Buenos Aires", "Tokyo"} <= set(cities)
    assert not any("/" in c or "_" in c or c.startswith(("GMT", "Etc")) for c in cities)


def test_emoji_things_are_single_lower_case_words() -> None:
    things = asked.emoji_things()
    assert len(things) > 300 and {"volcano", "octopus", "pineapple"} <= set(things)
    assert all(t.isalpha() and t.islower() for t in things), [t for t in things if not t.isalpha()][:5]


def test_every_part_writes_a_declared_family() -> None:
    short = [(f"pkg.mod.f{i}", f"Returns the thing number {i}", "Returns the thing. " * 20) for i in range(4)]
    rows = asked._summaries([], short, 4) + asked._rag(short, 4) + asked._qa(short, 2, 2)
    assert {r[0] for r in rows} | {"translation", "multiturn"} == set(asked.FAMILIES)


def test_closed_book_questions_are_none_of_the_splits() -> None:
    rows = asked._qa([], 0, 10_000)  # the closed-book part only
    assert len(rows) > 600 and {r[0] for r in rows} == {"qa"}
    assert not {r[2] for r in rows} & {q.lower() for q in QA_QUESTIONS}
    assert all(r[1].startswith(("tz:", "unicode:")) for r in rows)


@pytest.mark.skipif(not Path("/usr/share/locale/de/LC_MESSAGES").is_dir(), reason="no German message catalogs")
def test_translation_sentences_read_as_prose() -> None:
    sentences = asked.translation_sentences("de")
    assert len(sentences) > 100
    for _, s in sentences:
        assert 8 <= len(s.split()) <= 45 and s[-1] in ".!?" and "%" not in s and "<" not in s


def test_rag_prompts_hold_the_document_their_question_names() -> None:
    short = [(f"pkg.mod.f{i}", f"Returns the thing number {i}", f"Returns the thing number {i}. It is unique to f{i}.")
             for i in range(8)]
    rows = asked._rag(short, 8)
    assert len(rows) == 8
    for family, source, text in rows:
        name = source.split(":", 1)[1]
        assert family == "rag" and f"It is unique to {name.split('.')[-1]}." in text


def test_a_line_marked_chat_false_reaches_the_target_as_it_is(tiny_target, tmp_path) -> None:
    lines = [{"id": "a", "family": "qa", "text": "abc d"}, {"id": "b", "family": "multiturn", "text": "abc d",
                                                           "chat": False}]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    jobs = read_jobs(path)
    assert [j.chat for j in jobs] == [True, False]
    generate_answers(tiny_target, jobs, tmp_path / "out", max_new_tokens=2, max_batch=2, shard_size=2, chat=True)
    t, ids, _ = read_answer_shard(next((tmp_path / "out").glob("answers-*.safetensors")))
    dec = SpeculativeDecoder(tiny_target, None)
    got = {jid: t["input_ids"][b, : int(t["prompt_len"][b])].tolist() for b, jid in enumerate(ids)}
    assert got == {"a": dec.encode(["abc d"], chat=True)[0], "b": dec.encode(["abc d"], chat=False)[0]}
    assert AnswerJob("x", "qa", "t").chat  # the default: the run's chat setting applies


def test_spec_bench_lines_are_read_as_instructions(tmp_path) -> None:
    """The out-of-style split answers through ``distill answers`` as it is: the first turn, the
    category as the family, a rendered conversation (``"chat": false``) as plain text."""
    lines = [{"question_id": "qa-00", "category": "qa", "turns": ["who painted the mona lisa"]},
             {"question_id": "mt-00", "category": "mt_bench", "turns": ["<|im_start|>user\nhi"], "chat": False}]
    path = tmp_path / "split.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    assert read_jobs(path) == [AnswerJob("qa-00", "qa", "who painted the mona lisa"),
                               AnswerJob("mt-00", "mt_bench", "<|im_start|>user\nhi", chat=False)]
    path.write_text(json.dumps({"question_id": "x", "category": "qa", "turns": []}) + "\n")
    with pytest.raises(ValueError, match="split.jsonl:1"):
        read_jobs(path)
