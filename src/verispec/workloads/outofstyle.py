"""The out-of-style evaluation split: Spec-Bench's six families, built apart from the training data.

A draft head trained on the answers to :mod:`verispec.distill.instructions` (templated prompts
over man pages, ``/usr/share/doc``, pydoc topics, stdlib docstrings and package ``METADATA``)
is measured here on prompts made by another generator from other sources, so that over-fitting
to the training prompts' style shows. Spec-Bench's categories, at least 40 prompts each:

* ``mt_bench``: two-turn conversations written by hand (:mod:`.outofstyle_text`); the prompt
  is the second turn after the target's own greedy first answer (as Spec-Bench runs MT-bench),
  stored rendered through the target's chat template with ``"chat": false`` (the loader uses
  one turn), the two turns kept in ``"turns_source"`` and the first answer in ``"first_answer"``;
* ``translation``: hand-written German / French / Spanish / Italian sentences to translate
  into English, asked in eight wordings;
* ``summarization``: passages of 150-330 words from the licence texts in
  ``/usr/share/common-licenses`` and from long prose in numpy / scipy / networkx docstrings;
* ``qa``: hand-written closed-book questions (Natural Questions style);
* ``math_reasoning``: hand-written multi-step word problems (GSM8K style);
* ``rag``: 3-5 retrieved documents (docstring summaries of numpy / scipy / networkx functions,
  numbered, with titles) and a question that one of them answers.

The file ships in ``verispec/data/outofstyle/outofstyle.jsonl`` (its README names every source
and licence). ``python -m verispec.workloads.outofstyle --out FILE`` rebuilds it: a pure function
of the installed packages and licence files, plus the float32 target's greedy first answers
(up to 160 tokens). ``verispec bench --prompts FILE`` measures it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from .outofstyle_text import CHAT_PAIRS, LANG_NAMES, MATH_PROBLEMS, QA_QUESTIONS, TRANSLATION_ASKS, TRANSLATIONS

__all__ = ["CATEGORIES", "SOURCES_PATH", "SPLIT_PATH", "base_verb", "build_lines", "distinct_passages", "doc_units",
           "handwritten_lines", "licence_passages", "main", "passage_lines", "render_turns", "source_versions",
           "stable_key"]

CATEGORIES = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
SPLIT_PATH = Path(__file__).parent.parent / "data" / "outofstyle" / "outofstyle.jsonl"
SOURCES_PATH = SPLIT_PATH.with_name("sources.json")  # what the passages were read from: versions, licence hashes
LICENCE_ROOT = Path("/usr/share/common-licenses")
LICENCES = ("Apache-2.0", "Artistic", "CC0-1.0", "GFDL-1.3", "GPL-2", "GPL-3", "LGPL-2.1", "MPL-2.0")
DOC_PACKAGES = ("numpy", "scipy", "networkx")
PER_FAMILY = 40
FIRST_ANSWER_TOKENS = 160

SUMMARY_ASKS = (
    "Summarize: {text}",
    "Can you give me the gist of this in two or three sentences?\n\n{text}",
    "{text}\n\nTL;DR?",
    "Summarise the following for a busy colleague who has no time to read it:\n\n{text}",
    "Here is a passage from {title}. What are its main points? Keep it brief.\n\n{text}",
    "Write a one-paragraph summary of the text below.\n\n{text}",
    "{text}\n\nIn plain words, what is this saying?",
    "I need a short summary of this for my notes:\n\"{text}\"",
)
RAG_ASKS = (
    "{docs}\n\nUsing the documents above, answer: {q}",
    "Answer the question based only on the following retrieved passages.\n\n{docs}\n\nQuestion: {q}\nAnswer:",
    "Question: {q}\n\nSearch results:\n{docs}\n\nWrite a short answer and say which document it comes from.",
    "{docs}\n\n{q} Cite the document number.",
)
RAG_QUESTIONS = (
    "What does {name} do?",
    "Which function should I use to {summary}?",
    "According to the documents, what is the purpose of {name}?",
    "I want to {summary}. Is there a function for that, and what is it called?",
    "Explain briefly what {name} is for.",
)


def stable_key(*parts: str) -> str:
    """A stable hex key of ``parts`` (selection and order never depend on Python's hash seed)."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def _pick(items: Sequence, n: int, salt: str) -> list:
    """``n`` of ``items`` (all if fewer), chosen and ordered by a stable hash of their repr."""
    return sorted(items, key=lambda it: stable_key(salt, repr(it)))[:n]


# ---------------------------------------------------------------------------------------------
# Passages

def _prose_paragraphs(text: str) -> list[str]:
    """Paragraphs (blank-line separated, whitespace joined) of ``text``."""
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]


def licence_passages(root: Path = LICENCE_ROOT, lo: int = 150, hi: int = 330) -> list[tuple[str, str, str]]:
    """``(source, title, text)`` runs of consecutive licence paragraphs of ``lo``-``hi`` words."""
    out = []
    for name in LICENCES:
        path = root / name
        if not path.is_file():
            continue
        run: list[str] = []
        for p in _prose_paragraphs(path.read_text(encoding="utf-8", errors="replace")) + [""]:
            words = sum(len(x.split()) for x in run)
            if p and words + len(p.split()) <= hi:
                run.append(p)
                continue
            if words >= lo:
                out.append((f"licence:{name}", f"the {name} licence", "\n\n".join(run)))
            run = [p] if p and len(p.split()) <= hi else []
    return out


_MARKUP = [(re.compile(r":[a-z]+:`~?([^`<]+?)(?:\s*<[^>]+>)?`"), r"\1"), (re.compile(r"``([^`]+)``"), r"\1"),
           (re.compile(r"`([^`]+)`_?"), r"\1"), (re.compile(r"\[\d+\]_"), "")]


def _clean_doc_paragraph(block: str) -> str:
    """A docstring paragraph as plain prose, or "" when it is not prose (a section header,
    indented definition, example, directive, formula or list)."""
    lines = block.split("\n")
    if len(lines) >= 2 and re.fullmatch(r"\s*[-=~]{3,}\s*", lines[1]):
        return ""
    if any(ln.startswith((" ", "\t")) for ln in lines) or lines[0].lstrip().startswith(("-", "*", "..", ">>>")):
        return ""
    text = " ".join(ln.strip() for ln in lines)
    for pat, rep in _MARKUP:
        text = pat.sub(rep, text)
    if not text.isascii() or re.search(r"[\\$|{}]|>>>|::|https?:|\.\. ", text) or len(text.split()) < 8:
        return ""
    return text if text.endswith((".", "?", "!")) else ""


def _docstrings(package_dir: Path) -> list[tuple[str, str]]:
    """``(dotted name, docstring)`` of the public modules, classes and functions under ``package_dir``."""
    out = []
    root = package_dir.parent
    for f in sorted(package_dir.rglob("*.py")):
        rel = f.relative_to(root).with_suffix("").parts
        if any(p.startswith("_") and p != "__init__" for p in rel[1:]) or {"tests", "testing", "conftest"} & set(rel):
            continue
        mod = ".".join(p for p in rel if p != "__init__")
        try:
            tree = ast.parse(f.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        nodes = [(mod, tree)] + [(f"{mod}.{n.name}", n) for n in tree.body
                                  if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and not n.name.startswith("_")]
        for name, node in nodes:
            doc = ast.get_docstring(node, clean=True)
            if doc:
                out.append((name, doc))
    return out


def doc_units(packages: Sequence[str] = DOC_PACKAGES) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """``(long passages, function summaries)`` from the docstrings of ``packages`` in site-packages:
    passages are ``(source, title, text)`` runs of prose paragraphs of 150-330 words; summaries
    ``(name, first sentence, text of 25-130 words)`` of functions and classes."""
    site = Path(sysconfig.get_paths()["purelib"])
    long, short = [], []
    for pkg in packages:
        if not (site / pkg).is_dir():
            continue
        for name, doc in _docstrings(site / pkg):
            paras = [_clean_doc_paragraph(b) for b in re.split(r"\n\s*\n", doc)]
            run: list[str] = []
            for p in paras + [""]:
                if p and sum(len(x.split()) for x in run) + len(p.split()) <= 330:
                    run.append(p)
                    continue
                if sum(len(x.split()) for x in run) >= 150:
                    long.append((f"doc:{name}", f"the documentation of {name}", "\n\n".join(run)))
                run = [p] if p else []
            lead = []
            for p in paras:  # the summary and extended summary: the paragraphs before the first non-prose one
                if not p:
                    break
                lead.append(p)
            words = sum(len(x.split()) for x in lead)
            first = lead[0].split(". ")[0].rstrip(".") if lead else ""
            if "." in name and 25 <= words <= 130 and 4 <= len(first.split()) <= 16:
                short.append((name, first, " ".join(lead)))
    return long, short


# ---------------------------------------------------------------------------------------------
# Lines

def _line(qid: str, category: str, turn: str, source: str, **extra) -> dict:
    return {"question_id": qid, "category": category, "turns": [turn], "source": source, **extra}


def base_verb(word: str) -> str:
    """``"Returns"`` -> ``"return"``: the docstring summary's verb as after "to"."""
    w = word.lower()
    if w.endswith(("ches", "shes", "sses", "xes", "zes")):
        return w[:-2]
    if w.endswith("ies"):
        return w[:-3] + "y"
    return w[:-1] if w.endswith("s") and not w.endswith("ss") else w


def _rag_question(name: str, first: str, salt: str) -> str:
    tmpl = RAG_QUESTIONS[int(stable_key(salt, name)[:8], 16) % len(RAG_QUESTIONS)]
    verb, _, rest = first.partition(" ")
    summary = f"{base_verb(verb)} {rest}"
    if tmpl.startswith(("Which function should I use", "I want to")) and not re.match(r"[A-Z]?[a-z]+ ", first):
        tmpl = RAG_QUESTIONS[0]
    return tmpl.format(name=name.split(".")[-1], summary=summary)


def rag_lines(short: Sequence[tuple[str, str, str]], n: int = PER_FAMILY + 4) -> list[dict]:
    """``n`` RAG prompts: a target function's summary among 2-4 others of the same package."""
    by_pkg: dict[str, list[tuple[str, str, str]]] = {}
    for unit in short:
        by_pkg.setdefault(unit[0].split(".")[0], []).append(unit)
    lines = []
    able = [u for u in short if re.match(r"[A-Z][a-z]+s? ", u[1])]
    pkgs = sorted({u[0].split(".")[0] for u in able})
    targets = [t for i, pkg in enumerate(pkgs)  # as many from each package as it can give
               for t in _pick([u for u in able if u[0].split(".")[0] == pkg], (n + i) // len(pkgs), "rag-target")]
    for i, (name, first, _) in enumerate(targets):
        key = stable_key("rag", name)
        others = [u for u in by_pkg[name.split(".")[0]] if u[0].split(".")[-1] != name.split(".")[-1]]
        docs = _pick(others, 2 + int(key[:2], 16) % 3, key) + [next(u for u in short if u[0] == name)]
        docs = sorted(docs, key=lambda u: stable_key(key, u[0]))
        text = "\n\n".join(f"Document [{j}] (Title: {u[0]})\n{u[2]}" for j, u in enumerate(docs, 1))
        ask = RAG_ASKS[int(key[2:4], 16) % len(RAG_ASKS)]
        lines.append(_line(f"rag-{i:02d}", "rag", ask.format(docs=text, q=_rag_question(name, first, key)),
                           "docstrings: " + ", ".join(u[0] for u in docs)))
    return lines


def _shingles(text: str, n: int = 8) -> set[tuple[str, ...]]:
    w = text.lower().split()
    return {tuple(w[i:i + n]) for i in range(max(1, len(w) - n + 1))}


def distinct_passages(passages: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``passages`` without near-copies (a passage sharing over a fifth of its 8-word windows
    with an earlier one: numpy's chebfit, hermfit, lagfit ... share their docstrings)."""
    seen: set[tuple[str, ...]] = set()
    out = []
    for p in passages:
        sh = _shingles(p[2])
        if len(sh & seen) <= len(sh) / 5:
            out.append(p)
        seen |= sh
    return out


def summary_lines(passages: Sequence[tuple[str, str, str]], n: int = PER_FAMILY + 4) -> list[dict]:
    """``n`` summarization prompts over ``passages`` (half licences, half docstrings if there are enough)."""
    lic = distinct_passages([p for p in passages if p[0].startswith("licence:")])
    doc = distinct_passages([p for p in passages if not p[0].startswith("licence:")])
    take_doc = min(len(doc), n // 2)
    chosen = _pick(doc, take_doc, "sum-doc") + _pick(lic, n - take_doc, "sum-lic")
    lines = []
    for i, (source, title, text) in enumerate(chosen):
        ask = SUMMARY_ASKS[int(stable_key("sum", source, text[:40])[:8], 16) % len(SUMMARY_ASKS)]
        lines.append(_line(f"summarization-{i:02d}", "summarization", ask.format(text=text, title=title), source))
    return lines


def handwritten_lines() -> list[dict]:
    """The translation, QA and math prompts (:mod:`.outofstyle_text`)."""
    lines = []
    for i, (lang, text) in enumerate(TRANSLATIONS):
        ask = TRANSLATION_ASKS[i % len(TRANSLATION_ASKS)]
        lines.append(_line(f"translation-{i:02d}-{lang}", "translation", ask.format(lang=LANG_NAMES[lang], text=text),
                           "hand-written"))
    lines += [_line(f"qa-{i:02d}", "qa", q, "hand-written") for i, q in enumerate(QA_QUESTIONS)]
    lines += [_line(f"math-{i:02d}", "math_reasoning", q, "hand-written") for i, q in enumerate(MATH_PROBLEMS)]
    return lines


def render_turns(tokenizer, first: str, answer: str, second: str) -> str:
    """The second turn's prompt text: the conversation ``[user first, assistant answer, user second]``
    through ``tokenizer``'s chat template, ending where the assistant's second answer begins."""
    messages = [{"role": "user", "content": first}, {"role": "assistant", "content": answer},
                {"role": "user", "content": second}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def chat_lines(tokenizer, answers: Sequence[str]) -> list[dict]:
    """The ``mt_bench`` lines: each pair of :data:`CHAT_PAIRS` rendered after its first ``answers``."""
    if len(answers) != len(CHAT_PAIRS):
        raise ValueError(f"answers: need {len(CHAT_PAIRS)} first answers, got {len(answers)}")
    return [{"question_id": f"mt_bench-{i:02d}", "category": "mt_bench", "chat": False,
             "turns": [render_turns(tokenizer, t1, a1, t2)], "source": "hand-written",
             "turns_source": [t1, t2], "first_answer": a1}
            for i, ((t1, t2), a1) in enumerate(zip(CHAT_PAIRS, answers))]


def passage_lines() -> list[dict]:
    """The summarization and RAG lines (a function of :func:`source_versions`' files)."""
    long, short = doc_units()
    return summary_lines(licence_passages() + long) + rag_lines(short)


def build_lines(tokenizer, first_answers: Sequence[str]) -> list[dict]:
    """Every line of the split, in category order."""
    lines = chat_lines(tokenizer, first_answers) + handwritten_lines() + passage_lines()
    return sorted(lines, key=lambda d: CATEGORIES.index(d["category"]))


def source_versions() -> dict[str, str]:
    """The versions of :data:`DOC_PACKAGES` and the SHA-256 (first 16 hex digits) of each licence
    file here: the passages are rebuilt exactly where these are the same."""
    from importlib import metadata

    out = {}
    for pkg in DOC_PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "absent"
    for name in LICENCES:
        path = LICENCE_ROOT / name
        out[f"licence:{name}"] = hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else "absent"
    return out


def first_answers(target, n_tokens: int = FIRST_ANSWER_TOKENS) -> list[str]:
    """The target's greedy answers (at most ``n_tokens``) to the first turn of each :data:`CHAT_PAIRS`
    (one batch; the engine's outputs do not depend on the batch)."""
    from ..engine import SpeculativeDecoder
    from ..sampling import SamplingParams

    dec = SpeculativeDecoder(target, None)
    res = dec.generate([t1 for t1, _ in CHAT_PAIRS], n_tokens, SamplingParams(temperature=0.0), chat=True)
    return [target.tokenizer.decode(ids, skip_special_tokens=True).strip() for ids in res.token_ids]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m verispec.workloads.outofstyle --out FILE``: build the split (needs the target)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m verispec.workloads.outofstyle", description=main.__doc__)
    ap.add_argument("--out", default=str(SPLIT_PATH))
    ap.add_argument("--target", default="smollm2-135m")
    args = ap.parse_args(argv)
    from ..models import load_causal_lm

    target = load_causal_lm(args.target)
    lines = build_lines(target.tokenizer, first_answers(target))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in lines), encoding="utf-8")
    Path(args.out).with_name(SOURCES_PATH.name).write_text(json.dumps(source_versions(), indent=1) + "\n")
    counts = {c: sum(d["category"] == c for d in lines) for c in CATEGORIES}
    print(f"{len(lines)} prompts -> {args.out}: {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
