"""What batch invariance costs: target passes of n = 1..16 tokens with the batch-invariant kernels
against the kernels timed fastest on this machine, in one process.

Two copies of the target are loaded, one with ``kernel_choice="invariant"`` (rowdot for every
linear and row count, the ``attend`` attention), one with ``kernel_choice="measured"`` (per shape
and row count, the fastest of F.linear, oneDNN-packed, ``(W @ x.T).T`` and rowdot; torch's SDPA
attention). Each holds the same context; passes of every width are timed in turn, alternating the
two models within every round, so that drift and the other core's load hit both alike. Reported:
the median milliseconds per width and their ratio (invariant / fastest), and the largest logit
difference between the two (the fastest kernels are not bitwise the invariant ones).

    python -m verispec.bench.pass_costs [--context 250] [--max-width 16] [--rounds 15] [--rows 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from verispec.models import cpu_name, load_causal_lm
from verispec.runner import KVRunner


def pass_costs(context: int = 250, max_width: int = 16, rounds: int = 15, rows: int = 1,
               target: str = "smollm2-135m") -> list[dict]:
    """Per width n = 1..``max_width``: ``{"n", "fastest_ms", "invariant_ms", "ratio", "max_diff"}``,
    medians over ``rounds`` interleaved rounds of a pass of ``rows`` rows x n tokens after
    ``context`` tokens."""
    models = {name: load_causal_lm(target, kernel_choice=name) for name in ("measured", "invariant")}
    gen = torch.Generator().manual_seed(0)
    V = models["measured"].vocab_size
    ctx = torch.randint(5, V, (rows, context), generator=gen)
    feed = torch.randint(5, V, (rows, max_width), generator=gen)
    runners = {}
    with torch.inference_mode():
        for name, lm in models.items():
            runners[name] = KVRunner(lm.model, rows)
            runners[name].forward(ctx, logits_to_keep=1)
        start = {name: r.lengths.clone() for name, r in runners.items()}
        times: dict[tuple[str, int], list[float]] = {}
        diffs: dict[int, float] = {}
        for rnd in range(rounds + 1):  # round 0 warms up every shape
            for n in range(1, max_width + 1):
                order = list(runners) if (rnd + n) % 2 == 0 else list(runners)[::-1]
                outs = {}
                for name in order:
                    r = runners[name]
                    t0 = time.perf_counter()
                    outs[name] = r.forward(feed[:, :n])
                    dt = time.perf_counter() - t0
                    r.truncate(start[name])
                    if rnd:
                        times.setdefault((name, n), []).append(dt)
                if rnd == 0:
                    diffs[n] = float((outs["measured"] - outs["invariant"]).abs().max())
    table = []
    for n in range(1, max_width + 1):
        fast = statistics.median(times[("measured", n)]) * 1e3
        inv = statistics.median(times[("invariant", n)]) * 1e3
        table.append({"n": n, "fastest_ms": fast, "invariant_ms": inv, "ratio": inv / fast, "max_diff": diffs[n]})
    return table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m verispec.bench.pass_costs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--context", type=int, default=250, help="tokens in the cache before each pass")
    ap.add_argument("--max-width", type=int, default=16, help="passes of 1..N tokens")
    ap.add_argument("--rounds", type=int, default=15, help="timed rounds (medians)")
    ap.add_argument("--rows", type=int, default=1, help="rows per pass (a batch)")
    args = ap.parse_args(argv)
    for name in ("context", "max_width", "rounds", "rows"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    table = pass_costs(args.context, args.max_width, args.rounds, args.rows)
    print(f"{cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{args.rows} row(s), context {args.context}, median of {args.rounds} interleaved rounds")
    print("| n | fastest (ms) | invariant (ms) | invariant / fastest | max logit diff |")
    print("|---|---|---|---|---|")
    for row in table:
        print(f"| {row['n']} | {row['fastest_ms']:.2f} | {row['invariant_ms']:.2f} | {row['ratio']:.3f} | {row['max_diff']:.1e} |")
    worst = max(row["ratio"] for row in table)
    print(f"worst ratio {worst:.3f}; v(n)/v(1): fastest "
          + " ".join(f"{row['fastest_ms'] / table[0]['fastest_ms']:.2f}" for row in table)
          + "; invariant " + " ".join(f"{row['invariant_ms'] / table[0]['invariant_ms']:.2f}" for row in table))


if __name__ == "__main__":
    main()
