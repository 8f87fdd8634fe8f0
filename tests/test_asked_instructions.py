"""Training instructions worded the way people ask (``verispec.distill.instructions.asked``): their
sources are not the out-of-style split's, their parts read what they say, and a line marked
``"chat": false`` (a rendered conversation) reaches the target as it is.

The whole build reads the docstrings of 21 packages (~50 s), so these tests check its parts; the
archive its answers went into is checked against the split by ``test_outofstyle`` (no 12-word
window of the split in any kept archive)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from verispec.distill.answers import AnswerJob, generate_answers, read_answer_shard, read_jobs
from verispec.distill.instructions import asked, general
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


@pytest.mark.skipif(not Path("/usr/share/locale/de/LC_MESSAGES").is_dir(), reason="no German message catalogs")
def test_part_two_translates_other_messages() -> None:
    first, second = asked._translations(40), asked._translations(40, skip=40)
    assert len(first) == len(second) == 40
    assert not {r[2] for r in first} & {r[2] for r in second}
    assert second == [r for r in asked._translations(80) if r not in first]  # the next ones, language by language


def _short_units(n: int) -> list[tuple[str, str, str]]:
    return [(f"pkg.mod.f{i}", f"Returns the thing number {i}", f"Returns the thing number {i}. It is unique to f{i}.")
            for i in range(n)]


def test_part_two_takes_the_documents_and_questions_after_part_ones() -> None:
    short = _short_units(12)
    one, two = asked._rag(short, 5), asked._rag(short, 5, start=5)
    assert len(two) == 5 and not {r[1] for r in one} & {r[1] for r in two}
    q_one = asked._qa(short, 4, 30)
    q_two = asked._qa(short, 4, 30, start_docs=4, start_closed=30)
    assert len(q_two) == 34 and not {r[1] for r in q_one} & {r[1] for r in q_two}


def test_part_two_asks_for_the_same_summaries_in_other_words() -> None:
    long = [(f"doc:pkg.mod{i}", f"pkg.mod{i}", f"Passage {i} " + "word " * 80) for i in range(6)]
    one = {r[1]: r[2] for r in asked._summaries(long, [], 6)}
    two = {r[1]: r[2] for r in asked._summaries(long, [], 6, reask=True)}
    assert one.keys() == two.keys()
    for src, text in one.items():
        assert text != two[src] and long[int(src[-1])][2] in two[src]


@pytest.mark.skipif(not (asked.ISO_CODES / "iso_3166-1.json").is_file(), reason="no ISO code lists")
def test_world_questions_name_countries_currencies_languages_and_code() -> None:
    rows = asked.world_questions()
    tags = {src.split(":")[0] for src, _ in rows}
    assert tags == {"iso3166", "iso4217", "iso639", "iso15924", "pygments"}
    names = {src.split(":", 1)[1] for src, _ in rows}
    assert {"Portugal", "Japan", "Euro", "French", "Python"} <= names
    assert all(src.split(":", 1)[1] in q for src, q in rows)
    assert asked.world_questions(Path("/nonexistent")) == [r for r in rows if r[0].startswith("pygments:")]


def test_no_world_question_is_one_of_the_splits(monkeypatch) -> None:
    asks = [("iso3166:Australia", QA_QUESTIONS[2].upper() + "?"), ("iso3166:Chad", "what is the capital of Chad")]
    monkeypatch.setattr(asked, "world_questions", lambda: asks)
    closed = asked._qa([], 0, 10_000, start_closed=10_000, world=True)
    assert [r[2] for r in closed] == ["what is the capital of Chad"]


def test_only_parts_one_two_and_three_exist() -> None:
    with pytest.raises(ValueError, match="part must be 1, 2 or 3"):
        asked.asked_instructions(part=4)
    with pytest.raises(SystemExit):
        asked.main(["--out", "/tmp/x.jsonl", "--part", "4"])


def _fast_parts(monkeypatch) -> dict[int, list[dict]]:
    """Parts 1-3 built from 1,800 made-up documentation units (two modules of each name) with no
    translations or second turns: what each part takes from the shared lists."""
    units = [(f"pkg.mod{i % 2}.f{i // 2}", f"Returns the thing number {i // 2}", f"Returns thing {i // 2}. Unique {i}.")
             for i in range(1800)]
    monkeypatch.setattr(asked, "doc_units", lambda packages: ([], units))
    monkeypatch.setattr(asked, "_translations", lambda n, skip=0: [])
    monkeypatch.setattr(asked, "_second_turns", lambda n, archive, start=0: [])
    return {part: asked.asked_instructions(part=part) for part in (1, 2, 3)}


def test_part_three_asks_nothing_parts_one_and_two_asked(monkeypatch) -> None:
    parts = _fast_parts(monkeypatch)
    three = parts[3]
    assert all(line["id"].startswith("asked3-") and line["split"] == "train" for line in three)
    earlier = [line for part in (1, 2) for line in parts[part]]
    assert not {line["text"] for line in three} & {line["text"] for line in earlier}
    for family in ("rag", "qa"):  # the documents after parts 1 and 2's, in the same family
        before = {line["source"] for line in earlier if line["family"] == family and line["source"].startswith("doc:")}
        mine = {line["source"] for line in three if line["family"] == family and line["source"].startswith("doc:")}
        assert mine and not mine & before
    assert {line["family"] for line in three} == {"rag", "qa"}  # no summaries; the rest patched out
    tags = Counter(line["source"].split(":")[0] for line in three if line["family"] == "qa")
    assert tags["doc"] and tags["unicode"] and tags["units"]
    if general.ISO_3166_2.is_file():
        assert tags["iso3166-2"] == asked.PART3["qa_regions"]


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
