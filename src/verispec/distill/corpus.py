"""The text corpus: the standard library's sources plus any local files, split train / held-out
by file, tokenized into one stream per split (cached under ``out/labels/``)."""

from __future__ import annotations

import hashlib
import os
import sysconfig
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file

from .training import atomic_save

__all__ = ["TEXT_SUFFIXES", "corpus_files", "prepare_streams", "split_files", "stdlib_files"]

TEXT_SUFFIXES = (".py", ".txt", ".md", ".rst", ".json", ".c", ".h", ".js", ".ts", ".java", ".go", ".rs", ".html")
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test", "lib2to3"}


def stdlib_files() -> list[Path]:
    """The standard library's ``*.py`` files (tests and site-packages excluded), sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py") if not (_SKIP_DIRS & set(p.relative_to(root).parts[:-1])))


def corpus_files(paths: Sequence[str | os.PathLike] = (), *, stdlib: bool = True) -> list[Path]:
    """Expand files and folders (recursively, text suffixes only) plus, by default, the stdlib."""
    files = stdlib_files() if stdlib else []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in TEXT_SUFFIXES)
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"corpus path {str(p)!r} does not exist")
    return files


def split_files(files: Sequence[Path], heldout_frac: float = 0.1) -> tuple[list[Path], list[Path]]:
    """Train / held-out split by a stable hash of each file's name (a file is never in both)."""
    train, held = [], []
    for f in files:
        h = int(hashlib.sha1(f"{f.parent.name}/{f.name}".encode()).hexdigest()[:8], 16) / 16**8
        (held if h < heldout_frac else train).append(f)
    return train, held


def _read_texts(files: Sequence[Path]) -> list[str]:
    """The non-blank texts of ``files`` (UTF-8, bad bytes replaced; unreadable files skipped)."""
    texts = []
    for f in files:
        try:
            texts.append(f.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return [t for t in texts if t.strip()]


def _token_stream(tok, texts: Sequence[str], cache: Path | None) -> torch.Tensor:
    """All texts tokenized and concatenated, EOS between documents: ``[T]`` int64 (cached in
    ``cache`` as int32)."""
    if cache is not None and cache.is_file():
        return load_file(cache)["ids"].long()
    eos = tok.eos_token_id if tok.eos_token_id is not None else 0
    ids: list[int] = []
    for start in range(0, len(texts), 64):
        for doc in tok(list(texts[start:start + 64]), add_special_tokens=False)["input_ids"]:
            ids.extend(doc)
            ids.append(eos)
    stream = torch.tensor(ids, dtype=torch.int32)
    if cache is not None:
        atomic_save({"ids": stream}, cache)
    return stream.long()


def prepare_streams(tok, corpus: Sequence[str | os.PathLike], out: Path, *, stdlib: bool = True
                    ) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Token streams (train ``[T]``, held-out ``[T']``, int64) of the corpus, cached in ``out/labels/``.

    The dict counts files and tokens per split; its ``"files"`` is (train files, held-out files).
    """
    files = corpus_files(corpus, stdlib=stdlib)
    if not files:
        raise ValueError("the corpus is empty: pass --corpus files or folders (or keep the stdlib default)")
    train_f, held_f = split_files(files)
    if not held_f:  # tiny corpora: hold out the last file
        train_f, held_f = train_f[:-1] or train_f, train_f[-1:]
    labels = out / "labels"
    train = _token_stream(tok, _read_texts(train_f), labels / "stream-train.safetensors")
    held = _token_stream(tok, _read_texts(held_f), labels / "stream-heldout.safetensors")
    info = {"files_train": len(train_f), "files_heldout": len(held_f), "tokens_train": len(train),
            "tokens_heldout": len(held), "files": (train_f, held_f)}
    return train, held, info
