"""Part 6 of the asked instructions (``verispec.distill.instructions.vocabnames``): closed-book
questions about the names a BPE vocabulary holds, none a word of the out-of-style split or of the
target's answers to it, and the same file every time."""

from __future__ import annotations

import json
import re

import pytest

from verispec.distill.instructions import trivia, vocabnames

# A byte-level BPE vocabulary in merge order ("Ġ" = a leading space).
VOCAB = {s: i for i, s in enumerate([
    "Ġthe", "ĠLondon", "ĠHowever", "Ġhowever", "ĠCanad", "ĠCanada", "ĠCanadian", "ĠJanuary", "ĠKabul",
    "ĠJapanese", "ĠCopernicus", "Ġkabuls", "ĠUSA", "ĠAmazon", "Ġamazon", "ĠRuss", "ĠRussell", "ĠWater",
    "Ġwater", "Copernicus", "ĠNile", "ĠZeus",
])}


def test_proper_nouns_keeps_whole_capitalised_names_in_merge_order() -> None:
    assert vocabnames.proper_nouns(VOCAB) == ["London", "Canada", "Kabul", "Copernicus", "Russell", "Nile", "Zeus"]
    # lower-case forms that are words ("However", "Amazon", "Water"), a merge's piece ("Canad", "Russ"),
    # a month, a demonym, an acronym and a token without a leading space all drop out


def test_proper_nouns_leaves_out_the_excluded_words() -> None:
    assert vocabnames.proper_nouns(VOCAB, exclude={"London", "Nile"}) == ["Canada", "Kabul", "Copernicus",
                                                                         "Russell", "Zeus"]


def test_split_words_reads_the_split_file(tmp_path) -> None:
    split = tmp_path / "split.jsonl"
    split.write_text('{"turns": ["Who was Copernicus?", "Tell me about Kabul-on-Sea"]}\n', encoding="utf-8")
    assert {"Copernicus", "Kabul", "Sea", "turns"} <= vocabnames.split_words(split)
    assert vocabnames.proper_nouns(VOCAB, vocabnames.split_words(split)) == ["London", "Canada", "Russell", "Nile",
                                                                            "Zeus"]


def test_every_name_is_asked_in_its_wordings_and_none_near_the_split() -> None:
    names = ["London", "Kabul", "Copernicus", "Zeus"]
    lines = vocabnames.vocab_name_instructions(per_name=3, names=names)
    assert lines == vocabnames.vocab_name_instructions(per_name=3, names=names)
    assert len(lines) == 12 and {d["family"] for d in lines} == {"qa"}
    assert {d["source"] for d in lines} == {"vocab:name"}
    assert [d["id"] for d in lines] == [f"asked6-{i:05d}" for i in range(12)]
    wordings = [re.compile(re.escape(a).replace(re.escape("{x}"), "(.+)"), re.I) for a in vocabnames.ASKS]
    asked = {}
    for d in lines:
        hit = [m for w in wordings if (m := w.fullmatch(d["text"].rstrip("?")))]
        assert hit, d
        asked.setdefault(hit[0].group(1).lower(), set()).add(d["text"])
    assert {n: len(t) for n, t in asked.items()} == {n.lower(): 3 for n in names}
    assert not [d for d in lines if trivia.near_split(d["text"])]


@pytest.mark.slow
def test_the_default_names_hold_no_word_of_the_split_nor_of_its_answers() -> None:
    lines = vocabnames.vocab_name_instructions(per_name=1)
    assert len(lines) > 1500
    texts = " ".join(d["text"] for d in lines)
    words = set(re.findall(r"[A-Za-z]+", texts))
    asked_names = {w for w in words if w[0].isupper()} | {w.capitalize() for w in words}
    assert not asked_names & vocabnames.ANSWER_NAMES
    assert "copernicus" in texts.lower() and "kabul" in texts.lower()
    split = vocabnames.split_words()
    # a name asked in lower case (search-box style) is still not a word of the split
    names = {m.group(1) for d in lines for a in vocabnames.ASKS
             if (m := re.fullmatch(re.escape(a).replace(re.escape("{x}"), "(.+)"), d["text"].rstrip("?"), re.I))}
    assert not {n.capitalize() for n in names} & split


@pytest.mark.slow  # the command reads the built-in target's tokenizer
def test_cli_writes_part_6(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(vocabnames, "proper_nouns", lambda vocab, exclude=(): ["Kabul", "Zeus"])
    out = tmp_path / "asked6.jsonl"
    assert vocabnames.main(["--out", str(out), "--per-name", "2"]) == 0
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 4 and lines == vocabnames.vocab_name_instructions(2, ["Kabul", "Zeus"])
    assert "4 instructions" in capsys.readouterr().out
