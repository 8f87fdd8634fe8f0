"""Speed of ``verispec.verify`` on the CPU against a floor and a naive per-row loop.

For B in {1, 16, 64}, K in {4, 8}, V in {32000, 128256} (float32) and each mode

* exact      draft_probs given (drafts sampled from q),
* point      exact with point-mass drafts (draft_probs=None),
* gumbel     drafter-invariant mode (drafts = the drafter's own Gumbel-max tokens),
* greedy     one-hot target (temperature 0) with point-mass drafts,

it times ``verify`` with ``validate=True`` and ``validate=False`` against

* the floor: one torch pass that reads what verify is given once (``p.sum() + q.sum()``, or
  ``p.sum()`` without draft_probs), and
* a naive loop: the certifier's per-row, per-slot float64 reference
  (:func:`verispec.certify.reference_verify`, like vLLM's old reference sampler), with the same draws.

q is a perturbation of p (logits + N(0, 1) noise), so acceptance is moderate, as with a real
drafter; the "acc" column is the mean number of accepted drafts. Times are medians over repeats,
with the variants interleaved inside each repeat (the machine is noisy). Prints a markdown table.

On a shared 2-core machine use ``--threads 1 --clock cpu``: wall times with 2 threads are
dominated by OpenMP waits whenever another process holds a core. verify's own work is small, so
its [B, V] temporaries matter: with glibc's default malloc they often page-fault afresh on each
call; a caching allocator (jemalloc / tcmalloc, or ``MALLOC_MMAP_THRESHOLD_=4000000000
MALLOC_TRIM_THRESHOLD_=100000000000``) removes that cost.

    verispec bench verify [--quick] [--threads N]
    python -m verispec.bench.verify_bench [--quick] [--repeats N] [--threads N] [--clock wall|cpu] [--no-naive]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from verispec import verify
from verispec.certify.reference import reference_verify
from verispec.rng import STREAM_DRAFT, sample
from verispec.verify import gumbel_argmax

MODES = ("exact", "point", "gumbel", "greedy")


def make_inputs(B: int, K: int, V: int, mode: str, gen: torch.Generator) -> dict:
    logits_p = torch.randn(B, K + 1, V, generator=gen) * 3
    logits_q = logits_p[:, :K] + torch.randn(B, K, V, generator=gen)
    p = torch.softmax(logits_p, -1)
    q = torch.softmax(logits_q, -1)
    seeds = torch.randint(0, 2**62, (B,), generator=gen)
    positions = torch.randint(0, 10_000, (B,), generator=gen)
    slot_pos = positions[:, None] + torch.arange(K)
    if mode == "exact":
        d = sample(q, seeds[:, None], slot_pos, STREAM_DRAFT)
        return dict(p=p, q=q, d=d, seeds=seeds, positions=positions, method="exact", greedy=False)
    if mode == "point":
        d = sample(q, seeds[:, None], slot_pos, STREAM_DRAFT)
        return dict(p=p, q=None, d=d, seeds=seeds, positions=positions, method="exact", greedy=False)
    if mode == "gumbel":
        d = gumbel_argmax(torch.log(q), seeds, positions)
        return dict(p=p, q=None, d=d, seeds=seeds, positions=positions, method="gumbel")
    assert mode == "greedy"
    p = torch.zeros_like(p).scatter_(-1, logits_p.argmax(-1, keepdim=True), 1.0)
    d = logits_q.argmax(-1)
    return dict(p=p, q=None, d=d, seeds=seeds, positions=positions, method="exact", greedy=True)


def run_verify(x: dict, validate: bool):
    # Rows are flagged greedy or not the way the engine does it (it knows the temperature);
    # greedy=None would add one pass over p to detect one-hot rows.
    return verify(x["p"], x["q"], x["d"], seeds=x["seeds"], positions=x["positions"], method=x["method"],
                  greedy=x.get("greedy"), validate=validate)


def run_floor(x: dict):
    return x["p"].sum() + (x["q"].sum() if x["q"] is not None else 0)


def naive_verify(x: dict) -> list[list[int]]:
    """One row, one slot at a time: the certifier's plain float64 reference (same draws)."""
    B, K1, _ = x["p"].shape
    return reference_verify(x["p"], x["q"], x["d"], num_draft=torch.full((B,), K1 - 1), seeds=x["seeds"],
                            positions=x["positions"], method=x["method"])


CLOCK = time.perf_counter  # --clock cpu: time.process_time (this process's CPU time)


def timed(fn) -> float:
    t0 = CLOCK()
    fn()
    return CLOCK() - t0


def bench_config(B: int, K: int, V: int, repeats: int, naive: bool, gen: torch.Generator) -> list[dict]:
    inputs = {m: make_inputs(B, K, V, m, gen) for m in MODES}
    # sanity: the naive loop emits what verify emits (float32 inputs; same draws)
    for m, x in inputs.items():
        got = run_verify(x, True)
        want = [got.tokens[b, : int(got.num_emitted[b])].tolist() for b in range(B)]
        if naive and naive_verify(x) != want:
            print(f"warning: naive loop and verify differ for {m} B={B} K={K} V={V}", file=sys.stderr)
    variants = []
    for m, x in inputs.items():
        variants += [(m, "verify", True, x), (m, "verify", False, x), (m, "floor", None, x)]
        if naive:
            variants.append((m, "naive", None, x))
    times: dict[tuple, list[float]] = {(m, kind, val): [] for m, kind, val, _ in variants}
    for fn_args in variants:  # warm up
        _call(*fn_args)
    for r in range(repeats):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]  # rotate: interleave
        for m, kind, val, x in order:
            times[(m, kind, val)].append(timed(lambda: _call(m, kind, val, x)))
    rows = []
    for m, x in inputs.items():
        acc = float(run_verify(x, False).num_accepted.double().mean())
        med = {key: statistics.median(v) * 1e3 for key, v in times.items() if key[0] == m}
        for validate in (True, False):
            t = med[(m, "verify", validate)]
            rows.append(dict(B=B, K=K, V=V, mode=m, validate=validate, verify_ms=t, floor_ms=med[(m, "floor", None)],
                             naive_ms=med.get((m, "naive", None)), acc=acc))
    return rows


def _call(mode, kind, validate, x):
    if kind == "verify":
        return run_verify(x, validate)
    if kind == "floor":
        return run_floor(x)
    return naive_verify(x)


def llm_gumbel_rows(repeats: int) -> None:
    """Gumbel-max choices on the built-in target's own next-token distributions (T = 1), block
    skipping (:func:`verispec.rng.gumbel_argmax`) against the whole noise vector, per row."""
    from verispec.workloads import load_workload
    from verispec.models import load_causal_lm
    from verispec.rng import _argmax_whole, gumbel_argmax

    lm = load_causal_lm("smollm2-135m")
    rows = []
    with torch.no_grad():
        for prompt in load_workload("code")[:3] + load_workload("chat")[:3]:
            ids = lm.tokenizer(prompt.text, return_tensors="pt").input_ids[:, :64]
            rows.append(torch.softmax(lm.model(ids).logits[0].float(), -1))
    p = torch.cat(rows)  # [n, V]
    n = p.shape[0]
    seeds, pos = torch.arange(n), torch.zeros(n, dtype=torch.int64)
    assert torch.equal(gumbel_argmax(p, seeds, pos), _argmax_whole(p, seeds, pos))
    entropy = float(-(p * torch.log(p.clamp_min(1e-30))).sum(-1).mean())
    lazy = statistics.median(timed(lambda: gumbel_argmax(p, seeds, pos)) for _ in range(repeats)) * 1e3
    whole = statistics.median(timed(lambda: _argmax_whole(p, seeds, pos)) for _ in range(repeats)) * 1e3
    floor = statistics.median(timed(lambda: p.sum()) for _ in range(repeats)) * 1e3
    print(f"\nGumbel-max on {n} SmolLM2-135M next-token rows (V={p.shape[1]}, mean top-1 "
          f"{float(p.amax(-1).mean()):.2f}, entropy {entropy:.2f} nats): block skipping {lazy / n:.3f} ms/row, "
          f"whole vector {whole / n:.3f} ms/row, reading the row {floor / n:.4f} ms/row")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="B in {1, 64}, K = 8, V = 32000, 3 repeats")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--no-naive", action="store_true", help="skip the naive loop")
    ap.add_argument("--llm-rows", action="store_true",
                    help="also time Gumbel-max choices on the built-in target's own distributions (loads it)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: process CPU time, steadier than wall time on a shared machine (use with --threads 1)")
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.threads:
        torch.set_num_threads(args.threads)
    Bs, Ks, Vs = ((1, 64), (8,), (32000,)) if args.quick else ((1, 16, 64), (4, 8), (32000, 128256))
    repeats = args.repeats or (3 if args.quick else 7)
    gen = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, {args.clock} time, median of "
          f"{repeats} interleaved repeats\n")
    print("| B | K | V | mode | validate | verify ms | floor ms | verify / floor | naive ms | naive / verify | acc |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for V in Vs:
        for K in Ks:
            for B in Bs:
                for r in bench_config(B, K, V, repeats, not args.no_naive, gen):
                    naive = "-" if r["naive_ms"] is None else f"{r['naive_ms']:.1f}"
                    speed = "-" if r["naive_ms"] is None else f"{r['naive_ms'] / r['verify_ms']:.1f}x"
                    print(f"| {r['B']} | {r['K']} | {r['V']} | {r['mode']} | {r['validate']} | {r['verify_ms']:.2f} | "
                          f"{r['floor_ms']:.2f} | {r['verify_ms'] / r['floor_ms']:.2f} | {naive} | {speed} | "
                          f"{r['acc']:.2f} |", flush=True)
    if args.llm_rows:
        llm_gumbel_rows(repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
