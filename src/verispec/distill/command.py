"""``verispec distill``: its options, running it from parsed options, and printing the summary.

The CLI (:mod:`verispec.cli`) wires these in; ``python -m verispec.distill`` runs :func:`main`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .config import DistillConfig
from .pipeline import distill

__all__ = ["add_distill_arguments", "main", "run_from_args"]


def add_distill_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``verispec distill`` options."""
    d = DistillConfig()
    parser.add_argument("--target", default=d.target, help="target model: built-in name, HF dir or .gguf")
    parser.add_argument("--out", required=True, help="output directory (resumable; loadable by load_causal_lm)")
    parser.add_argument("--corpus", action="append", default=[], metavar="PATH",
                        help="extra text files or folders (repeatable); the Python stdlib is always used "
                             "unless --no-stdlib")
    parser.add_argument("--no-stdlib", action="store_true", help="do not use the stdlib sources as corpus")
    parser.add_argument("--arch", default=d.arch,
                        help="llama-l<layers>-h<hidden>[-i<intermediate>] for an independent draft model, or "
                             "'eagle' for a head over the target's features (default %(default)s)")
    parser.add_argument("--depth", type=int, default=d.depth,
                        help="eagle: unrolled draft steps trained per position (default %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=d.vocab_size,
                        help="draft output vocabulary (vocab map rows; 0 = full) (default %(default)s)")
    parser.add_argument("--steps", type=int, default=d.steps, help="training steps (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label-tokens", type=int, default=d.label_tokens,
                        help="teacher-forced corpus tokens to label (default %(default)s)")
    parser.add_argument("--self-distill-prompts", type=int, default=d.self_distill_prompts,
                        help="prompts the target continues itself (default %(default)s)")
    parser.add_argument("--def-prompts", type=int, default=d.def_prompts,
                        help="extra target continuations of short prompts ending at a Python def header "
                             "(code-completion style) (default %(default)s)")
    parser.add_argument("--chat-prompts", type=int, default=d.chat_prompts,
                        help="target answers to chat prompts built offline from the corpus (code completion, "
                             "explanation, edits, documentation questions; default %(default)s)")
    parser.add_argument("--heldout-chat-prompts", type=int, default=d.heldout_chat_prompts,
                        help="the same from the held-out files, for evaluation (default %(default)s)")
    parser.add_argument("--chat-weight", type=float, default=d.chat_weight,
                        help="sampling weight of chat sequences in training batches (default %(default)s)")
    parser.add_argument("--def-oversample", type=float, default=d.def_oversample,
                        help="sampling weight of those continuations in training batches (default %(default)s)")
    parser.add_argument("--init-from", default="", metavar="DIR",
                        help="eagle: fine-tune this head (a directory, or 'eagle' for the built-in one) instead "
                             "of starting fresh; keeps its vocab map")
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--lr", type=float, default=d.lr)
    parser.add_argument("--label-seconds", type=float, default=0.0,
                        help="stop labelling after this many seconds (train on what exists; 0 = no limit)")
    parser.add_argument("--stages", default="label,train,export", help="comma-separated subset of label,train,export")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (1 is best on a busy 2-core box)")
    parser.add_argument("--no-measure", action="store_true", help="skip measuring the draft/target step cost c")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run_from_args(args: argparse.Namespace) -> int:
    """Run ``distill`` from parsed ``add_distill_arguments`` options and print the summary."""
    s = distill(args.target, list(args.corpus), args.out, arch=args.arch, vocab_size=args.vocab_size,
                steps=args.steps, seed=args.seed, label_tokens=args.label_tokens,
                self_distill_prompts=args.self_distill_prompts, progress=not args.quiet,
                stdlib=not args.no_stdlib, stages=[s for s in args.stages.split(",") if s],
                measure=not args.no_measure, threads=args.threads, batch_size=args.batch_size, lr=args.lr,
                time_budget_s=args.label_seconds, def_prompts=args.def_prompts,
                def_oversample=args.def_oversample, depth=args.depth, chat_prompts=args.chat_prompts,
                heldout_chat_prompts=args.heldout_chat_prompts, chat_weight=args.chat_weight,
                init_from=args.init_from)
    _print_summary(s, args.out)
    return 0


def _print_summary(s: dict, out: str) -> None:
    """Held-out agreement, the cost c, acceptance per workload and the export size of summary ``s``."""
    from rich.console import Console

    console = Console()
    ev = s.get("train", {}).get("eval", {})
    if ev and "agree" in ev:  # EAGLE head: agreement of each unrolled draft step
        console.print(f"held-out KL {ev['kl']:.3f}, top-1 agreement with the target by draft step: "
                      + ", ".join(f"{a:.3f}" for a in ev["agree"]))
    elif ev:
        console.print(f"held-out KL {ev.get('kl_all', float('nan')):.3f}, top-1 agreement "
                      f"{ev.get('agree_all', float('nan')):.3f} (human text {ev.get('agree_human', float('nan')):.3f}, "
                      f"target's own output {ev.get('agree_generated', float('nan')):.3f})")
    if "cost" in s:
        c = s["cost"]
        console.print(f"draft step {c['draft_step_s'] * 1e3:.2f} ms, target step {c['target_step_s'] * 1e3:.1f} ms, "
                      f"c = {c['c']:.3f}")
    for name, a in s.get("acceptance", {}).items():
        console.print(f"{name} prompts, greedy, k=4: alpha {a['alpha']:.3f} (accepted / drafted "
                      f"{a['draft_acceptance']:.3f}), tau {a['tau']:.2f}")
    if "size_bytes" in s:
        console.print(f"wrote {out} ({s['size_bytes'] / 1e6:.1f} MB)")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m verispec.distill``: the same as ``verispec distill`` (one-line errors, exit codes
    2 for a usage error, 130 on Ctrl-C), without importing the CLI."""
    from ..exits import run_command

    parser = argparse.ArgumentParser(prog="verispec distill",
                                     description="Train a small draft model to imitate a target.")
    add_distill_arguments(parser)
    args = parser.parse_args(argv)
    return run_command("distill", lambda: run_from_args(args))
