"""One vLLM configuration on a set of prompts, run with the python of a vLLM environment.

``verispec bench --compare vllm`` runs this file once per configuration (a fresh engine each) and
reads the JSON it writes; ``make test-vllm``'s tests run it too. It imports vLLM and nothing of
verispec (the verispec proposer is loaded by vLLM itself, by dotted path, in its worker)::

    python vllm_bench.py --model DIR --prompts prompts.json --config verispec:12 --out result.json

``prompts.json``: ``[{"id": ..., "category": ..., "token_ids": [...]}, ...]`` (the prompt tokens,
chat template applied: every engine sees the same tokens). ``--config``: ``plain``,
``ngram:K`` (vLLM's n-gram proposer, its default match lengths), ``verispec:K`` (this package's
proposer) or ``suffix:K`` (vLLM's suffix decoding; needs arctic-inference). Each prompt runs alone
(batch 1, as verispec's bench), greedy, ``--max-new-tokens`` tokens (EOS stops earlier), after one
untimed warm-up generation; ``--repeats`` timed runs per prompt, the median wall kept. Acceptance:
vLLM's own counters (``vllm:spec_decode_num_drafts``, ``..._num_draft_tokens``,
``..._num_accepted_tokens``) read around each generation.

``--join-late``: instead of timing, run the integration scenario of ``make test-vllm`` (a short
request that finishes early, a request that joins a running batch late) and write the outputs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback

# Run as a script, this file's folder leads sys.path, and its sibling vllm.py (the proposer) would
# shadow the vllm package: drop it (the proposer is imported as verispec.integrations.vllm).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

PROPOSER = "verispec.integrations.vllm.VerispecLookupProposer"
_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
             "vllm:spec_decode_num_accepted_tokens")


def _cores() -> str:
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:
        cores = list(range(os.cpu_count() or 1))
    return ",".join(str(c) for c in cores)


def _environment(threads: int | None) -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    cores = _cores().split(",")
    if threads:
        cores = cores[:threads]
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(cores))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def speculative_config(config: str) -> dict | None:
    """vLLM's ``speculative_config`` for a config name (ValueError naming it if unknown)."""
    name, _, k = config.partition(":")
    if name == "plain" and not k:
        return None
    if name not in ("ngram", "verispec", "suffix") or not k.isdigit() or not 1 <= int(k) <= 64:
        raise ValueError(f"--config: expected plain, ngram:K, verispec:K or suffix:K (K in 1..64), got {config!r}")
    if name == "ngram":
        return {"method": "ngram", "num_speculative_tokens": int(k)}
    if name == "suffix":
        return {"method": "suffix", "num_speculative_tokens": int(k)}
    return {"method": "custom_class", "model": PROPOSER, "num_speculative_tokens": int(k)}


def _counters(llm) -> dict[str, float]:
    out = {name: 0.0 for name in _COUNTERS}
    for m in llm.get_metrics():
        if m.name in out and hasattr(m, "value"):
            out[m.name] += float(m.value)
    return out


def make_llm(model: str, config: str, max_model_len: int, seed: int = 0, eager: bool = False):
    from vllm import LLM

    kw = dict(model=model, dtype="float32", max_model_len=max_model_len, seed=seed, disable_log_stats=False,
              enforce_eager=eager)
    spec = speculative_config(config)
    if spec is not None:
        kw["speculative_config"] = spec
    return LLM(**kw)


def run_timed(args: argparse.Namespace) -> dict:
    from vllm import SamplingParams, TokensPrompt

    prompts = json.loads(open(args.prompts).read())
    t0 = time.perf_counter()
    llm = make_llm(args.model, args.config, args.max_model_len, eager=args.eager)
    load = time.perf_counter() - t0
    greedy = SamplingParams(temperature=0.0, max_tokens=args.max_new_tokens)
    first = TokensPrompt(prompt_token_ids=prompts[0]["token_ids"])
    llm.generate([first], SamplingParams(temperature=0.0, max_tokens=min(8, args.max_new_tokens)), use_tqdm=False)
    rows = []
    for p in prompts:
        prompt = TokensPrompt(prompt_token_ids=p["token_ids"])
        walls, tokens, delta = [], None, None
        for _ in range(args.repeats):
            before = _counters(llm)
            t = time.perf_counter()
            out = llm.generate([prompt], greedy, use_tqdm=False)
            walls.append(time.perf_counter() - t)
            after = _counters(llm)
            got = list(out[0].outputs[0].token_ids)
            if tokens is not None and got != tokens:
                raise RuntimeError(f"prompt {p['id']}: greedy output changed between repeats")
            tokens, delta = got, {k: after[k] - before[k] for k in _COUNTERS}
        rows.append({"id": p["id"], "category": p["category"], "tokens": tokens, "wall": statistics.median(walls),
                     "drafts": delta["vllm:spec_decode_num_drafts"],
                     "draft_tokens": delta["vllm:spec_decode_num_draft_tokens"],
                     "accepted": delta["vllm:spec_decode_num_accepted_tokens"]})
    return {"load_seconds": load, "prompts": rows}


def run_join_late(args: argparse.Namespace) -> dict:
    """A batch through the engine step API: request "long" runs alone, "short" (a few tokens)
    joins and finishes early, "late" joins after several steps; greedy outputs per request."""
    from vllm import SamplingParams, TokensPrompt

    prompts = json.loads(open(args.prompts).read())
    assert len(prompts) >= 3, "--join-late needs 3 prompts"
    llm = make_llm(args.model, args.config, args.max_model_len, eager=args.eager)
    engine = llm.llm_engine
    before = _counters(llm)
    plan = {"long": (prompts[0], args.max_new_tokens, 0), "short": (prompts[1], 6, 2),
            "late": (prompts[2], args.max_new_tokens, 12)}
    done: dict[str, dict] = {}
    step = 0
    while len(done) < len(plan):
        for rid, (p, n, at) in plan.items():
            if at == step:
                engine.add_request(rid, TokensPrompt(prompt_token_ids=p["token_ids"]),
                                   SamplingParams(temperature=0.0, max_tokens=n))
        for out in engine.step():
            if out.finished:
                done[out.request_id] = {"tokens": list(out.outputs[0].token_ids), "finished_step": step,
                                        "finish_reason": out.outputs[0].finish_reason}
        step += 1
        if step > 10 * args.max_new_tokens + 100:
            raise RuntimeError(f"the engine did not finish the requests in {step} steps: done {sorted(done)}")
    after = _counters(llm)
    alone = {}
    for rid, (p, n, _) in plan.items():  # the same requests, each alone
        out = llm.generate([TokensPrompt(prompt_token_ids=p["token_ids"])], SamplingParams(temperature=0.0, max_tokens=n),
                           use_tqdm=False)
        alone[rid] = list(out[0].outputs[0].token_ids)
    return {"batch": done, "alone": alone, "counters": {k: after[k] - before[k] for k in _COUNTERS}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vllm_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the target's model directory (loaded offline)")
    ap.add_argument("--prompts", required=True, help="JSON list of {id, category, token_ids}")
    ap.add_argument("--config", required=True, help="plain, ngram:K, verispec:K or suffix:K")
    ap.add_argument("--out", required=True, help="where to write the result JSON")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--threads", type=int, help="cores vLLM's CPU worker binds (default all this process may use)")
    ap.add_argument("--eager", action="store_true", help="enforce_eager=True: no graph compilation at start-up")
    ap.add_argument("--join-late", action="store_true", help="run the join/finish-early scenario instead of timing")
    args = ap.parse_args(argv)
    _environment(args.threads)
    try:
        speculative_config(args.config)
    except ValueError as e:
        ap.error(str(e))
    stats_path = None
    if args.config.startswith("verispec:"):
        stats_path = os.environ.setdefault("VERISPEC_VLLM_STATS", args.out + ".proposer.json")
    result: dict = {"config": args.config, "speculative_config": speculative_config(args.config),
                    "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "ok": False, "error": None}
    try:
        import vllm

        result["vllm_version"] = vllm.__version__
        result.update(run_join_late(args) if args.join_late else run_timed(args))
        result["ok"] = True
    except Exception as e:  # reported, not raised: the caller says why a config did not run
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()[-4000:]
    if stats_path and os.path.exists(stats_path):
        try:
            result["proposer"] = json.loads(open(stats_path).read())
        except (OSError, ValueError):
            pass
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
