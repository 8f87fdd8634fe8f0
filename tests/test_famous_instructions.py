"""Part 7 of the asked instructions (``verispec.distill.instructions.famous``): more closed-book
questions about well-known things, none a name of parts 4 and 5, none leading to an answer of the
out-of-style split, none near a split question, and the same file every time."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from verispec.distill.instructions import famous, quiz, trivia

# the answers to the split's QA questions, and subjects whose answers lead there
SPLIT_ANSWERS = ("leonardo", "mona lisa", "last supper", "vatican", "volga", "jupiter", "io", "europa", "ganymede",
                 "mars", "canberra", "australia", "uluru", "yen", "einstein", "vivaldi", "fleming", "babbage",
                 "kilimanjaro", "diamond", "portug", "graham bell", "armstrong", "austen", "curie", "nobel", "trumpet",
                 "avocado", "guacamole", "greece", "olympi", "pacific", "berlin", "titanic", "octopus", "guitar",
                 "iron", "penicillin", "mariana", "barrier reef", "tides", "photosynthesis", "soccer", "japan")


def _names() -> list[str]:
    return [n for names in famous.THINGS.values() for n in names]


def test_no_line_is_near_the_split_and_the_guard_works_on_these_wordings() -> None:
    lines = famous.famous_instructions(per_name=len(max(famous.ASKS.values(), key=len)))
    texts = {d["text"].lower().rstrip("?") for d in lines}
    assert not [t for t in texts if trivia.near_split(t)]
    # the guard drops a rewording of a split question in part 7's own wordings
    assert trivia.near_split("who painted the mona lisa, and when was it painted")
    assert "who painted the starry night" in texts  # one content word shared with a split question: kept


def test_no_name_is_or_leads_to_an_answer_of_the_split() -> None:
    for name in _names():
        words = re.findall(r"[a-z]+", name.lower())
        for answer in SPLIT_ANSWERS:
            hit = answer in words if " " not in answer and len(answer) <= 4 else answer in name.lower()
            assert not hit, (name, answer)


def test_names_are_new_and_each_is_listed_once() -> None:
    earlier = {n.lower() for things in (trivia.THINGS, quiz.THINGS) for names in things.values() for n in names}
    names = [n.lower() for n in _names()]
    assert not earlier & set(names)
    assert [n for n, c in Counter(names).items() if c > 1] == []
    assert len(names) == 764  # the README and the datasets README name this count
    assert set(famous.THINGS) == set(famous.ASKS)


def test_lines_are_unique_part_7_qa_lines_in_a_stable_order() -> None:
    lines = famous.famous_instructions(per_name=3)
    assert lines == famous.famous_instructions(per_name=3)
    assert {d["family"] for d in lines} == {"qa"} and {d["split"] for d in lines} == {"train"}
    assert [d["id"] for d in lines] == [f"asked7-{i:05d}" for i in range(len(lines))]
    assert len({d["text"].lower().rstrip("?") for d in lines}) == len(lines)
    assert set(Counter(d["source"] for d in lines)) == {f"famous:{k}" for k in famous.THINGS}
    assert [d["source"] for d in lines[:20]] != sorted(d["source"] for d in lines[:20])
    earlier = {d["text"].lower().rstrip("?") for d in trivia.trivia_instructions(per_name=6)}
    earlier |= {d["text"].lower().rstrip("?") for d in quiz.quiz_instructions(per_name=6)}
    assert not earlier & {d["text"].lower().rstrip("?") for d in lines}
    lower = sum(d["text"] == d["text"].lower() and not d["text"].endswith("?") for d in lines)
    assert 0.55 < lower / len(lines) < 0.8  # two in three typed as into a search box


def test_each_name_is_asked_in_its_kinds_wordings() -> None:
    lines = famous.famous_instructions(per_name=3)
    wordings = {kind: [re.compile(re.escape(a).replace(re.escape("{x}"), ".+"), re.I) for a in asks]
                for kind, asks in famous.ASKS.items()}
    for d in lines:
        kind = d["source"].split(":")[1]
        assert any(w.fullmatch(d["text"].rstrip("?")) for w in wordings[kind]), d
    per_kind = Counter(d["source"].split(":")[1] for d in lines)
    for kind, names in famous.THINGS.items():
        assert 2 * len(names) < per_kind[kind] <= 3 * len(names)


def test_cli_writes_part_7(tmp_path, capsys) -> None:
    """The command is part 4's (``trivia.run_cli``, whose refusals part 4's tests check) over part 7."""
    out = tmp_path / "asked7.jsonl"
    assert famous.main(["--out", str(out), "--per-name", "1"]) == 0
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert lines == famous.famous_instructions(per_name=1) and lines[0]["id"] == "asked7-00000"
    assert f"{len(lines)} instructions" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        famous.main(["--out", str(out), "--per-name", "0"])
    assert "--per-name must be positive" in capsys.readouterr().err
