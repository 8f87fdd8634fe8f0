"""Local text the instruction corpus is built from: prose passages, named concepts and code.

Everything is read from this machine, never the network, and is a pure function of the files:

* English man pages (``/usr/share/man/man1..man8``), rendered by :mod:`.roff`: prose paragraphs
  of their sections (``man:tar.1``) and the one-line NAME description of each page (a *concept*:
  "tar, a command: an archiving utility"). The gcloud pages (16k near-identical ones) are sampled.
* Translated man pages (``/usr/share/man/{de,fr,es}``, ``man-fr:apropos.1``): paragraphs that
  really are in that language (po4a leaves untranslated English ones behind), for translation.
* ``/usr/share/doc/*`` README / ``.md`` / ``.txt`` / ``.rst`` files (``doc:git/README``).
* Python's ``pydoc_data.topics`` (``pydoc:for``) and the stdlib's module docstrings
  (``py:json.encoder``); the stdlib's small documented functions for code prompts, found by
  :mod:`verispec.distill.chat_prompts` (same ``py:`` source as the module).
* Package ``METADATA`` descriptions in site-packages (``pkg:rich``).

English paragraphs are kept only when they look like clean prose (ASCII, sentences, few symbols,
no URLs, not an option list or code); :func:`passages` cuts runs of them into passages of a given
word range at sentence boundaries.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import sysconfig
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..chat_prompts import _functions, _topics
from .roff import render_roff

__all__ = ["Block", "CodeUnit", "Concept", "Passage", "Sources", "clean_english", "load_sources", "passages",
           "sentences", "stable_fraction"]

MAN_ROOT = Path("/usr/share/man")
DOC_ROOT = Path("/usr/share/doc")


@dataclass(frozen=True)
class Block:
    """A run of consecutive prose paragraphs from one place of one source. ``title`` says what
    the text is about (a command, a topic, a package) for prompts that name it."""

    source: str
    title: str
    lang: str
    paragraphs: tuple[str, ...]


@dataclass(frozen=True)
class Passage:
    """A piece of a :class:`Block` cut to a word range at sentence boundaries."""

    source: str
    title: str
    lang: str
    text: str

    @property
    def words(self) -> int:
        return len(self.text.split())


@dataclass(frozen=True)
class Concept:
    """A named thing with a one-line description: a command, C function, Python module, ..."""

    source: str
    name: str
    kind: str
    summary: str


@dataclass(frozen=True)
class CodeUnit:
    """A small documented stdlib function: header + docstring, full source, assigned names."""

    source: str
    head: str
    body: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Sources:
    """All the material the family builders draw from, each list in a deterministic order."""

    blocks: tuple[Block, ...]
    concepts: tuple[Concept, ...]
    functions: tuple[CodeUnit, ...]
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    def by_lang(self, lang: str) -> list[Block]:
        """The blocks in language ``lang`` ("en", "de", "fr", "es")."""
        return [b for b in self.blocks if b.lang == lang]

    def passages(self, lo: int, hi: int, lang: str = "en") -> list[Passage]:
        """:func:`passages` of the ``lang`` blocks, computed once per ``(lo, hi, lang)``."""
        key = (lo, hi, lang)
        if key not in self._memo:
            self._memo[key] = passages(self.by_lang(lang), lo, hi)
        return self._memo[key]


def stable_fraction(key: str) -> float:
    """A number in [0, 1) fixed by ``key`` alone (sha1), for sampling and splits that do not
    depend on Python's per-process string hashing."""
    return int(hashlib.sha1(key.encode("utf-8")).hexdigest()[:12], 16) / 16**12


# --------------------------------------------------------------------------------------------
# Prose filters

_SENT_SPLIT = re.compile(r"(?<=[.!?])[\"')]?\s+(?=[A-Z\"(])")
_STOP = {
    "en": {"the", "and", "is", "of", "to", "in", "that", "with", "for", "this", "are", "be", "it", "by"},
    "fr": {"le", "la", "les", "des", "est", "et", "une", "dans", "pour", "que", "du", "sont", "par", "pas"},
    "de": {"der", "die", "das", "und", "ist", "nicht", "mit", "von", "für", "ein", "eine", "wird", "den", "zu"},
    "es": {"el", "la", "los", "las", "que", "es", "una", "por", "para", "con", "del", "se", "un", "no"},
}


def sentences(text: str) -> list[str]:
    """The sentences of a paragraph (split after . ! ? before a capital; abbreviations such as
    "e.g." stay whole because a lower-case word follows them)."""
    return [s.strip() for s in _SENT_SPLIT.split(text) if s.strip()]


_STOP_LANG = {w: lang for lang, ws in _STOP.items() for w in ws if sum(w in o for o in _STOP.values()) == 1}
_WORD_RE = re.compile(r"\w+")


def _language(text: str) -> str:
    """The language whose function words are most frequent in ``text`` ("" when too few)."""
    counts = Counter(_STOP_LANG.get(w, "") for w in _WORD_RE.findall(text.lower()))
    counts.pop("", None)
    if not counts:
        return ""
    best = max(counts, key=lambda k: (counts[k], k))
    return best if counts[best] >= 3 else ""


_SYMBOL_RE = re.compile(r"[<>{}\[\]=$_/\\|#*;~^@`]")
_UPPER_RE = re.compile(r"[A-ZÀ-Þ]")
_LETTER_RE = re.compile(r"[^\W\d_]")
_SPACE_RE = re.compile(r"\s")
_REF_RE = re.compile(r"\(\d\w*\)")
_OPTION_RE = re.compile(r"(?:^|\s)-")


def _prose_shape(p: str, min_words: int) -> bool:
    """Sentences of words: starts with a capital, ends a sentence, few symbols, option names or
    manual references, mostly lower-case letters, no URLs."""
    words = p.split()
    if len(words) < min_words or not p[:1].isupper() or not p.endswith((".", "!", "?")):
        return False
    if "http" in p or "www." in p or "::" in p or "..." in p or max(map(len, words)) > 28:
        return False
    n = len(p)
    if len(_SYMBOL_RE.findall(p)) > 0.015 * n or len(_OPTION_RE.findall(p)) > 2 or len(_REF_RE.findall(p)) > 2:
        return False
    letters = len(_LETTER_RE.findall(p))
    if not letters or len(_UPPER_RE.findall(p)) > 0.12 * letters:
        return False
    return letters + len(_SPACE_RE.findall(p)) >= 0.88 * n


def clean_english(p: str, min_words: int = 12) -> bool:
    """Whether paragraph ``p`` looks like clean English prose (see the module docstring)."""
    return p.isascii() and _prose_shape(p, min_words) and _language(p) == "en"


def _clean_foreign(p: str, lang: str, min_words: int = 10) -> bool:
    if any(ord(c) > 0x2FF and c not in "«»’‘“”–—…" for c in p):
        return False
    return _prose_shape(p, min_words) and _language(p) == lang


def _runs(paragraphs: Iterable[tuple[str, str, bool]], keep, item_words: int = 35) -> list[list[str]]:
    """Runs of consecutive paragraphs ``(section, text, item)`` of one section for which ``keep``
    holds. A list item's body (an option's description) stands alone, and only when it has at
    least ``item_words`` words: without its tag, short ones read as fragments."""
    runs, run, last = [], [], None
    for section, text, item in paragraphs:
        ok = keep(text)
        if section != last or not ok or item:
            if run:
                runs.append(run)
            run = []
        last = section
        if ok and item:
            if len(text.split()) >= item_words:
                runs.append([text])
        elif ok:
            run.append(text)
    if run:
        runs.append(run)
    return runs


def passages(blocks: Sequence[Block], lo: int, hi: int) -> list[Passage]:
    """Non-overlapping passages of ``lo``..``hi`` words cut from each block at sentence
    boundaries (paragraph breaks kept as blank lines), in block order."""
    out = []
    for b in blocks:
        units = [(i, s) for i, p in enumerate(b.paragraphs) for s in sentences(p)]
        cur: list[tuple[int, str]] = []
        n = 0
        for i, s in units:
            w = len(s.split())
            if n + w > hi:
                if n >= lo:
                    out.append(_passage(b, cur))
                cur, n = [], 0
                if w > hi:
                    continue
            cur.append((i, s))
            n += w
        if n >= lo:
            out.append(_passage(b, cur))
    return out


def _passage(b: Block, units: list[tuple[int, str]]) -> Passage:
    paras: list[list[str]] = []
    last = None
    for i, s in units:
        if i != last:
            paras.append([])
            last = i
        paras[-1].append(s)
    return Passage(b.source, b.title, b.lang, "\n\n".join(" ".join(p) for p in paras))


# --------------------------------------------------------------------------------------------
# Man pages

_SKIP_SECTIONS = {"SYNOPSIS", "SEE ALSO", "AUTHOR", "AUTHORS", "COPYRIGHT", "REPORTING BUGS", "EXAMPLE", "EXAMPLES",
                  "FILES", "NAME", "LIBRARY", "COLOPHON", "HISTORY", "VERSIONS", "STANDARDS", "ATTRIBUTES",
                  "LICENSE", "TRADEMARKS", "SYNTAX", "RETURN VALUE", "ERRORS", "CONFORMING TO"}
_KIND = {"1": "command", "2": "system call", "3": "C library function", "4": "device", "5": "file format",
         "6": "game", "7": "topic", "8": "system administration command"}


def _man_stem(path: Path) -> str:
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    return name


def _man_files(root: Path, langs: Sequence[str], max_gcloud: int, max_english: int) -> list[tuple[str, Path]]:
    """``(lang, path)`` of the pages to read: a stable sample of ``max_english`` English pages
    (at most ``max_gcloud`` of them gcloud's) and all translated pages of ``langs``. Symlinks
    (aliases) are skipped."""
    out = []
    for lang in ["en", *langs]:
        base = root if lang == "en" else root / lang
        for d in sorted(base.glob("man[1-8]")):
            files = [p for p in sorted(d.glob("*.gz")) if not p.is_symlink()]
            gcloud = [p for p in files if p.name.startswith("gcloud")]
            gcloud = sorted(gcloud, key=lambda p: stable_fraction(p.name))[:max_gcloud]
            keep = set(gcloud)
            out += [(lang, p) for p in files if not p.name.startswith("gcloud") or p in keep]
    english = sorted((p for lang, p in out if lang == "en"), key=lambda p: stable_fraction(p.name))[:max_english]
    keep = set(english)
    return [(lang, p) for lang, p in out if lang != "en" or p in keep]


def _read_gz(path: Path, limit: int = 200_000) -> str:
    try:
        with gzip.open(path, "rb") as f:
            return f.read(limit).decode("utf-8", errors="replace")
    except (OSError, EOFError):
        return ""


def _man_concept(source: str, stem: str, name_line: str) -> Concept | None:
    m = re.match(r"(.+?)\s+-+\s+(.+)", name_line)
    if not m:
        return None
    names, summary = m.group(1), m.group(2).strip().rstrip(".")
    name = names.split(",")[0].strip()
    section = stem.rsplit(".", 1)[-1] if "." in stem else ""
    kind = _KIND.get(section[:1], "topic")
    if section.startswith("3") and ("pm" in section or "perl" in section or "::" in name):
        kind = "Perl module"
    elif section == "7" and re.fullmatch(r"[A-Z_]+", name):
        kind, name = "SQL command", name.replace("_", " ")
    if not name or len(name) > 60 or not summary.isascii() or len(summary) < 12 or len(summary.split()) < 3:
        return None
    return Concept(source, name, kind, summary)


def _man_page(lang: str, path: Path) -> tuple[list[Block], Concept | None]:
    stem = _man_stem(path)
    source = f"man:{stem}" if lang == "en" else f"man-{lang}:{stem}"
    name_line, paras = render_roff(_read_gz(path))
    if not paras:
        return [], None
    title = re.split(r"[,\s]", name_line, maxsplit=1)[0] if name_line else stem.rsplit(".", 1)[0]
    if lang == "en":
        keep = clean_english
        sections = [(p.section, p.text, p.item) for p in paras if p.section not in _SKIP_SECTIONS]
    else:
        keep = lambda t: _clean_foreign(t, lang)  # noqa: E731
        sections = [(p.section, p.text, p.item) for p in paras
                    if p.section not in ("NAME", "NOM", "NOMBRE", "SYNOPSIS")]
    blocks = [Block(source, title, lang, tuple(run)) for run in _runs(sections, keep)]
    concept = _man_concept(source, stem, name_line) if lang == "en" else None
    return blocks, concept


# --------------------------------------------------------------------------------------------
# Markdown / text documents (/usr/share/doc, package METADATA)

def _markdown_paragraphs(text: str) -> list[tuple[str, str, bool]]:
    """``(heading, paragraph, False)`` of the prose of a markdown / rst / plain text document: code
    fences, indented blocks, lists, tables, headings and directives are left out."""
    out, para, heading, fence = [], [], "", False

    def close() -> None:
        if para:
            p = " ".join(para)
            p = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", p)    # [text](url) -> text
            p = re.sub(r"\*\*([^*]+)\*\*|__([^_]+)__", lambda m: m.group(1) or m.group(2), p)
            p = re.sub(r"`+([^`]+)`+", r"\1", p)
            out.append((heading, re.sub(r"\s+", " ", p).strip(), False))
        para.clear()

    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith(("```", "~~~")):
            close()
            fence = not fence
            continue
        if fence:
            continue
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if s.startswith("#") or (nxt and set(nxt) <= set("=-~^*") and len(nxt) >= 3 and s):
            close()
            heading = s.strip("# ")
            continue
        if not s or set(s) <= set("=-~^*+") or line[:1] in (" ", "\t") or s.startswith(
                ("- ", "* ", "+ ", "|", ">", "..", ":", "<")) or re.match(r"\d+[.)] ", s):
            close()
            continue
        para.append(s)
    close()
    return out


def _doc_files(root: Path, per_package: int, max_bytes: int) -> list[tuple[str, Path]]:
    out = []
    for pkg in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        files = [f for f in pkg.rglob("*") if f.is_file() and not f.is_symlink() and (
            f.suffix in (".md", ".txt", ".rst") or f.name.startswith("README")) and not f.name.endswith(".gz")]
        files = [f for f in files if 500 < f.stat().st_size <= max_bytes]
        files.sort(key=lambda f: stable_fraction(str(f.relative_to(root))))
        out += [(pkg.name, f) for f in files[:per_package]]
    return sorted(out, key=lambda t: str(t[1]))


def _doc_blocks(root: Path, per_package: int = 25, max_bytes: int = 200_000) -> list[Block]:
    blocks = []
    for pkg, f in _doc_files(root, per_package, max_bytes):
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        rel = f.relative_to(root / pkg).with_suffix("")
        source = f"doc:{pkg}/{rel}"
        blocks += [Block(source, pkg, "en", tuple(r)) for r in _runs(_markdown_paragraphs(text), clean_english)]
    return blocks


def _site_packages() -> list[Path]:
    return sorted(p for p in {Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"])}
                  if p.is_dir())


def _package_sources(dirs: Sequence[Path]) -> tuple[list[Block], list[Concept]]:
    blocks, concepts = [], []
    for d in dirs:
        for meta in sorted(d.glob("*.dist-info/METADATA")):
            try:
                text = meta.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            head, _, body = text.partition("\n\n")
            fields = dict(re.findall(r"^(Name|Summary): (.*)$", head, re.M))
            name = fields.get("Name", "").strip()
            if not name:
                continue
            source = f"pkg:{name.lower()}"
            summary = fields.get("Summary", "").strip().rstrip(".")
            if summary and summary.isascii() and summary.upper() != "UNKNOWN":
                concepts.append(Concept(source, name, "Python package", summary))
            blocks += [Block(source, name, "en", tuple(r)) for r in _runs(_markdown_paragraphs(body), clean_english)]
    return blocks, concepts


# --------------------------------------------------------------------------------------------
# Python: pydoc topics, module docstrings, functions

def _pydoc_blocks() -> list[Block]:
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - some distributions strip pydoc_data
        return []
    blocks = []
    for key in sorted(topics):
        name = key.replace("-", " ")
        paras = [("", re.sub(r"\s+", " ", p.strip()), False) for p in re.split(r"\n\s*\n", topics[key])
                 if p.strip() and not p.startswith((" ", "\t")) and "***" not in p]
        blocks += [Block(f"pydoc:{key}", f"{name} (Python)", "en", tuple(r)) for r in _runs(paras, clean_english)]
    return blocks


def _pydoc_concepts() -> list[Concept]:
    out = []
    for name, para in _topics():
        first = sentences(para)[0] if sentences(para) else ""
        if first.isascii():
            out.append(Concept(f"pydoc:{name.replace(' ', '-')}", name, "Python language topic", first))
    return out


_MODULE_DOC = re.compile(r"\A(?:\s*#[^\n]*\n|\s*\n)*\s*[rRuU]?(\"\"\"|''')(.*?)\1", re.S)


def _stdlib_modules(max_files: int) -> list[tuple[str, Path]]:
    """``(dotted module name, file)`` of a stable sample of the stdlib's modules."""
    from ..corpus import stdlib_files

    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for f in stdlib_files():
        rel = f.relative_to(root).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        if any(p.startswith("_") for p in parts) or not parts:
            continue
        out.append((".".join(parts), f))
    out.sort(key=lambda t: stable_fraction(t[0]))
    return sorted(out[:max_files])


def _module_sources(modules: Sequence[tuple[str, Path]]) -> tuple[list[Block], list[Concept], list[CodeUnit]]:
    blocks, concepts, units = [], [], []
    for mod, f in modules:
        source = f"py:{mod}"
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        m = _MODULE_DOC.match(text)
        if m:
            doc = m.group(2).strip()
            first = re.sub(r"\s+", " ", doc.split("\n\n")[0]).strip().rstrip(".")
            if 10 <= len(first) <= 200 and first.isascii():
                concepts.append(Concept(source, mod, "Python module", first))
            paras = [("", re.sub(r"\s+", " ", p.strip()), False) for p in re.split(r"\n\s*\n", doc)
                     if p.strip() and not p.startswith((" ", "\t"))]
            blocks += [Block(source, f"the {mod} module", "en", tuple(r)) for r in _runs(paras, clean_english)]
        for head, body, names in _functions([f]):
            units.append(CodeUnit(source, head, body, tuple(names)))
    return blocks, concepts, units


# --------------------------------------------------------------------------------------------

@lru_cache(maxsize=4)
def load_sources(man_root: Path = MAN_ROOT, doc_root: Path = DOC_ROOT, *, langs: tuple[str, ...] = ("de", "fr", "es"),
                 max_english: int = 2600, max_gcloud: int = 100, max_modules: int = 160,
                 site_packages: tuple[Path, ...] | None = None) -> Sources:
    """Read every source (see the module docstring); cached per process (the arguments are the
    key), as it takes seconds. Missing folders simply contribute nothing."""
    blocks: list[Block] = []
    concepts: list[Concept] = []
    for lang, path in _man_files(man_root, langs, max_gcloud, max_english) if man_root.is_dir() else []:
        b, c = _man_page(lang, path)
        blocks += b
        if c is not None:
            concepts.append(c)
    blocks += _doc_blocks(doc_root)
    pb, pc = _package_sources(_site_packages() if site_packages is None else site_packages)
    blocks += pb
    concepts += pc
    blocks += _pydoc_blocks()
    concepts += _pydoc_concepts()
    mb, mc, units = _module_sources(_stdlib_modules(max_modules))
    blocks += mb
    concepts += mc
    # one concept per name and kind (aliases such as bzcat / bunzip2 share a NAME line)
    seen, uniq = set(), []
    for c in concepts:
        key = (c.name.lower(), c.kind)
        if key not in seen:
            seen.add(key)
            uniq.append(c)
    return Sources(tuple(blocks), tuple(uniq), tuple(units))
