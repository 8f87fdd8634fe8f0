"""Text of a row, decoded incrementally, and stop strings.

Only rows that need text while they run (stop strings, streaming) are decoded during
generation, and each step decodes only the newest tokens: ``decode(ids[prefix:])`` minus
``decode(ids[prefix:read])``, where ``prefix`` trails by one step so that a token's rendering
that depends on its predecessor (a leading space, half a multi-byte character) comes out right.
A piece that ends in U+FFFD (an incomplete UTF-8 sequence) waits for the next tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RowText", "find_stop", "stop_prefix_tail", "trim_to_text"]


@dataclass
class RowText:
    """Incremental text of one row."""

    stop: tuple[str, ...] = ()
    text: str = ""  # the row's text so far, complete characters only
    prefix: int = 0  # token index where the last decode window started
    read: int = 0  # tokens already rendered into ``text``
    sent: int = 0  # characters handed out as stream deltas

    def advance(self, tok, ids: list[int]) -> str:
        """Render the tokens after ``read``; returns the new text (maybe empty)."""
        before = tok.decode(ids[self.prefix:self.read], skip_special_tokens=True)
        after = tok.decode(ids[self.prefix:], skip_special_tokens=True)
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        piece = after[len(before):]
        self.prefix, self.read = self.read, len(ids)
        self.text += piece
        return piece

    def stop_in(self, piece: str) -> bool:
        """Whether a stop string ends within the text up to the newest ``piece``."""
        if not self.stop or not piece:
            return False
        start = max(0, len(self.text) - len(piece) - max(len(s) for s in self.stop) + 1)
        return find_stop(self.text[start:], self.stop) is not None

    def delta(self) -> str:
        """The text not streamed yet, holding back an end that may be the start of a stop string
        (a piece once streamed cannot be taken back when the next tokens complete it)."""
        safe = len(self.text) - stop_prefix_tail(self.text, self.stop)
        if safe <= self.sent:
            return ""
        out = self.text[self.sent:safe]
        self.sent = safe
        return out

    def flush(self, final: str) -> str:
        """The rest of ``final`` (the row's finished text) after what was streamed."""
        out = final[self.sent:] if len(final) > self.sent else ""
        self.sent = max(self.sent, len(final))
        return out


def find_stop(text: str, stop: Sequence[str]) -> int | None:
    """Index of the earliest stop string in ``text``, or None."""
    hits = [text.find(s) for s in stop if s in text]
    return min(hits) if hits else None


def stop_prefix_tail(text: str, stop: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that is a proper prefix of a stop string."""
    return max((n for s in stop for n in range(1, len(s)) if text.endswith(s[:n])), default=0)


def trim_to_text(tok, ids: list[int], text: str) -> list[int]:
    """The shortest prefix of ``ids`` whose decoding covers ``text`` (the stop string's tokens dropped after)."""
    for n in range(len(ids) + 1):
        if len(tok.decode(ids[:n], skip_special_tokens=True)) >= len(text):
            return ids[:n]
    return ids
