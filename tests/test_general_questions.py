"""Part 3's general-knowledge trivia (``verispec.distill.instructions.general``): each list reads what
its docstring says, the questions are worded as typed, and none is one of the out-of-style split's."""

from __future__ import annotations

import pytest

from verispec.distill.instructions import asked, general
from verispec.workloads.outofstyle_text import QA_QUESTIONS

needs_iso = pytest.mark.skipif(not general.ISO_3166_2.is_file(), reason="no ISO 3166-2 list")


@needs_iso
def test_regions_are_iso_subdivisions_that_no_country_bears() -> None:
    regions = general.region_names()
    assert len(regions) > 1500
    assert {"Ontario", "California", "Bayern", "Tasmania"} <= set(regions)
    assert not {"Georgia", "North", "Central"} & set(regions)  # a country (part 2 asked) and compass words
    assert not any(c.isdigit() or c in ",()" for r in regions for c in r)


def test_no_region_without_the_list(tmp_path) -> None:
    assert general.region_names(tmp_path / "iso_3166-2.json") == []


def test_pictograph_things_are_multi_word_things() -> None:
    things = general.pictograph_things()
    assert len(things) > 300 and {"hot dog", "statue of liberty", "fax machine"} <= set(things)
    assert all(t.islower() and 2 <= len(t.split()) <= 3 for t in things)
    assert not any(w in t.split() for t in things for w in ("face", "hand", "symbol", "arrow", "sign"))


def test_unit_questions_pair_units_of_one_kind_small_into_large() -> None:
    rows = dict(general.unit_questions())
    assert "feet" in rows["units:foot:mile"] and "mile" in rows["units:foot:mile"]
    assert "units:minute:week" in rows and "units:inch:foot" in rows
    assert "units:hour:minute" not in rows and "units:minute:year" not in rows  # larger into smaller; 525,960
    assert "units:inch:mile" in rows  # 63,360
    assert not any(k.split(":")[1] in ("inch", "foot") and k.split(":")[2] in ("day", "pound") for k in rows)
    assert all(2 <= ratio <= 100_000 for ratio in _ratios(rows))


def _ratios(rows: dict[str, str]) -> list[float]:
    import scipy.constants as sc
    return [getattr(sc, k.split(":")[2]) / getattr(sc, k.split(":")[1]) for k in rows]


def test_articles_read_as_english() -> None:
    rows = dict(general.unit_questions())
    assert "an hour" in rows["units:minute:hour"] or "one hour" in rows["units:minute:hour"]
    assert general._article("adhesive bandage") == "an" and general._article("fax machine") == "a"


def test_wording_is_stable_and_mixes_cases() -> None:
    first, again = general.general_questions(200, 200), general.general_questions(200, 200)
    assert first == again
    asks = [q for _, q in first]
    capital = [q for q in asks if q[0].isupper() and q.endswith("?")]
    assert 0.2 < len(capital) / len(asks) < 0.5
    assert all(q[0].isupper() == q.endswith("?") for q in asks)  # typed lower-case, or written out


def test_no_trivia_question_is_one_of_the_splits(monkeypatch) -> None:
    split_question = next(q for q in QA_QUESTIONS if q.startswith("How many minutes"))
    asks = [("units:minute:week", split_question), ("units:hour:day", "how many hours are in a day")]
    monkeypatch.setattr(asked, "general_questions", lambda regions, things: asks)
    assert [r[2] for r in asked._general(0, 0)] == ["how many hours are in a day"]
