"""Offline chat prompts for self-distillation, built from the Python standard library.

A draft is used on what the target writes in *chat* format (system/user/assistant template,
markdown answers, code blocks), which raw corpus text never shows it. These prompts let the
target produce such answers itself, offline: code completion, explanation and edit requests
over stdlib functions (found with ``ast``), questions about the language's documented topics
(``pydoc_data.topics``), summaries of those documentation paragraphs, and a few everyday
questions. The benchmark's prompt files are never used.

Everything is a pure function of (files, seed).
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["chat_prompts"]

_COMPLETE = (
    "Complete the following Python code. Reply with the complete code in one code block.",
    "Finish implementing this function.",
    "Implement the function below. Return the whole function.",
    "Write the body of this Python function.",
)
_EXPLAIN = (
    "Explain what this Python function does.",
    "Briefly explain the following code.",
    "What does this function return, and when? Explain step by step.",
)
_EDIT = (
    "Add type hints to this function and return the full code.",
    "Add comments that explain each step of this function. Return the full code.",
    "Rewrite this function so that it is easier to read. Return the full code.",
    "Write a short docstring for this function and return the full updated code.",
)
_EVERYDAY = (
    "cooking pasta", "learning a new language", "running a first 5k", "saving money", "writing a cover letter",
    "keeping houseplants alive", "planning a road trip", "studying for an exam", "sleeping better", "public speaking",
    "making coffee at home", "organising a small team", "starting a vegetable garden", "reading more books",
    "taking better photos with a phone", "staying focused while working from home", "choosing a laptop",
    "learning to play guitar", "writing clear emails", "preparing for a job interview",
)
_EVERYDAY_TEMPLATES = (
    "Give me five practical tips for {t}.",
    "Explain the basics of {t} to a complete beginner.",
    "What are common mistakes people make when {t}? Keep it short.",
    "Write a short step-by-step guide to {t}.",
)


def _functions(files: Sequence[Path], max_lines: int = 30) -> list[tuple[str, str, list[str]]]:
    """(header + docstring, full source, local names) of small documented stdlib functions."""
    out = []
    for path in files:
        try:
            src = path.read_text(encoding="utf-8")
            tree = ast.parse(src)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        lines = src.splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or not node.body or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            end = node.end_lineno or node.lineno
            if not doc or len(doc) > 400 or end - node.lineno + 1 > max_lines:
                continue
            first = node.body[0]
            head = lines[node.lineno - 1 : (first.end_lineno or first.lineno)]
            body = lines[node.lineno - 1 : end]
            indent = len(body[0]) - len(body[0].lstrip())
            dedent = lambda ls: "\n".join(s[indent:] for s in ls)  # noqa: E731
            names = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)})
            out.append((dedent(head), dedent(body), names))
    return out


def _topics() -> list[tuple[str, str]]:
    """(topic name, first documentation paragraph) from ``pydoc_data.topics``."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - some distributions strip pydoc_data
        return []
    out = []
    for name, text in topics.items():
        paras = [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) > 200 and "***" not in p]
        if paras:
            out.append((name.replace("-", " "), re.sub(r"\s+", " ", paras[0])[:700]))
    return out


def chat_prompts(files: Sequence[Path], n: int, seed: int = 0) -> list[str]:
    """``n`` user messages (see the module docstring), in a seeded random order of kinds."""
    rng = random.Random(seed)
    funcs = _functions(sorted(files))
    topics = _topics()
    if not funcs:
        raise ValueError("no documented Python functions in the corpus to build chat prompts from")
    kinds = ["complete"] * 6 + ["explain"] * 3 + ["edit"] * 4 + ["topic"] * 3 + ["summary"] * 2 + ["everyday"] * 2
    out = []
    while len(out) < n:
        kind = rng.choice(kinds)
        if kind in ("topic", "summary") and not topics:
            kind = "explain"
        if kind == "complete":
            head, _, _ = rng.choice(funcs)
            out.append(f"{rng.choice(_COMPLETE)}\n\n```python\n{head}\n```")
        elif kind == "explain":
            _, body, _ = rng.choice(funcs)
            out.append(f"{rng.choice(_EXPLAIN)}\n\n```python\n{body}\n```")
        elif kind == "edit":
            _, body, names = rng.choice(funcs)
            if names and rng.random() < 0.4:
                v = rng.choice(names)
                task = f"Rename the variable `{v}` to `{v}_value` everywhere in this function and return the full updated code."
            else:
                task = rng.choice(_EDIT)
            out.append(f"{task}\n\n```python\n{body}\n```")
        elif kind == "topic":
            name, _ = rng.choice(topics)
            out.append(rng.choice((f"Explain {name} in Python with a short example.",
                                   f"What should a beginner know about {name} in Python?",
                                   f"Give a short overview of {name} in Python, with code.")))
        elif kind == "summary":
            name, para = rng.choice(topics)
            out.append(rng.choice(("Summarize the following text in two sentences.",
                                   "Explain the following paragraph in simple words.",
                                   "List the key points of this text as bullet points.")) + f"\n\n{para}")
        else:
            out.append(rng.choice(_EVERYDAY_TEMPLATES).format(t=rng.choice(_EVERYDAY)))
    return out
