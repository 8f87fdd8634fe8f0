"""Target pass costs on the CPU, for the fast paths ``load_causal_lm`` turns on.

* the output head with its oneDNN-packed weight (``models.fast_small_linears``) against its
  unpacked forward, for 1 and 5 rows;
* target passes of 1, 5 and 9 tokens after a 250-token context, on one model and cache, with
  the attention switched between reps: K/V heads shared by SDPA (``models.gqa_attention``)
  or copied per query group (HF's ``sdpa``);
* the EAGLE head's output rows, packed against ``W @ x.T``, for one row.

Medians of interleaved repeats, milliseconds, 2 threads. Needs the built-in models.

    python -m verispec.bench.pass_costs
"""

from __future__ import annotations

import statistics
import time

import torch

from verispec.drafters import load_drafter
from verispec.models import load_causal_lm, pack_weight, packed_linear
from verispec.runner import KVRunner


def ms(f, n: int = 15) -> float:
    """Median milliseconds of ``n`` calls of ``f`` after one warm-up call."""
    f()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return 1000 * statistics.median(ts)


def main() -> None:
    torch.set_num_threads(2)
    fast = load_causal_lm("smollm2-135m")  # packed linears + packed head + GQA attention (defaults)
    head = fast.model.lm_head
    for w in (1, 5):
        x = torch.randn(1, w, 576)
        print(f"output head, {w} row(s): packed {ms(lambda: head(x)):.1f} ms, "
              f"unpacked {ms(lambda: head.unpacked_forward(x)):.1f} ms")
    # Same model, same cache, attention switched between reps: K/V shared (gqa) or copied (HF sdpa).
    with torch.inference_mode():
        r = KVRunner(fast.model, 1)
        r.forward(torch.randint(0, 40000, (1, 250)), logits_to_keep=1)
        L = r.lengths.clone()
        for w in (1, 5, 9):
            x = torch.randint(0, 40000, (1, w))
            res = {"gqa": [], "hf repeat_kv": []}
            for _ in range(15):
                for name, impl in (("gqa", "verispec_sdpa"), ("hf repeat_kv", "sdpa")):
                    fast.model.set_attn_implementation(impl)
                    t = time.perf_counter()
                    r.forward(x)
                    res[name].append(time.perf_counter() - t)
                    r.truncate(L)
            print(f"target pass, {w} token(s) after 250: " +
                  ", ".join(f"{k} {1000 * statistics.median(v):.1f} ms" for k, v in res.items()))
        fast.model.set_attn_implementation("verispec_sdpa")
    eagle = load_drafter("eagle")
    eagle.bind(fast)
    W, f = eagle.model.out_rows, torch.randn(1, 576)
    P = pack_weight(W)
    print(f"EAGLE output rows ({W.shape[0]}), 1 row: packed "
          f"{ms(lambda: packed_linear(f, P)):.2f} ms, "
          f"unpacked {ms(lambda: torch.mm(W, f.t()).t()):.2f} ms")


if __name__ == "__main__":
    main()
