"""A small man-page (roff) reader: the paragraphs of a page as plain text, by section.

Shelling out to ``man`` per page is slow (a groff process each) and the instruction corpus only
needs prose, so this renders the common ``man`` macros itself: fonts and escapes are dropped,
macro lines that start a paragraph break it, no-fill blocks (``.nf``/``.EX``: code, examples)
and the tag lines of ``.TP`` lists (options) are skipped, and macro definitions and
conditionals are ignored. What comes out is rough where a page uses rarer requests; the caller
filters paragraphs for clean prose.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["ManParagraph", "render_roff"]


@dataclass(frozen=True)
class ManParagraph:
    """One paragraph of a page: its section heading (upper case), text, and whether it was the
    body of a list item (``.TP``/``.IP``: usually an option's description)."""

    section: str
    text: str
    item: bool = False


_NAMED = {
    "aq": "'", "dq": '"', "em": " - ", "en": "-", "hy": "-", "lq": '"', "rq": '"', "oq": "'", "cq": "'",
    "bu": "*", "co": "(c)", "rg": "(R)", "tm": "(TM)", "mu": "x", ">=": ">=", "<=": "<=", "ti": "~", "ha": "^",
    "ga": "`", "ba": "|", "bv": "|", "sl": "/", "rs": "\\", "ul": "_", "pl": "+", "mi": "-", "eq": "=",
    "fo": "'", "fc": "'", "a-": "-", "->": "->", "<-": "<-", "de": " degrees",
    'L"': '"', 'R"': '"', "C+": "C++", "Tm": "(TM)", "C`": '"', "C'": '"', "Aq": "'", "ss": "ß",
    "Eu": "EUR", "eu": "EUR", "Po": "£", "<<": "«", ">>": "»", "Fo": "«", "Fc": "»",
}
# accented letters: \(:a ä, \('e é, \(`e è, \(^e ê, \(,c ç, \(~n ñ, \(oa å
_ACCENTS = {":": "\u0308", "'": "\u0301", "`": "\u0300", "^": "\u0302", ",": "\u0327", "~": "\u0303", "o": "\u030a"}
_SINGLE = {"-": "-", "e": "\\", "\\": "\\", " ": " ", "~": " ", "0": " ", ".": ".", "'": "'", "`": "`"}
_ESCAPE = re.compile(
    r"\\(?:"
    r"f(?:\[[^\]]*\]|\(..|.)"                 # font change
    r"|s(?:[+-]?\d+|\[[^\]]*\]|\(\d\d)"       # size change
    r"|[hvwXoDlLbNRCAZ]'[^']*'"               # motions, widths, device controls
    r"|\*(?:\[([^\]]*)\]|\((..)|(.))"         # strings \*x \*(xx \*[name]
    r"|n[+-]?(?:\[[^\]]*\]|\(..|.)"           # number registers
    r"|\((..)"                                # special characters \(xx
    r"|\[([^\]]*)\]"                          # special characters \[name], \[u00E9]
    r"|(.)"                                   # one-character escapes
    r")",
    re.S,
)
_BREAKS = {"SH", "SS", "PP", "LP", "P", "sp", "br", "IP", "TP", "HP", "RS", "RE", "in", "ti", "TQ", "Pp", "Sh",
           "Ss", "It", "Bl", "El", "Bd", "Ed", "bp", "ne", "UR", "UE", "MT", "ME", "SY", "YS", "OP"}
_FONT_JOIN = {"BR", "BI", "IB", "IR", "RB", "RI"}
_FONT_SPACE = {"B", "I", "SM", "SB"}


def _escape(m: re.Match) -> str:
    star = m.group(1) or m.group(2) or m.group(3)
    if star is not None:
        return _NAMED.get(star, "")
    special = m.group(4) or m.group(5)
    if special is not None:
        if special.startswith("u") and re.fullmatch(r"u[0-9A-Fa-f]{4,5}", special):
            return chr(int(special[1:], 16))
        if special in _NAMED:
            return _NAMED[special]
        if len(special) == 2 and special[0] in _ACCENTS and special[1].isalpha():
            return unicodedata.normalize("NFC", special[1] + _ACCENTS[special[0]])
        return ""
    one = m.group(6)
    if one is not None:
        return _SINGLE.get(one, "" if one in "&|^c%:dutpzrk!\n" else one)
    return ""


def _text(s: str) -> str:
    """Roff text with comments and escapes resolved."""
    s = re.sub(r'\\".*$', "", s)
    return _ESCAPE.sub(_escape, s)


def _args(s: str) -> list[str]:
    """A macro line's arguments, honouring double quotes."""
    return [a[1:-1] if a.startswith('"') and a.endswith('"') and len(a) > 1 else a
            for a in re.findall(r'"[^"]*"?|\S+', s)]


def render_roff(source: str, max_chars: int = 60_000) -> tuple[str, list[ManParagraph]]:
    """``(NAME line, paragraphs)`` of a man page's roff source (the first ``max_chars`` only:
    a few pages, bash's, run to hundreds of kilobytes). A ``.so`` page (a link) gives nothing."""
    section, para, paras = "", [], []
    item = skip_next = nofill = False
    skip_until: str | None = None
    depth = 0
    name_line = ""
    pending_heading = False

    def close() -> None:
        nonlocal para, item, name_line
        if para:
            text = re.sub(r"\s+", " ", " ".join(para)).strip()
            if text:
                if section in ("NAME", "NOM", "NOMBRE") and not name_line:
                    name_line = text
                paras.append(ManParagraph(section, text, item))
        para = []

    for raw in source[:max_chars].splitlines():
        line = raw.rstrip()
        if depth:  # inside an \{ ... \} block of a conditional: skipped
            depth += line.count("\\{") - line.count("\\}")
            depth = max(depth, 0)
            continue
        if skip_until is not None:
            if line.startswith(skip_until):
                skip_until = None
            continue
        if line.startswith((".\\\"", "'\\\"", ".\\#")) or line in (".", "'"):
            continue
        control = line[:1] in (".", "'")
        name, rest = "", ""
        if control:
            m = re.match(r"[.']\s*(\S+)\s*(.*)", line)
            if not m:
                continue
            name, rest = m.group(1), m.group(2)
            if name == "so":
                return "", []
        if skip_next:
            skip_next = False
            continue
        if nofill:
            if control and name in ("fi", "EE"):
                nofill = False
            continue
        if not control:
            if pending_heading:
                section, pending_heading = _text(line).strip().upper(), False
                continue
            if not line.strip():
                close()
                continue
            if line[:1] in (" ", "\t"):  # indented text in fill mode: an example
                close()
                continue
            para.append(_text(line))
            continue
        if name in ("de", "de1", "am", "ig"):
            skip_until = ".."
        elif name in ("if", "ie", "el", "while"):
            depth = max(rest.count("\\{") - rest.count("\\}"), 0)
        elif name in ("nf", "EX"):
            close()
            nofill = True
        elif name in ("SH", "Sh"):
            close()
            item = False
            heading = _text(" ".join(_args(rest))).strip().upper()
            section = heading
            pending_heading = not heading
        elif name in _BREAKS:
            close()
            item = name in ("TP", "IP", "TQ", "It", "HP") or (item and name not in ("SS", "Ss", "RE", "PP", "LP", "P"))
            if name in ("TP", "TQ"):
                skip_next = True
        elif name in _FONT_JOIN:
            para.append(_text("".join(_args(rest))))
        elif name in _FONT_SPACE:
            if rest:
                para.append(_text(" ".join(_args(rest))))
        # any other request (.TH, .ft, .ds, .nr, .hy, mdoc inline macros, ...) is dropped
    close()
    return name_line, paras
