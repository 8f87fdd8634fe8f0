"""Before / after a change: the main benchmark's greedy generations, token ids and wall times.

Run it with each checkout's sources first on the path, interleaved, then compare::

    PYTHONPATH=/path/to/before/src python scripts/before_after.py run before_1.json
    python scripts/before_after.py run after_1.json            # this checkout (repeat both)
    python scripts/before_after.py compare before_1.json after_1.json before_2.json after_2.json

``run``: two prompts of every built-in workload, greedy, 96 new tokens, target-only and the
default drafter with ``k="auto"``, one generation each (after a warm-up). ``compare``: whether
every token id is equal across the files, and per file the tokens/s and speedup, overall and per
workload. Only the public API is used, so any version of verispec can run it.
"""

from __future__ import annotations

import json
import sys
import time


def run(out: str) -> None:
    import torch

    import verispec
    from verispec import SamplingParams, SpeculativeDecoder, load_causal_lm
    from verispec.drafters import make_drafter
    from verispec.workloads import load_workload

    torch.set_num_threads(2)
    lm = load_causal_lm("smollm2-135m")
    spec = SpeculativeDecoder(lm, make_drafter("default", target="smollm2-135m"), k="auto")
    plain = SpeculativeDecoder(lm, None)
    greedy = SamplingParams(temperature=0, seed=0)
    by: dict[str, list] = {}
    for p in load_workload("all"):
        by.setdefault(p.category, []).append(p)
    prompts = [p for ps in by.values() for p in ps[:2]]
    for dec in (plain, spec):  # warm-up (times the cost table, builds kernels)
        dec.generate(prompts[0].text, 8, greedy, chat=prompts[0].chat)
    rows = []
    for p in prompts:
        rec = {"id": p.id, "category": p.category}
        for name, dec in (("target", plain), ("spec", spec)):
            t0 = time.perf_counter()
            r = dec.generate(p.text, 96, greedy, chat=p.chat)
            rec[name + "_s"] = time.perf_counter() - t0
            rec[name + "_ids"] = r.token_ids[0]
        rows.append(rec)
    with open(out, "w") as f:
        json.dump({"verispec": verispec.__file__, "rows": rows}, f)
    print(out, verispec.__file__)


def compare(paths: list[str]) -> None:
    runs = {p: json.load(open(p))["rows"] for p in paths}
    first = runs[paths[0]]
    same = all([r["spec_ids"] for r in rows] == [r["spec_ids"] for r in first]
               and [r["target_ids"] for r in rows] == [r["target_ids"] for r in first] for rows in runs.values())
    to_target = all(r["spec_ids"] == r["target_ids"] for rows in runs.values() for r in rows)
    print(f"every token id equal across files: {same}; speculative equal to target-only: {to_target}")
    for p, rows in runs.items():
        t, s = sum(r["target_s"] for r in rows), sum(r["spec_s"] for r in rows)
        n = sum(len(r["target_ids"]) for r in rows)
        cats: dict[str, list[float]] = {}
        for r in rows:
            c = cats.setdefault(r["category"], [0.0, 0.0])
            c[0] += r["target_s"]
            c[1] += r["spec_s"]
        per = " ".join(f"{c} {a / b:.2f}" for c, (a, b) in cats.items())
        print(f"{p}: target-only {n / t:.1f} tok/s, speculative {n / s:.1f} tok/s, speedup {t / s:.2f} ({per})")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "run":
        run(sys.argv[2])
    elif len(sys.argv) >= 3 and sys.argv[1] == "compare":
        compare(sys.argv[2:])
    else:
        sys.exit(__doc__)
