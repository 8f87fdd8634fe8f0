"""The answer archives kept in ``datasets/`` read back, hold what their card says, and never put
one instruction on both sides of the split."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verispec.distill.archive import read_archive
from verispec.distill.instructions.asked import FAMILIES as ASKED_FAMILIES
from verispec.distill.instructions.families import FAMILIES

DATASETS = Path(__file__).resolve().parent.parent / "datasets"
ARCHIVES = sorted(DATASETS.glob("*/*.safetensors"))
SMOLLM2_VOCAB = 49152


def _card_rows(card: Path) -> dict[str, tuple[int, int, int]]:
    """``| file | answers | answer tokens | tokens in all | ...`` rows of a card's table."""
    rows = {}
    for line in card.read_text().splitlines():
        m = re.match(r"\|\s*`?([\w.-]+\.safetensors)`?\s*\|\s*([\d,]+)\s*\|\s*([\d,]+)\s*\|\s*([\d,]+)\s*\|", line)
        if m:
            rows[m.group(1)] = tuple(int(g.replace(",", "")) for g in m.groups()[1:])
    return rows


def test_there_are_archives_to_check() -> None:
    assert ARCHIVES, "datasets/ holds no answer archive"


@pytest.mark.parametrize("path", ARCHIVES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_an_archive_reads_back_and_matches_its_card(path: Path) -> None:
    a = read_archive(path)
    assert set(a.families) <= set(FAMILIES) | set(ASKED_FAMILIES)
    assert max(max(s) for s in a.sequences) < SMOLLM2_VOCAB
    rows = _card_rows(path.parent / "README.md")
    assert path.name in rows, f"{path.parent / 'README.md'} has no row for {path.name}"
    assert rows[path.name] == (len(a.ids), a.answer_tokens, sum(map(len, a.sequences)))


def test_no_instruction_is_in_two_archives() -> None:
    seen: dict[str, str] = {}
    for path in ARCHIVES:
        for i in read_archive(path).ids:
            assert i not in seen, f"{i} is in {seen[i]} and {path.name}"
            seen[i] = path.name
