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

With ``--speedup``, instead: the default drafter (``k=auto``, greedy) against target-only decoding
with each kernel choice, over built-in workloads, the four configurations run in turn on every
prompt (rotating their order) after one untimed warm-up each (which measures the cost table); per choice the speedup (ratio of mean tokens per second, as
Spec-Bench), whether every speculative text equals its target-only text, and whether the two
choices' texts agree.

    python -m verispec.bench.pass_costs --speedup [--workload all] [--limit 2] [--max-new-tokens 96]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from verispec.models import cpu_name, load_causal_lm
from verispec.kv import KVRunner


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


def speedups(workload: str = "all", limit: int = 2, max_new_tokens: int = 96, repeats: int = 1,
             target: str = "smollm2-135m", drafter: str = "default") -> dict:
    """Per kernel choice ("measured", "invariant"): ``{"speedup", "spec_tok_s", "target_tok_s",
    "greedy_equal"}`` over the first ``limit`` prompts of each workload, plus per category
    speedups and ``"choices_agree"`` (both choices emitted the same tokens)."""
    from verispec import SamplingParams, SpeculativeDecoder
    from verispec.drafters import make_drafter
    from verispec.workloads import load_workload

    prompts = []
    for name in (workload.split(",") if workload != "all" else [None]):
        ps = load_workload(name or "all")
        cats: dict[str, int] = {}
        for p in ps:
            if cats.get(p.category, 0) < limit:
                prompts.append(p)
                cats[p.category] = cats.get(p.category, 0) + 1
    greedy = SamplingParams(temperature=0)
    decs = {}
    for choice in ("measured", "invariant"):
        lm = load_causal_lm(target, kernel_choice=choice)
        import os
        os.environ["VERISPEC_KERNEL_CHOICE"] = choice  # the drafter's models, as --kernels does
        decs[(choice, "spec")] = SpeculativeDecoder(lm, make_drafter(drafter, target=target), k="auto")
        decs[(choice, "target")] = SpeculativeDecoder(lm, None)
    order = list(decs)
    for key in order:  # untimed: the first start() of a decoder with a drafter measures its cost table
        decs[key].generate(decs[key].encode([prompts[0].text], chat=prompts[0].chat), 8, greedy)
    secs: dict[tuple, dict[str, float]] = {key: {} for key in order}
    toks: dict[tuple, dict[str, int]] = {key: {} for key in order}
    out: dict[tuple, list] = {key: [] for key in order}
    for i, p in enumerate(prompts):
        for r in range(repeats):
            rot = order[(i + r) % len(order):] + order[:(i + r) % len(order)]
            for key in rot:
                ids = decs[key].encode([p.text], chat=p.chat)
                t0 = time.perf_counter()
                res = decs[key].generate(ids, max_new_tokens, greedy)
                dt = time.perf_counter() - t0
                secs[key][p.category] = secs[key].get(p.category, 0.0) + dt
                toks[key][p.category] = toks[key].get(p.category, 0) + len(res.token_ids[0])
                if r == 0:
                    out[key].append(res.token_ids[0])
    report: dict = {"prompts": len(prompts), "choices_agree": out[("measured", "spec")] == out[("invariant", "spec")]}
    for choice in ("measured", "invariant"):
        spec, base = (choice, "spec"), (choice, "target")
        rate = {key: sum(toks[key].values()) / sum(secs[key].values()) for key in (spec, base)}
        report[choice] = {"speedup": rate[spec] / rate[base], "spec_tok_s": rate[spec], "target_tok_s": rate[base],
                          "greedy_equal": out[spec] == out[base],
                          "per_category": {c: (toks[spec][c] / secs[spec][c]) / (toks[base][c] / secs[base][c])
                                           for c in secs[spec]}}
    return report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m verispec.bench.pass_costs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--context", type=int, default=250, help="tokens in the cache before each pass")
    ap.add_argument("--max-width", type=int, default=16, help="passes of 1..N tokens")
    ap.add_argument("--rounds", type=int, default=15, help="timed rounds (medians)")
    ap.add_argument("--rows", type=int, default=1, help="rows per pass (a batch)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--speedup", action="store_true", help="the default drafter's speedup with each kernel choice")
    ap.add_argument("--workload", default="all", help="--speedup: built-in workloads (comma-separated or all)")
    ap.add_argument("--limit", type=int, default=2, help="--speedup: prompts per workload")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="--speedup: tokens per generation")
    ap.add_argument("--repeats", type=int, default=1, help="--speedup: timed generations per prompt and config")
    args = ap.parse_args(argv)
    if args.threads < 0:
        ap.error("--threads must be >= 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.speedup:
        for name in ("limit", "max_new_tokens", "repeats"):
            if getattr(args, name) < 1:
                ap.error(f"--{name.replace('_', '-')} must be >= 1")
        rep = speedups(args.workload, args.limit, args.max_new_tokens, args.repeats)
        print(f"{cpu_name()}, torch {torch.__version__}, {torch.get_num_threads()} threads; {rep['prompts']} prompts "
              f"({args.workload}, {args.limit} each), {args.max_new_tokens} tokens, greedy, default drafter, k=auto")
        cats = list(rep["measured"]["per_category"])
        print("| kernels | target-only tok/s | speculative tok/s | speedup | " + " | ".join(cats) + " | greedy = target-only |")
        print("|---|---|---|---|" + "---|" * len(cats) + "---|")
        for choice in ("measured", "invariant"):
            r = rep[choice]
            print(f"| {choice} | {r['target_tok_s']:.2f} | {r['spec_tok_s']:.2f} | {r['speedup']:.2f}x | "
                  + " | ".join(f"{r['per_category'][c]:.2f}x" for c in cats) + f" | {r['greedy_equal']} |")
        print(f"invariant / measured speedup: {rep['invariant']['speedup'] / rep['measured']['speedup']:.3f}; "
              f"the two choices' texts agree: {rep['choices_agree']}")
        return
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
