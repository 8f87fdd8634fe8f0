"""``datasets/smollm2-135m-answers/README.md`` is a promise: every archive in the folder has a row
in its table, and each row's answers, answer tokens, tokens in all and precision are the file's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verispec.distill.archive import read_archive

FOLDER = Path(__file__).resolve().parents[1] / "datasets" / "smollm2-135m-answers"
ROW = re.compile(r"^\| `(?P<file>[^`]+\.safetensors)` \| (?P<answers>[\d,]+) \| (?P<answer_tokens>[\d,]+) \| "
                 r"(?P<tokens>[\d,]+) \| (?P<dtype>[^|]+) \|", re.M)


def _rows() -> dict[str, dict[str, str]]:
    return {m["file"]: m.groupdict() for m in ROW.finditer((FOLDER / "README.md").read_text(encoding="utf-8"))}


def test_every_archive_has_a_row_and_every_row_an_archive() -> None:
    assert set(_rows()) == {p.name for p in FOLDER.glob("*.safetensors")}


@pytest.mark.parametrize("name", sorted(_rows()))
def test_a_rows_counts_are_its_archives(name: str) -> None:
    row, archive = _rows()[name], read_archive(FOLDER / name)
    number = lambda s: int(s.replace(",", ""))  # noqa: E731
    assert len(archive.sequences) == number(row["answers"])
    assert sum(len(s) for s in archive.sequences) == number(row["tokens"])
    assert sum(len(s) - p for s, p in zip(archive.sequences, archive.prompt_len)) == number(row["answer_tokens"])
    want = "float32" if row["dtype"].strip() == "float32" else "bfloat16"
    assert archive.dtype.removeprefix("torch.") == want
