"""General-knowledge closed-book questions for part 3 of :mod:`.asked`: regions, things and units.

The out-of-style split's QA family is trivia (who painted, how many, where is, what causes); the
closed-book questions of parts 1 and 2 ask about time-zone cities, single-word pictographs and the
ISO code lists. Part 3 asks the same kinds of trivia about other material, each drawn from a file
or package already installed, never from a hand-written list of facts:

* the states, provinces, regions, prefectures, counties ... of ISO 3166-2
  (``/usr/share/iso-codes/json/iso_3166-2.json``, the Debian ``iso-codes`` package, LGPL-2.1+);
* the things named by the multi-word Unicode pictograph names (``hot dog``, ``statue of liberty``;
  :mod:`unicodedata`, the Unicode licence), the symbols, faces and hands left out;
* conversions between the units of :mod:`scipy.constants` (BSD-3; its table of values, not its
  docstrings, which the split reads), "how many feet are in a mile".

Each question's wording is a stable function of what it asks about; about one in three is written
capitalised with a question mark, the rest lower-case as typed into a search box.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

from ...workloads.outofstyle import stable_key

__all__ = ["REGION_TYPES", "general_questions", "pictograph_things", "region_names", "unit_questions"]

ISO_3166_2 = Path("/usr/share/iso-codes/json/iso_3166-2.json")
REGION_TYPES = ("State", "Province", "Region", "Prefecture", "County", "Governorate", "Department", "Canton",
                "Republic", "Land", "Autonomous community", "Oblast", "Voivodship", "Emirate", "Union territory",
                "Autonomous region")
REGION_QUESTIONS = ("what is the capital of {s}", "where is {s}", "what country is {s} in",
                    "what is {s} known for", "how many people live in {s}", "what language do people speak in {s}",
                    "what is the largest city in {s}", "what is the climate like in {s}",
                    "what is there to see in {s}", "what is the history of {s}")
THING_QUESTIONS = ("who invented the {t}", "when was the {t} invented", "how does {a} {t} work",
                   "what is the history of the {t}", "what is {a} {t} used for", "where did the {t} come from",
                   "why is it called {a} {t}", "how much does {a} {t} cost", "what are the parts of {a} {t}",
                   "how is {a} {t} made")
UNIT_QUESTIONS = ("how many {u} are in {a} {b}", "how many {u} make {a} {b}", "how many {u} are there in one {b}",
                  "{a} {b} is how many {u}")
# unit name -> (plural, dimension); the values are scipy.constants' (in SI units)
UNITS = {"minute": ("minutes", "time"), "hour": ("hours", "time"), "day": ("days", "time"),
         "week": ("weeks", "time"), "year": ("years", "time"), "inch": ("inches", "length"),
         "foot": ("feet", "length"), "yard": ("yards", "length"), "mile": ("miles", "length"),
         "nautical_mile": ("nautical miles", "length"), "ounce": ("ounces", "mass"), "pound": ("pounds", "mass"),
         "stone": ("stones", "mass"), "short_ton": ("tons", "mass"), "metric_ton": ("metric tons", "mass"),
         "fluid_ounce": ("fluid ounces", "volume"), "gallon": ("gallons", "volume"), "liter": ("liters", "volume"),
         "barrel": ("barrels", "volume"), "acre": ("acres", "area"), "hectare": ("hectares", "area")}
_COMPASS = {"North", "South", "East", "West", "Central", "Centre", "Center", "Northern", "Southern", "Eastern",
            "Western", "North East", "North West", "South East", "South West", "Capital", "Coast", "Islands"}
_LEFT_OUT = re.compile(
    r"\b(face|faces|hand|hands|sign|symbol|with|black|white|arrow|arrows|mark|squared|circled|digit|letter|keycap|"
    r"modifier|regional|box|triangle|square|circle|light|heavy|left|right|up|down|pointing|ornament|medium|"
    r"large|small|bold|sans|negative|ballot|emoji|frame|wedge|lower|upper|turned|reversed|rotated|cross|star|"
    r"quadrant|sextant|segment|block|shade|diagonal|oblique|sided|boxed|clockwise|anticlockwise|tag|neutral|"
    r"rightwards|leftwards|upwards|downwards|oncoming)\b")


def _key(*parts: str) -> int:
    return int(stable_key(*parts)[:12], 16)


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" or word.startswith("hour") else "a"


def _worded(templates: tuple[str, ...], tag: str, name: str, **fields: str) -> str:
    """One of ``templates`` filled in, chosen by ``(tag, name)``; one in three capitalised with a "?"."""
    k = _key(tag, name)
    q = templates[k % len(templates)].format(**fields)
    return q[0].upper() + q[1:] + "?" if (k >> 8) % 3 == 0 else q


def region_names(path: Path = ISO_3166_2) -> list[str]:
    """The ISO 3166-2 subdivisions of the :data:`REGION_TYPES` (``Bavaria``'s German name, ``Ontario``),
    plain names only (no commas, brackets or codes) that no ISO 3166-1 country bears (part 2 asked
    about those: not ``Georgia``), sorted; empty where the list is not installed."""
    if not path.is_file():
        return []
    rows = json.loads(path.read_text(encoding="utf-8"))["3166-2"]
    countries = path.with_name("iso_3166-1.json")
    taken = set(_COMPASS)
    if countries.is_file():
        taken |= {d.get(k, "") for d in json.loads(countries.read_text(encoding="utf-8"))["3166-1"]
                  for k in ("name", "common_name")}
    return sorted({d["name"] for d in rows if d["type"] in REGION_TYPES and d["name"] not in taken
                   and re.fullmatch(r"[^\W\d_](?:[^\W\d_]|[ .'-])+", d["name"])})


def pictograph_things() -> list[str]:
    """Lower-case multi-word names (two or three words) of the Unicode pictographs that name a thing:
    ``hot dog``, ``statue of liberty``, ``fax machine``; faces, hands, symbols and shapes left out."""
    names = set()
    for cp in [*range(0x1F300, 0x1F700), *range(0x1F900, 0x1FB00)]:
        name = unicodedata.name(chr(cp), "").lower()
        if " " in name and len(name.split()) <= 3 and not re.search(r"[\d-]", name) and not _LEFT_OUT.search(name):
            names.add(name)
    return sorted(names)


def unit_questions() -> list[tuple[str, str]]:
    """``(source, question)`` asking how many of a smaller unit make a larger one of the same kind,
    for every pair of :data:`UNITS` whose ratio is between 2 and 100,000."""
    import scipy.constants as sc

    rows = []
    for a, (a_plural, dim) in UNITS.items():
        for b, (_, dim_b) in UNITS.items():
            ratio = getattr(sc, b) / getattr(sc, a)
            if dim == dim_b and 2 <= ratio <= 100_000:
                rows.append((f"units:{a}:{b}", _worded(UNIT_QUESTIONS, "u", a + b, u=a_plural, b=b.replace("_", " "), a=_article(b))))
    return rows


def general_questions(regions: int, things: int) -> list[tuple[str, str]]:
    """``(source, question)``: ``regions`` region questions and ``things`` pictograph questions (each
    the first of its list in a stable shuffled order), then every unit question."""
    regs = sorted(region_names(), key=lambda s: _key("region", s))[:regions]
    objs = sorted(pictograph_things(), key=lambda t: _key("thing", t))[:things]
    return ([(f"iso3166-2:{s}", _worded(REGION_QUESTIONS, "r", s, s=s)) for s in regs]
            + [(f"unicode:{t}", _worded(THING_QUESTIONS, "t", t, t=t, a=_article(t))) for t in objs]
            + unit_questions())
