"""Answer archives: the target's answers as token ids only, small enough to keep in the repository.

Generating the target's answers is the slow part of training a head (hours on a 2-core CPU);
their features are not (one teacher-forced pass, :mod:`.refeature`). An archive keeps what the
slow part made, so that a new machine rebuilds the training data from it without generating
again, and so that the features can be recomputed with another precision or another feature set.

One archive is one safetensors file:

* ``tokens [S]``: every sequence (chat-templated prompt + answer) one after another, uint16
  where every id fits (SmolLM2's 49,152 do), else int32;
* ``length [N]`` and ``prompt_len [N]`` int32: each sequence's tokens and how many of them are
  its prompt;
* metadata: ``format`` (:data:`ARCHIVE_FORMAT`), ``ids`` and ``families`` (JSON lists, one per
  sequence, unique ids) and ``dtype``, the precision the target generated in.

``verispec distill pack --answers DIR... --out FILE`` writes one from answer shards
(:mod:`.answers`, with or without features).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from .training import atomic_save
from .answers import answer_shards, read_answer_index

__all__ = ["ARCHIVE_FORMAT", "AnswerArchive", "pack_answers", "read_archive", "write_archive"]

ARCHIVE_FORMAT = "verispec-answers-v1"


@dataclass
class AnswerArchive:
    """Sequences as token-id lists (prompt + answer), each with its prompt length, id and family,
    and the precision the target generated them in."""

    sequences: list[list[int]]
    prompt_len: list[int]
    ids: list[str]
    families: list[str]
    dtype: str

    def __post_init__(self) -> None:
        n = len(self.sequences)
        if not (len(self.prompt_len) == len(self.ids) == len(self.families) == n):
            raise ValueError(f"archive fields disagree: {n} sequences, {len(self.prompt_len)} prompt lengths, "
                             f"{len(self.ids)} ids, {len(self.families)} families")
        if len(set(self.ids)) != n:
            raise ValueError("archive ids must be unique")
        for i, (s, p) in enumerate(zip(self.sequences, self.prompt_len)):
            if not 1 <= p < len(s):
                raise ValueError(f"sequence {self.ids[i]!r}: prompt length {p} outside [1, {len(s)})")

    @property
    def answer_tokens(self) -> int:
        return sum(len(s) - p for s, p in zip(self.sequences, self.prompt_len))

    def prompts(self) -> list[list[int]]:
        return [s[:p] for s, p in zip(self.sequences, self.prompt_len)]

    def answers(self) -> list[list[int]]:
        return [s[p:] for s, p in zip(self.sequences, self.prompt_len)]


def write_archive(archive: AnswerArchive, path: Path) -> None:
    """Write ``archive`` to ``path`` atomically (readers never see half a file)."""
    flat = [t for s in archive.sequences for t in s]
    top = max(flat, default=0)
    if min(flat, default=0) < 0:
        raise ValueError("archive token ids must be >= 0")
    dtype = torch.uint16 if top < 2 ** 16 else torch.int32
    tensors = {"tokens": torch.tensor(flat, dtype=torch.int64).to(dtype),
               "length": torch.tensor([len(s) for s in archive.sequences], dtype=torch.int32),
               "prompt_len": torch.tensor(archive.prompt_len, dtype=torch.int32)}
    meta = {"format": ARCHIVE_FORMAT, "ids": json.dumps(archive.ids), "families": json.dumps(archive.families),
            "dtype": archive.dtype}
    atomic_save(tensors, path, metadata=meta)


def read_archive(path: Path) -> AnswerArchive:
    """Read an archive written by :func:`write_archive`; ``ValueError`` naming the file if it is not one."""
    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (OSError, SafetensorError) as e:
        raise ValueError(f"{str(path)!r} is not a readable safetensors file: {e}") from None
    if meta.get("format") != ARCHIVE_FORMAT:
        raise ValueError(f"{str(path)!r} is not an answer archive (format {meta.get('format')!r}, "
                         f"expected {ARCHIVE_FORMAT!r})")
    missing = {"tokens", "length", "prompt_len"} - set(tensors)
    if missing:
        raise ValueError(f"{str(path)!r}: answer archive without {sorted(missing)}")
    length = tensors["length"].tolist()
    tokens = tensors["tokens"].to(torch.int64)
    if sum(length) != tokens.numel():
        raise ValueError(f"{str(path)!r}: lengths add up to {sum(length)} tokens, the archive holds {tokens.numel()}")
    sequences = [s.tolist() for s in torch.split(tokens, length)]
    return AnswerArchive(sequences, tensors["prompt_len"].tolist(), json.loads(meta.get("ids", "[]")),
                         json.loads(meta.get("families", "[]")), meta.get("dtype", ""))


def pack_answers(folders: Sequence[Path]) -> AnswerArchive:
    """Every sequence of the answer shards under ``folders`` (in shard order), token ids only.

    All shards must come from one precision (their ``dtype``) and hold distinct ids."""
    shards = [p for d in folders for p in answer_shards(d)]
    if not shards:
        raise ValueError(f"no answer shards (answers-*.safetensors) under {[str(d) for d in folders]}")
    seqs, plen, ids, fams, dtypes = [], [], [], [], set()
    for path in shards:
        sid, sfam, _ = read_answer_index(path)
        with safe_open(str(path), "pt") as f:  # the token tensors only: a shard's features are ~1 KB a token
            dtypes.add((f.metadata() or {}).get("dtype", ""))
            tokens, length, prompt_len = (f.get_tensor(k) for k in ("input_ids", "length", "prompt_len"))
        seqs += [row[:n].tolist() for row, n in zip(tokens, length.tolist())]
        plen += prompt_len.tolist()
        ids += sid
        fams += sfam
    if len(dtypes) > 1:
        raise ValueError(f"the shards were generated in different precisions {sorted(dtypes)}: pack each apart")
    return AnswerArchive(seqs, plen, ids, fams, dtypes.pop())


def main(argv: Sequence[str] | None = None, prog: str = "python -m verispec.distill.archive") -> int:
    """``verispec distill pack``: pack answer shards into one archive (token ids only)."""
    import argparse

    from rich.console import Console

    from ..exits import run_command

    ap = argparse.ArgumentParser(prog=prog, description=main.__doc__)
    ap.add_argument("--answers", nargs="+", required=True, metavar="DIR", help="folders of answer shards")
    ap.add_argument("--out", required=True, metavar="FILE", help="archive to write (.safetensors)")
    args = ap.parse_args(argv)

    def body() -> int:
        out = Path(args.out)
        if out.suffix != ".safetensors":
            raise ValueError(f"--out must end in .safetensors, got {args.out!r}")
        if not out.parent.is_dir():
            raise ValueError(f"--out: folder {str(out.parent)!r} does not exist")
        for d in args.answers:
            if not Path(d).is_dir():
                raise ValueError(f"--answers: {d!r} is not a folder")
        archive = pack_answers([Path(d) for d in args.answers])
        write_archive(archive, out)
        Console(stderr=True).print(f"{out}: {len(archive.ids)} answers, {archive.answer_tokens} answer tokens, "
                                   f"{sum(map(len, archive.sequences))} tokens in all, "
                                   f"{out.stat().st_size / 2**20:.1f} MiB")
        return 0

    return run_command("distill pack", body)


if __name__ == "__main__":
    raise SystemExit(main())
