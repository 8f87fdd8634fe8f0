"""Workloads: the built-in prompt sets and Spec-Bench style ``.jsonl`` files.

Shared by ``verispec bench`` and the acceptance measurement of ``verispec distill``; the
built-in sets are this package's ``prompts/*.jsonl``.

A prompt file has one JSON object per line in the Spec-Bench question format::

    {"question_id": "code-01", "category": "code", "turns": ["Complete this function ..."]}

Only the first turn is used, as a single user message through the target's chat template.
Built-in files may add ``"chat": false`` to feed a turn as raw text instead. Blank lines are
ignored; anything else that is not such an object is a :class:`WorkloadError` naming the line,
or (``skip_bad=True``) skipped with a warning.

An instruction file of ``verispec distill instructions`` (``{"id", "family", "source", "split",
"text"}`` per line) reads the same way, ``family`` as the category; ``split="heldout"`` keeps
only the held-out ones (the prompts a draft trained on the other split never saw).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = ["BUILTIN_WORKLOADS", "BenchPrompt", "WorkloadError", "load_prompt_file", "load_workload"]

BUILTIN_WORKLOADS: dict[str, str] = {
    "code": "Python completion: finish a function or class shown in the prompt",
    "chat": "open instructions answered with the chat template",
    "grounded": "edit / summarise / extract from text given in the prompt (where prompt lookup shines)",
    "qa": "answer one question about a passage of 80-200 words given in the prompt",
    "summarization": "summarise a text of 120-250 words given in the prompt in 2-3 sentences",
    "translation": "translate a short text between English and French, Spanish or German",
    "math": "arithmetic and word problems solved step by step",
    "rag": "answer from 2-4 numbered retrieved documents given in the prompt, citing them",
}


class WorkloadError(ValueError):
    """A workload name or prompt file is unusable; the message names the file and line."""


@dataclass(frozen=True)
class BenchPrompt:
    """One benchmark prompt: ``text`` is the first turn; ``chat`` = apply the chat template."""

    id: str
    category: str
    text: str
    chat: bool = True


def load_workload(names: str) -> list[BenchPrompt]:
    """Prompts of one or more built-in workloads: ``"code"``, ``"code,grounded"`` or ``"all"``."""
    wanted = list(BUILTIN_WORKLOADS) if names.strip() == "all" else [n.strip() for n in names.split(",") if n.strip()]
    if not wanted:
        raise WorkloadError("workload is empty; choose from " + ", ".join(BUILTIN_WORKLOADS) + " or all")
    prompts: list[BenchPrompt] = []
    for name in wanted:
        if name not in BUILTIN_WORKLOADS:
            raise WorkloadError(f"unknown workload {name!r}; built-in workloads: {', '.join(BUILTIN_WORKLOADS)}, all")
        text = resources.files(__package__).joinpath("prompts").joinpath(f"{name}.jsonl").read_text(encoding="utf-8")
        prompts.extend(parse_prompts(text, source=f"built-in workload {name}"))
    return prompts


def load_prompt_file(path: str | Path, *, skip_bad: bool = False, split: str = "") -> list[BenchPrompt]:
    """Read a Spec-Bench style ``.jsonl`` question file or an instruction file (see the module
    docstring); ``split``: only lines of that split (every line must then have one)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WorkloadError(f"prompt file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise WorkloadError(f"cannot read prompt file {str(path)!r}: {e}") from e
    return parse_prompts(text, source=str(path), skip_bad=skip_bad, split=split)


def parse_prompts(text: str, *, source: str = "<prompts>", skip_bad: bool = False, split: str = "") -> list[BenchPrompt]:
    """Parse Spec-Bench (or instruction) ``.jsonl`` text, only ``split``'s lines if given; errors
    name ``source`` and the 1-based line number."""
    prompts: list[BenchPrompt] = []
    seen: set[str] = set()
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            prompt = _parse_line(line, split)
            if prompt is None:
                continue
            if prompt.id in seen:
                raise ValueError(f"duplicate question_id {prompt.id!r}")
        except ValueError as e:
            msg = f"{source}, line {lineno}: {e}"
            if not skip_bad:
                raise WorkloadError(msg + " (use --skip-bad to skip malformed lines)") from None
            warnings.warn("skipping " + msg, stacklevel=2)
            continue
        seen.add(prompt.id)
        prompts.append(prompt)
    if not prompts:
        raise WorkloadError(f"{source}: no prompts" + (f" of split {split!r}" if split else ""))
    return prompts


def _parse_line(line: str, split: str = "") -> BenchPrompt | None:
    """One line's prompt, or None when ``split`` is given and the line is of another split."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    if split:
        if "split" not in obj:
            raise ValueError(f"no 'split' key, but only split {split!r} was asked for")
        if obj["split"] != split:
            return None
    if "turns" not in obj and {"id", "family", "text"} <= obj.keys():  # an instruction of distill instructions
        obj = {"question_id": obj["id"], "category": obj["family"], "turns": [obj["text"]]}
    missing = [k for k in ("question_id", "category", "turns") if k not in obj]
    if missing:
        raise ValueError(f"missing key(s) {', '.join(missing)}")
    qid, category, turns = obj["question_id"], obj["category"], obj["turns"]
    if isinstance(qid, bool) or not isinstance(qid, (str, int)) or str(qid) == "":
        raise ValueError(f"question_id must be a non-empty string or an int, got {qid!r}")
    if not isinstance(category, str) or not category.strip():
        raise ValueError(f"category must be a non-empty string, got {category!r}")
    if not isinstance(turns, list) or not turns:
        raise ValueError("turns must be a non-empty list of strings")
    if not isinstance(turns[0], str) or not turns[0].strip():
        raise ValueError("the first turn must be a non-empty string")
    chat = obj.get("chat", True)
    if not isinstance(chat, bool):
        raise ValueError(f"chat must be true or false, got {chat!r}")
    return BenchPrompt(id=str(qid), category=category.strip(), text=turns[0], chat=chat)
