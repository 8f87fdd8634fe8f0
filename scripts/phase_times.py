"""Where a speculative pass's time goes, function by function: milliseconds per target pass.

The bench's "Where the time goes" table splits a run into prefill, target, draft, verify and the
rest; this splits the engine's step finer (the drafter's feed and chain, the fusion of the
target's taps, the K policy, the caches' rollback), for one decoder, greedy, one request at a time::

    python scripts/phase_times.py --prompts src/verispec/data/outofstyle/outofstyle.jsonl --category qa --limit 10
    PYTHONPATH=/path/to/before/src python scripts/phase_times.py ...   # another checkout, to alternate with

Each listed function is wrapped with a wall-clock timer (nested ones count inside their callers;
the wrappers add about a microsecond a call). Internal names are wrapped where they exist, so an
older checkout reports what it has. Timings move with the machine's hour: compare checkouts in
alternating runs, never across sessions.
"""

from __future__ import annotations

import argparse
import collections
import functools
import time

import torch

from verispec import SamplingParams, SpeculativeDecoder, load_causal_lm
from verispec.drafters import HybridDrafter, load_drafter
from verispec.drafters import eagle, hybrid, lookup
from verispec.engine import kpolicy, step
from verispec.kv import batch
from verispec.workloads import load_prompt_file

TOTAL: dict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter = collections.Counter()

WRAPPED = [  # (owner, attribute): the step's phases, then what they are made of
    (step, "draft"), (step, "target_pass"), (step, "verify_step"), (step, "commit"), (step, "_rollback"),
    (hybrid.HybridDrafter, "propose"), (hybrid.HybridDrafter, "update"), (lookup.PromptLookupDrafter, "propose"),
    (eagle.EagleDrafter, "propose"), (eagle.EagleDrafter, "_feed_pending"), (eagle, "draft_chain"),
    (eagle.EagleDrafter, "update"), (eagle.EagleDrafter, "_real_features"),
    (kpolicy.KRows, "ask"), (kpolicy.KRows, "cut"), (kpolicy.KRows, "more"), (kpolicy.KRows, "observe"),
    (batch.KVRunner, "commit"), (batch.KVRunner, "truncate"),
]


def _timed(owner, name: str) -> None:
    f = getattr(owner, name, None)
    if f is None:
        return
    key = f"{getattr(owner, '__name__', owner)}.{name}".replace("verispec.", "")

    @functools.wraps(f)
    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            TOTAL[key] += time.perf_counter() - t
            CALLS[key] += 1
    setattr(owner, name, timed)


def _time_runner_forwards() -> None:
    """KVRunner.forward split by model (the target or the draft head) and by width."""
    forward = batch.KVRunner.forward

    def timed(self, tokens, *args, **kwargs):
        t = time.perf_counter()
        try:
            return forward(self, tokens, *args, **kwargs)
        finally:
            width = tokens.shape[1]
            key = f"forward {type(self.model).__name__} width {width if width < 3 else '3+'}"
            TOTAL[key] += time.perf_counter() - t
            CALLS[key] += 1
    batch.KVRunner.forward = timed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", required=True, help="a prompt file, as `verispec bench --prompts` reads")
    ap.add_argument("--category", default=None, help="only prompts of this category")
    ap.add_argument("--limit", type=int, default=10, help="prompts (default 10)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--draft", default="eagle", help="the head behind prompt lookup (default the shipped one)")
    args = ap.parse_args()
    if args.limit < 1 or args.max_new_tokens < 1:
        raise SystemExit("--limit and --max-new-tokens must be >= 1")
    torch.set_num_threads(2)
    try:
        prompts = [p for p in load_prompt_file(args.prompts) if args.category in (None, p.category)][: args.limit]
    except (OSError, ValueError) as e:
        raise SystemExit(f"--prompts {args.prompts}: {e}") from None
    if not prompts:
        raise SystemExit(f"--prompts {args.prompts}: no prompt of category {args.category!r}")
    target = load_causal_lm("smollm2-135m")
    decoder = SpeculativeDecoder(target, HybridDrafter(load_drafter(args.draft)), k="auto")
    greedy = SamplingParams(temperature=0)
    ids = [decoder.encode([p.text], chat=p.chat)[0] for p in prompts]
    decoder.generate([ids[0]], 16, greedy)  # warm-up: the cost table, the kernels
    for owner, name in WRAPPED:
        _timed(owner, name)
    _time_runner_forwards()
    t0, tokens, passes = time.perf_counter(), 0, 0
    for prompt in ids:
        res = decoder.generate([prompt], args.max_new_tokens, greedy)
        tokens += len(res.token_ids[0])
        passes += res.stats.target_forwards
    wall = time.perf_counter() - t0
    print(f"{len(ids)} prompts, {tokens} tokens, {passes} target passes (tau {tokens / passes:.3f}), "
          f"{1e3 * wall / passes:.2f} ms a pass, prefill included")
    for key in sorted(TOTAL, key=lambda k: -TOTAL[k]):
        print(f"{key:48s} {CALLS[key]:6d} calls {1e3 * TOTAL[key] / CALLS[key]:7.3f} ms a call "
              f"{1e3 * TOTAL[key] / passes:7.3f} ms a pass")


if __name__ == "__main__":
    main()
