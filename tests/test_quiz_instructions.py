"""Part 5 of the asked instructions (``verispec.distill.instructions.quiz``): quiz questions of the
shapes the split's QA family asks (records, counts, firsts, abbreviations, countries), about other
things, none near a split question, and the same file every time."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from verispec.distill.instructions import quiz, trivia


def test_no_line_is_near_the_split_and_the_guard_dropped_the_near_ones() -> None:
    lines = quiz.quiz_instructions(per_name=len(max(quiz.ASKS.values(), key=len)))
    texts = {d["text"].lower().rstrip("?") for d in lines}
    assert not [t for t in texts if trivia.near_split(t)]
    # the split asks the smallest country in the world and the tallest mountain in africa
    assert "what is the largest country in the world" not in texts
    assert "which is the tallest mountain in europe" not in texts
    assert "what is the highest mountain in europe" in texts  # one content word shared: kept


def test_no_subject_leads_to_an_answer_of_the_split() -> None:
    subjects = " | ".join(n.lower() for names in quiz.THINGS.values() for n in names)
    for answer in ("leonardo", "vatican", "volga", "jupiter", "mars", "canberra", " yen", "einstein", "vivaldi",
                   "fleming", "babbage", "kilimanjaro", "diamond", "portug", "graham bell", "armstrong", "austen",
                   "curie", "nobel", "trumpet", "avocado", "greece", "olympi", "australia", "pacific"):
        assert answer not in subjects, answer


def test_lines_are_unique_part_5_qa_lines_in_a_stable_order() -> None:
    lines = quiz.quiz_instructions(per_name=3)
    assert lines == quiz.quiz_instructions(per_name=3)
    assert {d["family"] for d in lines} == {"qa"} and {d["split"] for d in lines} == {"train"}
    assert [d["id"] for d in lines] == [f"asked5-{i:05d}" for i in range(len(lines))]
    assert len({d["text"].lower().rstrip("?") for d in lines}) == len(lines)
    kinds = Counter(d["source"] for d in lines)
    assert set(kinds) == {f"quiz:{k}" for k in quiz.THINGS}
    assert [d["source"] for d in lines[:20]] != sorted(d["source"] for d in lines[:20])
    part4 = {d["text"].lower().rstrip("?") for d in trivia.trivia_instructions(per_name=6)}
    assert not part4 & {d["text"].lower().rstrip("?") for d in lines}


def test_each_subject_is_asked_in_its_kinds_wordings() -> None:
    lines = quiz.quiz_instructions(per_name=2)
    wordings = {kind: [re.compile(re.escape(a).replace(re.escape("{x}"), ".+"), re.I) for a in asks]
                for kind, asks in quiz.ASKS.items()}
    for d in lines:
        kind = d["source"].split(":")[1]
        assert any(w.fullmatch(d["text"].rstrip("?")) for w in wordings[kind]), d
    per_kind = Counter(d["source"].split(":")[1] for d in lines)
    for kind, names in quiz.THINGS.items():
        assert len(names) <= per_kind[kind] <= 2 * len(names)


def test_cli_writes_part_5(tmp_path, capsys) -> None:
    """The command is part 4's (``trivia.run_cli``, whose refusals part 4's tests check) over part 5."""
    out = tmp_path / "asked5.jsonl"
    assert quiz.main(["--out", str(out), "--per-name", "1"]) == 0
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert lines == quiz.quiz_instructions(per_name=1) and lines[0]["id"] == "asked5-00000"
    assert f"{len(lines)} instructions" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        quiz.main(["--out", str(out), "--per-name", "0"])
    assert "--per-name must be positive" in capsys.readouterr().err
