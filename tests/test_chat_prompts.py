"""verispec.distill.chat_prompts: offline chat prompts built from Python sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from verispec.distill.chat_prompts import chat_prompts


def _corpus(tmp_path: Path) -> list[Path]:
    f = tmp_path / "mod.py"
    f.write_text(
        'def area(width, height):\n    """Return the area of a rectangle."""\n    result = width * height\n'
        "    return result\n\n\n"
        'def _private():\n    """Not used: private names are skipped."""\n    return 1\n'
    )
    return [f]


def test_prompts_are_deterministic_and_use_the_sources(tmp_path: Path) -> None:
    files = _corpus(tmp_path)
    a = chat_prompts(files, 40, seed=3)
    assert a == chat_prompts(files, 40, seed=3) and len(a) == 40
    assert a != chat_prompts(files, 40, seed=4)
    with_code = [p for p in a if "```python" in p]
    assert with_code and all("def area(width, height):" in p for p in with_code)
    assert not any("_private" in p for p in a)
    assert any("Return the area of a rectangle." in p for p in with_code)
    renames = [p for p in a if p.startswith("Rename the variable")]
    assert renames and all("`result` to `result_value`" in p for p in renames)  # the only stored local


def test_no_documented_function_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "x.txt"
    f.write_text("just words\n")
    with pytest.raises(ValueError, match="no documented Python functions"):
        chat_prompts([f], 3)
