"""Training instructions worded the way people ask, from sources neither the template corpus
(:mod:`.build`) nor the out-of-style split (:mod:`verispec.workloads.outofstyle`) reads.

The head trained on the template corpus is accepted far less on prompts it has never seen the
like of (closed-book questions, translations into English, second turns). These instructions
vary the wording, length and structure, and their material is disjoint from the evaluation
split's (which reads numpy / scipy / networkx docstrings, the licence texts and hand-written text):

* ``summarization``, ``rag``, ``qa`` (documentation questions): docstrings of the packages in
  :data:`PACKAGES` (their licences: BSD-3, MIT, Apache-2.0, MPL-2.0 for hypothesis, HPND for PIL);
* ``qa`` (closed-book, Natural Questions style): lower-case questions about the cities of the
  IANA time-zone database (``tzdata``, public domain) and the things named by single-word
  Unicode emoji names (:mod:`unicodedata`);
* ``qa`` (closed-book, part 2 only): questions about the countries, currencies, languages and
  scripts of the ISO code lists (``/usr/share/iso-codes/json``, the Debian ``iso-codes`` package,
  LGPL-2.1+) and the programming languages Pygments knows (BSD-2);
* ``translation``: translated UI messages (``msgstr``) of ``/usr/share/locale/{de,fr,es,it}``
  (each program's licence, GPL / LGPL), to translate into English;
* ``multiturn``: a second turn after the target's own first answer from the kept archive
  ``more-train`` (its instructions are the template corpus's), rendered through the chat template
  (``"chat": false``).

``python -m verispec.distill.instructions.asked --out FILE.jsonl [--part 2|3]`` writes
``{"id", "family", "source", "split": "train", "text"[, "chat": false]}`` lines: a pure function
of the installed packages, locale and code-list files and archive. Part 2 takes, family by family,
the candidates after part 1's (no family asks about a document, message, city or first answer it
asked about in part 1), the ISO and Pygments questions, and asks for summaries of part 1's passages
in other words. Part 3 (``--part 3``) takes again the candidates after part 2's (documents, messages
and first answers) and asks the general-knowledge trivia of :mod:`.general` (regions of ISO 3166-2,
multi-word pictograph things, unit conversions); it asks for no summaries. Every line is a training
line; the evaluation split is the out-of-style file.
"""

from __future__ import annotations

import argparse
import gettext
import json
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ...workloads.outofstyle import base_verb, distinct_passages, doc_units, render_turns, stable_key
from ...workloads.outofstyle_text import QA_QUESTIONS
from .general import general_questions

__all__ = ["FAMILIES", "PACKAGES", "asked_instructions", "city_names", "emoji_things", "main",
           "translation_sentences", "world_questions"]

FAMILIES = ("summarization", "rag", "qa", "translation", "multiturn")  # the lines' "family" values

PACKAGES = ("torch", "sympy", "matplotlib", "pygments", "jinja2", "click", "pydantic", "rich", "httpx",
            "starlette", "fastapi", "hypothesis", "mpmath", "PIL", "requests", "transformers", "typer",
            "urllib3", "yaml", "tqdm", "fontTools")
LANGS = {"de": "German", "fr": "French", "es": "Spanish", "it": "Italian"}
ARCHIVE = Path(__file__).resolve().parents[4] / "datasets" / "smollm2-135m-answers" / "more-train.safetensors"
EOS = 2  # SmolLM2's <|im_end|>: an archived answer that ends with it is complete

SUMMARY = (
    "Could you boil this down to the key points?\n\n{t}",
    "{t}\n\nSummarize that in a few sentences.",
    "Please write a brief summary (3 sentences max) of this documentation:\n\n{t}",
    "What's the short version of this?\n---\n{t}\n---",
    "I'm reading the docs for {p} and this part is long. Summarize it for me:\n\n{t}",
    "Give me a summary of the following passage in bullet points.\n\n{t}",
    "Explain the main idea of this text in simple words.\n\n{t}",
    "Condense the following into one short paragraph:\n{t}",
    "{t}\n\nSum this up for someone who has never used {p}.",
    "tl;dr please:\n\n{t}",
)
RAG = (
    "Context:\n{d}\n\nBased on the context, {q}",
    "You are given some documentation snippets.\n\n{d}\n\nQ: {q}\nA:",
    "{q}\n\nHere are some search results that may help:\n\n{d}",
    "Read these excerpts and answer the question. Mention the source you used.\n\n{d}\n\nQuestion: {q}",
    "Documents:\n{d}\n\nUser question: {q}\nOnly use the documents.",
)
RAG_QUESTIONS = ("what is {n} used for?", "which one would I call to {s}?",
                 "how does {n} behave, according to the snippets?", "is there something that can {s}? Name it.",
                 "describe {n} in one or two sentences.")
DOC_QUESTIONS = ("what does {n} do in {p}", "What is {n} in {p}?", "how do i {s} with {p}",
                 "Is there a way to {s} in {p}?", "{p} {n} explained",
                 "Quick question: what's the purpose of {n} ({p})?", "why would I use {n}?")
CITY_QUESTIONS = ("what country is {c} in", "what is {c} famous for", "how many people live in {c}",
                  "what language do they speak in {c}", "what is the weather like in {c}", "when was {c} founded",
                  "what is the best time of year to visit {c}", "what river runs through {c}",
                  "is {c} the capital of its country", "what food is {c} known for")
THING_QUESTIONS = ("what is a {t}", "where does the word {t} come from", "how do you draw a {t}",
                   "what are some facts about the {t}", "who invented the {t}", "what is the {t} made of",
                   "how big is a {t}", "why is the {t} important", "what does a {t} symbolize",
                   "how do you say {t} in french")
TRANSLATE = ("Translate this {l} text to English:\n\n{t}", "{t}\n\nWhat does that mean in English?",
             "Please translate from {l}: {t}", "Can you help me translate this message? It's in {l}.\n\n{t}",
             "Render the following in English, keeping the meaning:\n{t}", "English please: {t}")
FOLLOW_UPS = ("Can you make that shorter?", "Give me a concrete example.", "Now explain it to a ten-year-old.",
              "Put the main points in a bulleted list.", "What would be a good next step?",
              "Thanks! Could you say that in a more formal tone?", "Are there any downsides or caveats?",
              "Summarise your answer in one sentence.", "Can you expand on the most important part?",
              "What's a common mistake people make with this?", "Rewrite it as a short email to my team.",
              "I didn't quite get it. Can you explain it differently?")
PER_FAMILY = {"summarization": 500, "rag": 700, "qa_docs": 300, "qa_closed": 600, "translation": 800,
              "multiturn": 600}
PART2 = {"summarization": 200, "rag": 400, "qa_docs": 300, "qa_closed": 900, "translation": 500, "multiturn": 300}
PART3 = {"rag": 300, "qa_docs": 300, "qa_regions": 1400, "qa_things": 409, "translation": 400, "multiturn": 300}
ISO_CODES = Path("/usr/share/iso-codes/json")
COUNTRY_QUESTIONS = ("what currency does {c} use", "where is {c} located", "what is the capital of {c}",
                     "tell me about the history of {c}", "what languages are spoken in {c}",
                     "what is {c} known for", "What's the climate like in {c}?", "is {c} a good place to travel")
CURRENCY_QUESTIONS = ("which country uses the {m}", "what is the {m}", "what is the symbol of the {m}")
LANGUAGE_QUESTIONS = ("where is {l} spoken", "how many people speak {l}", "is {l} hard to learn",
                      "what language family does {l} belong to", "What alphabet does {l} use?")
SCRIPT_QUESTIONS = ("what is the {s} script", "which languages are written in {s} script")
CODE_QUESTIONS = ("what is {g} used for", "who created {g}", "is {g} a programming language",
                  "What does {g} code look like?", "should i learn {g}")


def _key(*parts: str) -> int:
    """A stable integer key of ``parts`` (the split's :func:`stable_key`, its first 48 bits)."""
    return int(stable_key(*parts)[:12], 16)


def city_names(root: Path | None = None) -> list[str]:
    """City names of the time-zone database (``Europe/Lisbon`` -> ``Lisbon``), sorted."""
    if root is None:
        import tzdata
        root = Path(tzdata.__file__).parent / "zoneinfo"
    cities = set()
    for region in ("Africa", "America", "Asia", "Australia", "Europe", "Pacific", "Atlantic", "Indian"):
        for f in (root / region).glob("*"):
            if f.is_file() and f.name[0].isupper() and not f.name.startswith(("GMT", "Etc")):
                cities.add(f.name.replace("_", " "))
    return sorted(cities)


def emoji_things() -> list[str]:
    """The lower-case single-word names of the Unicode pictographs (``volcano``, ``octopus``, ...)."""
    names = []
    for cp in [*range(0x1F300, 0x1F700), *range(0x1F900, 0x1FB00)]:
        name = unicodedata.name(chr(cp), "")
        if name and " " not in name and "-" not in name:
            names.append(name.lower())
    return sorted(set(names))


def translation_sentences(lang: str, root: Path = Path("/usr/share/locale")) -> list[tuple[str, str]]:
    """``(program, sentence)`` of the translated messages of ``root/lang/LC_MESSAGES/*.mo`` that read
    as prose: 8-45 words, ending a sentence, no format codes, markup or URLs."""
    out = []
    for mo in sorted((root / lang / "LC_MESSAGES").glob("*.mo")):
        try:
            with open(mo, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog  # gettext offers no public way to list messages
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        for k, v in catalog.items():
            if not isinstance(v, str) or not isinstance(k, str):
                continue
            v = " ".join(v.split())
            if (8 <= len(v.split()) <= 45 and v[-1] in ".!?"
                    and not re.search(r"%|\{|\}|\\|<|>|--|https?:|\t|_", v)
                    and sum(c.isupper() for c in v) < len(v) / 6):
                out.append((mo.stem, v))
    return sorted(set(out))


def world_questions(root: Path = ISO_CODES) -> list[tuple[str, str]]:
    """``(source, question)`` about the ISO 3166 countries, ISO 4217 currencies, ISO 639 languages
    with a two-letter code and ISO 15924 scripts, and Pygments' languages (one wording each);
    empty where the code lists are not installed."""
    def load(name: str, key: str) -> list[dict]:
        path = root / name
        return json.loads(path.read_text(encoding="utf-8"))[key] if path.is_file() else []

    def ask(tag: str, templates: tuple[str, ...], field: str, names: list[str]) -> list[tuple[str, str]]:
        return [(f"{tag}:{v}", templates[_key(tag, v) % len(templates)].format(**{field: v})) for v in names]

    import pygments.lexers
    code = sorted({lexer[0] for lexer in pygments.lexers.get_all_lexers()
                   if re.fullmatch(r"[A-Z][\w#+.]*( [A-Z][\w#+.]*)?", lexer[0]) and "With" not in lexer[0]})
    countries = [d.get("common_name", d["name"]) for d in load("iso_3166-1.json", "3166-1")]
    return (ask("iso3166", COUNTRY_QUESTIONS, "c", [c for c in countries if "," not in c])
            + ask("iso4217", CURRENCY_QUESTIONS, "m", [d["name"] for d in load("iso_4217.json", "4217")
                                                       if "Fund" not in d["name"] and "Code" not in d["name"]])
            + ask("iso639", LANGUAGE_QUESTIONS, "l", [d["name"].split(";")[0] for d in load("iso_639-2.json", "639-2")
                                                      if "alpha_2" in d])
            + ask("iso15924", SCRIPT_QUESTIONS, "s", [d["name"] for d in load("iso_15924.json", "15924")
                                                      if re.fullmatch(r"[A-Z][a-z]+", d["name"])])
            + ask("pygments", CODE_QUESTIONS, "g", code))


def _summaries(long: list, short: list, n: int, reask: bool = False) -> list[tuple[str, str, str]]:
    """Long docstring passages first, then the longer function summaries (60+ words); ``reask``: the
    same passages asked for in another of the :data:`SUMMARY` wordings (part 2)."""
    units = distinct_passages(long) + distinct_passages([(f"doc:{u[0]}", u[0], u[2]) for u in short
                                                         if len(u[2].split()) >= 60])
    if reask:
        units = sorted(units, key=lambda u: _key("s2", u[0]))
    rows = []
    for src, _, text in units[:n]:
        package = src.split(":")[1].split(".")[0]
        shift = 1 + _key("s2", src) % (len(SUMMARY) - 1) if reask else 0  # reask: never part 1's wording
        ask = SUMMARY[(_key("s", src, text[:30]) + shift) % len(SUMMARY)]
        rows.append(("summarization", src, ask.format(t=text, p=package)))
    return rows


def _rag(short: list, n: int, start: int = 0) -> list[tuple[str, str, str]]:
    able = [u for u in short if re.match(r"[A-Z][a-z]+s? ", u[1])]
    by_package: dict[str, list] = {}
    for u in short:
        by_package.setdefault(u[0].split(".")[0], []).append(u)
    rows = []
    for name, first, text in sorted(able, key=lambda u: _key("r", u[0]))[start:start + n]:
        k = _key("rag", name)
        others = sorted((u for u in by_package[name.split(".")[0]] if u[0] != name),
                        key=lambda u: _key(str(k), u[0]))[: 2 + k % 3]
        docs = sorted(others + [(name, first, text)], key=lambda u: _key(str(k), "o", u[0]))
        fmt = ("[{j}] {u[0]}\n{u[2]}", "Source {j}: {u[0]}\n{u[2]}", "### {u[0]}\n{u[2]}")[k % 3]
        d = "\n\n".join(fmt.format(j=j, u=u) for j, u in enumerate(docs, 1))
        verb, _, rest = first.partition(" ")
        q = RAG_QUESTIONS[k % len(RAG_QUESTIONS)].format(n=name.split(".")[-1], s=f"{base_verb(verb)} {rest}")
        rows.append(("rag", "doc:" + name, RAG[(k >> 4) % len(RAG)].format(d=d, q=q)))
    return rows


def _qa(short: list, n_docs: int, n_closed: int, start_docs: int = 0, start_closed: int = 0,
        world: bool = False) -> list[tuple[str, str, str]]:
    """Documentation questions, then closed-book ones (``world``: and the ISO / Pygments ones)."""
    able = [u for u in short if re.match(r"[A-Z][a-z]+s? ", u[1])]
    rows = []
    for name, first, _ in sorted(able, key=lambda u: _key("q", u[0]))[start_docs:start_docs + n_docs]:
        k = _key("qa", name)
        verb, _, rest = first.partition(" ")
        q = DOC_QUESTIONS[k % len(DOC_QUESTIONS)].format(n=name.split(".")[-1], p=name.split(".")[0],
                                                         s=f"{base_verb(verb)} {rest}")
        rows.append(("qa", "doc:" + name, q))
    closed = [("tz:" + c, CITY_QUESTIONS[_key("c", c) % len(CITY_QUESTIONS)].format(c=c)) for c in city_names()]
    closed += [("unicode:" + t, THING_QUESTIONS[_key("t", t) % len(THING_QUESTIONS)].format(t=t))
               for t in emoji_things()]
    closed = sorted(closed, key=lambda r: _key("closed", r[0]))[start_closed:]
    if world:  # never one of the split's questions word for word
        split = {q.lower().rstrip("?") for q in QA_QUESTIONS}
        closed += sorted((r for r in world_questions() if r[1].lower().rstrip("?") not in split),
                         key=lambda r: _key("world", r[0]))
    return rows + [("qa", src, q) for src, q in closed[:n_closed]]


def _general(n_regions: int, n_things: int) -> list[tuple[str, str, str]]:
    """Part 3's closed-book trivia (:func:`.general.general_questions`), none of the split's word for word."""
    split = {q.lower().rstrip("?") for q in QA_QUESTIONS}
    return [("qa", src, q) for src, q in general_questions(n_regions, n_things) if q.lower().rstrip("?") not in split]


def _translations(n: int, skip: int = 0) -> list[tuple[str, str, str]]:
    """``n`` prompts of 1-3 messages each, the languages in turn; the first ``skip`` of each language's
    are passed over (part 1's, when part 2 asks)."""
    rows = []
    for lang, name in LANGS.items():
        sentences = sorted(translation_sentences(lang), key=lambda s: _key(lang, s[1]))
        i, mine = 0, []
        while i < len(sentences) and len(mine) < (n + skip) // len(LANGS):
            chunk = sentences[i:i + 1 + _key(lang, str(i)) % 3]  # 1-3 messages of one language
            i += len(chunk)
            text = " ".join(s for _, s in chunk)
            mine.append(("translation", f"mo:{lang}:{chunk[0][0]}",
                         TRANSLATE[_key("t", text) % len(TRANSLATE)].format(l=name, t=text)))
        rows += mine[skip // len(LANGS):]
    return rows


def _second_turns(n: int, archive: Path, start: int = 0) -> list[tuple[str, str, str]]:
    from ...models import load_causal_lm
    from ..archive import read_archive
    tokenizer = load_causal_lm("smollm2-135m").tokenizer
    a = read_archive(archive)
    rows = []
    for i, (seq, n_prompt, family) in enumerate(zip(a.sequences, a.prompt_len, a.families)):
        seq = list(seq)
        if seq[-1] != EOS or len(seq) > 420 or family == "code":  # complete and short enough for a 2nd turn
            continue
        prompt = tokenizer.decode(seq[:n_prompt], skip_special_tokens=False)
        user = prompt.split("<|im_start|>user\n", 1)[-1].rsplit("<|im_end|>", 1)[0]
        answer = tokenizer.decode(seq[n_prompt:], skip_special_tokens=True).strip()
        follow = FOLLOW_UPS[_key("f", a.ids[i]) % len(FOLLOW_UPS)]
        rows.append(("multiturn", f"archive:{archive.stem}:{a.ids[i]}", render_turns(tokenizer, user, answer, follow)))
    return sorted(rows, key=lambda r: _key("m", r[1]))[start:start + n]


def asked_instructions(per_family: dict[str, int] = PER_FAMILY, archive: Path = ARCHIVE, part: int = 1) -> list[dict]:
    """The instruction lines of ``part`` 1, 2 or 3, in a fixed shuffled order (see the module doc);
    part 1 takes ``per_family``'s counts, part 2 :data:`PART2`'s after them, part 3 :data:`PART3`'s
    after both."""
    if part not in (1, 2, 3):
        raise ValueError(f"part must be 1, 2 or 3, got {part!r}")
    long, short = doc_units(PACKAGES)
    if part == 1:
        rows = (_summaries(long, short, per_family["summarization"]) + _rag(short, per_family["rag"])
                + _qa(short, per_family["qa_docs"], per_family["qa_closed"]) + _translations(per_family["translation"])
                + _second_turns(per_family["multiturn"], archive))
    elif part == 3:
        done, n = {k: per_family[k] + PART2[k] for k in PART2}, PART3
        asked_before = {r[2] for r in _qa(short, done["qa_docs"], 0)}  # names shared by two modules ask alike
        docs = [r for r in _qa(short, n["qa_docs"], 0, done["qa_docs"]) if r[2] not in asked_before]
        rows = (_rag(short, n["rag"], done["rag"]) + docs
                + _general(n["qa_regions"], n["qa_things"]) + _translations(n["translation"], done["translation"])
                + _second_turns(n["multiturn"], archive, done["multiturn"]))
    else:
        first, n = per_family, PART2
        rows = (_summaries(long, short, n["summarization"], reask=True) + _rag(short, n["rag"], first["rag"])
                + _qa(short, n["qa_docs"], n["qa_closed"], first["qa_docs"], first["qa_closed"], world=True)
                + _translations(n["translation"], first["translation"])
                + _second_turns(n["multiturn"], archive, first["multiturn"]))
    rows = sorted(rows, key=lambda r: _key("order", r[1], r[2][:50]))
    lines = []
    prefix = "asked" if part == 1 else f"asked{part}"
    for i, (family, source, text) in enumerate(rows):
        line = {"id": f"{prefix}-{i:05d}", "family": family, "source": source, "split": "train", "text": text}
        if family == "multiturn":
            line["chat"] = False
        lines.append(line)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Build and write the instructions; print the count per family."""
    parser = argparse.ArgumentParser(prog="python -m verispec.distill.instructions.asked",
                                     description="Training instructions worded the way people ask.")
    parser.add_argument("--out", required=True, help="output .jsonl file (its folder must exist)")
    parser.add_argument("--part", type=int, choices=(1, 2, 3), default=1,
                        help="1: the lines of asked-train; 2: the next ones (other documents, messages, questions); "
                             "3: the next again, with general-knowledge trivia")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.is_dir() or not out.parent.is_dir():
        parser.error(f"--out {str(out)!r}: give a file name in an existing folder")
    if not ARCHIVE.is_file():
        parser.error(f"the archive {ARCHIVE} is missing (the second turns follow its answers)")
    lines = asked_instructions(part=args.part)
    tmp = out.with_name(out.name + ".part")
    tmp.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in lines), encoding="utf-8")
    tmp.replace(out)
    print(f"{len(lines)} instructions -> {out}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(Counter(d["family"] for d in lines).items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
