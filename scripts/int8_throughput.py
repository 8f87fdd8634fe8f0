"""How fast the EAGLE head's int8 draft weights are read: the compiled panel8 kernel against torch's
weight-only int8 kernel (and the float32 panel kernel for scale), each call after the CPU's caches
were flushed, as a draft step runs right after a target pass::

    python scripts/int8_throughput.py                     # the head's shapes (SmolLM2-135M, 20,480 output rows)
    python scripts/int8_throughput.py --shapes 20480x576 --rows 1,2 --repeats 60

Prints, per weight shape ``out x in`` and rows of input, the median milliseconds of each kernel
and the gigabytes a second of weights it streamed. Timings move with the machine's hour: compare
kernels within one run.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from verispec.models.kernels import cache_evictor
from verispec.models.panel import load_panel
from verispec.models.panel8 import load_panel8, quantize_rows

HEAD_SHAPES = "20480x576,1536x576,576x1536,576x576,576x1152,192x576,576x1728"  # out rows, mlp, attention, fc, fuse


def _shapes(text: str) -> list[tuple[int, int]]:
    try:
        shapes = [tuple(int(v) for v in s.lower().split("x")) for s in text.split(",") if s.strip()]
    except ValueError:
        shapes = []
    if not shapes or any(len(s) != 2 or min(s) < 1 for s in shapes):
        raise SystemExit(f"--shapes: expected OUTxIN[,OUTxIN...] with positive sizes, got {text!r}")
    return shapes  # type: ignore[return-value]


def _rows(text: str) -> list[int]:
    try:
        rows = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        rows = []
    if not rows or min(rows) < 1:
        raise SystemExit(f"--rows: expected positive ints such as 1,2, got {text!r}")
    return rows


def _median_ms(call, repeats: int, flush) -> float:
    times = []
    for _ in range(repeats):
        flush()
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return 1e3 * sorted(times)[len(times) // 2]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=HEAD_SHAPES, help="weights OUTxIN, comma-separated (default: the head's)")
    ap.add_argument("--rows", default="1,2", help="rows of input per call, comma-separated (default 1,2)")
    ap.add_argument("--repeats", type=int, default=40, help="timed calls per kernel and shape (default 40)")
    args = ap.parse_args(argv)
    shapes, rows = _shapes(args.shapes), _rows(args.rows)
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
    panel8, panel = load_panel8(), load_panel()
    if panel8 is None:
        raise SystemExit("the panel8 kernel cannot be built here (a C++ compiler and ninja, x86-64)")
    flush = cache_evictor()
    g = torch.Generator().manual_seed(0)
    print(f"{'shape':>12} {'rows':>4} {'panel8 ms':>10} {'GB/s':>6} {'torch int8 ms':>14} {'GB/s':>6} "
          f"{'fp32 panel ms':>14} {'GB/s':>6}")
    for n, k in shapes:
        w = torch.randn(n, k, generator=g)
        q, s = quantize_rows(w)
        packed8 = panel8.pack(q)
        packed = panel.pack(w) if panel is not None else None
        torch_ok = hasattr(torch, "_weight_int8pack_mm") and k % 32 == 0
        for m in rows:
            x = torch.randn(m, k, generator=g)
            cells = [_median_ms(lambda: panel8.linear(x, packed8, s, n), args.repeats, flush)]
            if torch_ok:
                xb, sb = x.to(torch.bfloat16), s.to(torch.bfloat16)
                cells.append(_median_ms(lambda: torch._weight_int8pack_mm(xb, q, sb), args.repeats, flush))
            else:
                cells.append(float("nan"))
            cells.append(_median_ms(lambda: panel.linear(x, packed, n), args.repeats, flush)
                         if packed is not None else float("nan"))
            gbs = [n * k * b / ms / 1e6 for ms, b in zip(cells, (1, 1, 4))]
            print(f"{n:>6}x{k:<5} {m:>4} {cells[0]:>10.3f} {gbs[0]:>6.1f} {cells[1]:>14.3f} {gbs[1]:>6.1f} "
                  f"{cells[2]:>14.3f} {gbs[2]:>6.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
