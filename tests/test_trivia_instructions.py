"""Part 4 of the asked instructions (``verispec.distill.instructions.trivia``): closed-book questions
about well-known things, none near a question of the out-of-style split, written the way people
type them, and the same file every time."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from verispec.distill.instructions import trivia
from verispec.workloads.outofstyle_text import QA_QUESTIONS


def test_near_split_catches_rewordings_and_passes_other_questions() -> None:
    assert trivia.near_split("Who painted the Mona Lisa's smile?")
    assert trivia.near_split("what is the main ingredient in salsa")  # half of the guacamole question's words
    assert trivia.near_split("How deep is the Mariana Trench, in metres?")
    assert not trivia.near_split("who painted the sistine chapel ceiling")  # one content word shared
    assert not trivia.near_split("how tall is the eiffel tower")
    assert all(trivia.near_split(q) for q in QA_QUESTIONS)


def test_no_line_is_near_the_split_and_the_guard_dropped_some() -> None:
    lines = trivia.trivia_instructions(per_name=len(max(trivia.ASKS.values(), key=len)))
    texts = [d["text"] for d in lines]
    assert not [t for t in texts if trivia.near_split(t)]
    asked = sum(len(names) * len(trivia.ASKS[kind]) for kind, names in trivia.THINGS.items())
    assert 0 < asked - len(texts) < asked // 10  # the split's "main ingredient" wording, and little else
    assert not any("main ingredient" in t.lower() for t in texts)


def test_no_name_is_the_answer_to_a_split_question() -> None:
    names = {n.lower() for names in trivia.THINGS.values() for n in names}
    answers = {"leonardo da vinci", "mona lisa", "jupiter", "mars", "titanic", "albert einstein", "marie curie",
               "jane austen", "canberra", "antonio vivaldi", "alexander fleming", "charles babbage", "vatican city",
               "pacific ocean", "mount kilimanjaro", "great barrier reef", "diamond", "octopus", "guitar", "trumpet",
               "volga", "iron", "avocado", "yen", "portuguese", "alexander graham bell", "neil armstrong"}
    assert not names & answers


def test_lines_are_unique_qa_train_lines_in_a_stable_order() -> None:
    lines = trivia.trivia_instructions(per_name=3)
    assert lines == trivia.trivia_instructions(per_name=3)
    assert {d["family"] for d in lines} == {"qa"} and {d["split"] for d in lines} == {"train"}
    assert len({d["id"] for d in lines}) == len(lines) == len({d["text"] for d in lines})
    kinds = Counter(d["source"] for d in lines)
    assert set(kinds) == {f"trivia:{k}" for k in trivia.THINGS}
    assert kinds["trivia:person"] > kinds["trivia:sky"]  # the order is not by kind
    assert [d["source"] for d in lines[:20]] != sorted(d["source"] for d in lines[:20])


def test_two_questions_in_three_are_typed_into_a_search_box() -> None:
    texts = [d["text"] for d in trivia.trivia_instructions(per_name=3)]
    typed = [t for t in texts if t == t.lower() and not t.endswith("?")]
    written = [t for t in texts if t[:1].isupper() and t.endswith("?")]
    assert len(typed) + len(written) == len(texts)
    assert 0.6 < len(typed) / len(texts) < 0.73
    assert trivia.searchbox("Who was Plato?", "k") == trivia.searchbox("who was Plato", "k")


def test_each_name_is_asked_in_its_kinds_wordings() -> None:
    lines = trivia.trivia_instructions(per_name=2)
    wordings = {kind: [re.compile(re.escape(a).replace(re.escape("{x}"), ".+"), re.I) for a in asks]
                for kind, asks in trivia.ASKS.items()}
    for d in lines:
        kind = d["source"].split(":")[1]
        assert any(w.fullmatch(d["text"].rstrip("?")) for w in wordings[kind]), d
    per_kind = Counter(d["source"] for d in lines)
    for kind, names in trivia.THINGS.items():
        assert per_kind[f"trivia:{kind}"] <= 2 * len(names)
        assert per_kind[f"trivia:{kind}"] >= 2 * len(names) - 24


def test_cli_writes_the_file_and_refuses_bad_arguments(tmp_path, capsys) -> None:
    out = tmp_path / "asked4.jsonl"
    assert trivia.main(["--out", str(out), "--per-name", "1"]) == 0
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert lines == trivia.trivia_instructions(per_name=1)
    assert not list(tmp_path.glob("*.part"))
    with pytest.raises(SystemExit):
        trivia.main(["--out", str(out), "--per-name", "0"])
    assert "--per-name must be positive" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        trivia.main(["--out", str(tmp_path / "missing" / "x.jsonl")])
    assert "existing folder" in capsys.readouterr().err
    with pytest.raises(ValueError, match="per_name"):
        trivia.trivia_instructions(per_name=0)
