"""The target's features of archived answers, in one teacher-forced pass: answer shards again.

:mod:`.archive` keeps only token ids; this turns an archive back into the answer shards a head
trains on (:mod:`.answers`' format with ``features``), running the target once over each
prompt + answer instead of generating it again. Sequences go through in batches of similar
length, right-padded: a causal model's hidden states at real positions never read the padding
after them, so no mask is needed. Shards of ``shard_size`` sequences are written atomically and
skipped when present (resumable).

The features are the target's in the precision it is loaded with: float32 gives the features
the engine's float32 target computes (the answers may still have been generated in bfloat16; the
archive says), bfloat16 those of the faster approximation the data runs generate with. Each
shard records both (metadata ``dtype``: generation; ``features_dtype``: this pass).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..drafters.eagle_head import check_taps, target_features, target_taps
from .training import atomic_save
from .answers import AnswerJob, shard_path, shard_tensors
from .archive import AnswerArchive, read_archive

if TYPE_CHECKING:
    from ..models import CausalLM

__all__ = ["FeatureRun", "archive_features", "parse_taps", "sequence_features"]


def parse_taps(text: str, target_config, what: str = "taps") -> tuple[int, ...]:
    """``"3,15"`` -> ``(3, 15)``: distinct decoder layers of the target before its last (1-based;
    :func:`verispec.drafters.eagle_head.check_taps`); ``""`` -> ``()``."""
    if not text.strip():
        return ()
    try:
        taps = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise ValueError(f"{what}: expected comma-separated layer numbers, got {text!r}") from None
    return check_taps(taps, target_config.num_hidden_layers, what)


@dataclass
class FeatureRun:
    """What a run did: shards written now / found, sequences and tokens passed, seconds."""

    written: int = 0
    skipped: int = 0
    sequences: int = 0
    tokens: int = 0
    seconds: float = 0.0


@torch.inference_mode()
def sequence_features(model, sequences: Sequence[list[int]], *, batch_tokens: int = 8192,
                      taps: Sequence[int] = ()) -> list[torch.Tensor] | tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The target's final hidden states of each sequence at every position but the last,
    ``[len(s) - 1, H]`` float16 each, in the order given (batched by length, right-padded).
    With ``taps`` (decoder layers), also the residual stream after those layers, ``[len(s) - 1,
    n, H]`` float16 each, as a second list (:func:`verispec.drafters.eagle_head.target_taps`)."""
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    out: list[torch.Tensor | None] = [None] * len(sequences)
    out_taps: list[torch.Tensor | None] = [None] * len(sequences)
    start = 0
    while start < len(order):
        # the longest sequence of a batch is its last (sorted); grow while the padded batch fits
        end = start + 1
        while end < len(order) and (end + 1 - start) * (len(sequences[order[end]]) - 1) <= batch_tokens:
            end += 1
        rows = order[start:end]
        T = len(sequences[rows[-1]]) - 1
        ids = torch.zeros(len(rows), T, dtype=torch.int64)  # [b, T], right-padded
        for b, i in enumerate(rows):  # once per sequence, not a hot path
            ids[b, :len(sequences[i]) - 1] = torch.tensor(sequences[i][:-1])
        if taps:
            f, h = target_taps(model, ids.to(model.device), taps)  # [b, T, H], [b, T, n, H]
            h = h.to("cpu", torch.float16)
        else:
            f, h = target_features(model, ids.to(model.device)), None
        f = f.to("cpu", torch.float16)
        for b, i in enumerate(rows):
            out[i] = f[b, :len(sequences[i]) - 1].clone()
            if h is not None:
                out_taps[i] = h[b, :len(sequences[i]) - 1].clone()
        start = end
    return (out, out_taps) if taps else out  # type: ignore[return-value]


def archive_features(target: CausalLM, archive: AnswerArchive, out: Path, *, shard_size: int = 256,
                     batch_tokens: int = 8192, time_budget_s: float = 0.0, taps: Sequence[int] = (),
                     on_progress: Callable[[FeatureRun], None] | None = None) -> FeatureRun:
    """Write the answer shards (with features) of ``archive`` under ``out``: shard i holds
    sequences ``i * shard_size`` .. of the archive; shards present are skipped, and no new
    shard is begun after ``time_budget_s`` seconds (0 = no limit)."""
    for name, v in (("shard_size", shard_size), ("batch_tokens", batch_tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    out.mkdir(parents=True, exist_ok=True)
    n = len(archive.sequences)
    run = FeatureRun()
    t0 = time.perf_counter()
    prompts, answers = archive.prompts(), archive.answers()
    for si, a in enumerate(range(0, n, shard_size)):
        idx = range(a, min(a + shard_size, n))
        if shard_path(out, si).is_file():
            run.skipped += 1
            continue
        if time_budget_s and time.perf_counter() - t0 > time_budget_s:
            break
        seqs = [archive.sequences[i] for i in idx]
        feats, tap_states = (sequence_features(target.model, seqs, batch_tokens=batch_tokens, taps=taps) if taps
                             else (sequence_features(target.model, seqs, batch_tokens=batch_tokens), None))
        jobs = [AnswerJob(archive.ids[i], archive.families[i], "") for i in idx]
        tensors, meta = shard_tensors(jobs, [prompts[i] for i in idx], [answers[i] for i in idx], feats,
                                      dtype=archive.dtype, taps=tap_states, tap_layers=taps)
        meta["features_dtype"] = str(target.model.dtype)
        atomic_save(tensors, shard_path(out, si), metadata=meta)
        run.written += 1
        run.sequences += len(idx)
        run.tokens += sum(len(archive.sequences[i]) - 1 for i in idx)
        run.seconds = time.perf_counter() - t0
        if on_progress is not None:
            on_progress(run)
    run.seconds = time.perf_counter() - t0
    return run


def main(argv: Sequence[str] | None = None, prog: str = "python -m verispec.distill.refeature") -> int:
    """``verispec distill features``: answer shards with the target's features from an archive
    (one teacher-forced pass; see the module doc)."""
    import argparse

    from ..exits import run_command

    ap = argparse.ArgumentParser(prog=prog, description=main.__doc__)
    ap.add_argument("--archive", required=True, metavar="FILE", help="answer archive (`verispec distill pack`)")
    ap.add_argument("--out", required=True, metavar="DIR", help="output folder for the answer shards")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "auto"),
                    help="precision of the target's pass (the features' source): bfloat16 runs its body in "
                         "bfloat16; auto: whichever multiplies matrices faster on this machine")
    ap.add_argument("--shard-size", type=int, default=256)
    ap.add_argument("--batch-tokens", type=int, default=8192, help="padded tokens per target pass")
    ap.add_argument("--time-budget", type=float, default=0.0, help="begin no new shard after this many seconds")
    ap.add_argument("--taps", default="", metavar="L,L,...",
                    help="also store the residual stream after these decoder layers (1-based; what a head "
                         "trained with `distill head --taps` reads)")
    args = ap.parse_args(argv)

    def body() -> int:
        from rich.console import Console

        from ..models import float32_head, load_causal_lm, matmul_dtype
        from .progress import progress_bar

        path = Path(args.archive)
        if not path.is_file():
            raise ValueError(f"--archive: {args.archive!r} is not a file")
        archive = read_archive(path)
        target = load_causal_lm(args.target, dtype=matmul_dtype(args.dtype))
        taps = parse_taps(args.taps, target.model.config, "--taps")
        float32_head(target.model)  # a no-op in float32
        vocab = target.vocab_size
        bad = next((i for i, s in zip(archive.ids, archive.sequences) if max(s) >= vocab), None)
        if bad is not None:
            raise ValueError(f"--archive: sequence {bad!r} has token ids outside {args.target}'s "
                             f"vocabulary [0, {vocab})")
        with progress_bar(True) as bar:
            task = bar.add_task("features", total=len(archive.ids))
            run = archive_features(target, archive, Path(args.out), shard_size=args.shard_size,
                                   batch_tokens=args.batch_tokens, time_budget_s=args.time_budget, taps=taps,
                                   on_progress=lambda r: bar.update(task, completed=r.sequences))
        Console(stderr=True).print(f"done: {run.written} shards written, {run.skipped} already there; "
                                   f"{run.sequences} sequences, {run.tokens} tokens in {run.seconds:.0f} s")
        return 0

    return run_command("distill features", body)


if __name__ == "__main__":
    raise SystemExit(main())
