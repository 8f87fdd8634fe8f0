"""``verispec bench``: argument parsing and the top-level run (``add_bench_arguments``, ``run_bench``)."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

from rich.console import Console

from ..drafters import DEFAULT_DRAFT_MODEL
from ..engine.costs import machine_busy, retime_costs
from ..sampling import SamplingParams
from ..workloads import BUILTIN_WORKLOADS, BenchPrompt, load_prompt_file, load_workload

__all__ = ["add_bench_arguments", "run_bench", "QUICK", "DEFAULTS"]

DEFAULT_TARGET = "smollm2-135m"
DEFAULTS = {"workload": "all", "k": "1,2,4,6,8,auto", "max_new_tokens": 128, "repeats": 3, "limit": None}
# --quick: 3 code prompts x 64 tokens, K in {4, auto}: ~1 minute for the default pair on 2 cores.
QUICK = {"workload": "code", "k": "4,auto", "max_new_tokens": 64, "repeats": 1, "limit": 3}


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``verispec bench`` options to ``parser``."""
    g = parser.add_argument_group("models")
    g.add_argument("--target", default=DEFAULT_TARGET, help=f"target model name or path (default {DEFAULT_TARGET})")
    g.add_argument("--draft", action="append", metavar="DRAFT",
                   help="drafter, repeatable: a draft model name/path, an EAGLE head ('eagle' = the built-in "
                        "one, or a directory; HEAD:fp32 / HEAD:fp16 / HEAD:int8 for the weights its steps read, "
                        "HEAD:measured for the fastest timed here, default a rule on the CPU's flags), 'ngram' (prompt lookup), 'hybrid' (prompt lookup, then "
                        f"{DEFAULT_DRAFT_MODEL}), 'NAME+ngram' (prompt lookup, then NAME), 'default' (generate's default "
                        "for the target) or 'none' (target-only only). Default: ngram, plus each shipped draft "
                        "model behind it (default target only)")
    g = parser.add_argument_group("workload")
    g.add_argument("--workload", help="built-in prompt set(s), comma-separated: "
                   + ", ".join(BUILTIN_WORKLOADS) + " or all (default all; --quick: code)")
    g.add_argument("--prompts", metavar="FILE.jsonl",
                   help="Spec-Bench format question file (or a `distill instructions` file) instead of --workload")
    g.add_argument("--split", default="", metavar="NAME",
                   help="with --prompts: only lines of this split, e.g. heldout of a `distill instructions` file")
    g.add_argument("--skip-bad", action="store_true", help="skip malformed lines of --prompts with a warning")
    g.add_argument("--limit", type=int, metavar="N", help="use the first N prompts of each category")
    g = parser.add_argument_group("decoding")
    g.add_argument("--k", help="draft lengths to sweep: ints, 'heuristic', 'auto', 'tree' (auto with draft trees; default 1,2,4,6,8,auto)")
    g.add_argument("--method", default="exact",
                   help="verification method: exact (default), gumbel or block; comma-separated to sweep them in "
                        "one run (e.g. exact,block: each drafter x K once per method, labelled DRAFTER/METHOD)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("--max-new-tokens", type=int, help="tokens per prompt (default 128; --quick: 64)")
    g.add_argument("--seed", type=int, default=0, help="base seed; prompt i uses seed + i")
    g.add_argument("--costs", metavar="FILE",
                   help="pin the pass-cost table --k auto weighs for every row: JSON {\"verify\": {\"1\": v1, ...}, "
                        "\"draft_step\": c} (default: measured for greedy and gumbel, a fixed reference model for "
                        "sampled exact rows)")
    g.add_argument("--reuse-costs", action="store_true",
                   help="weigh --k auto with the pass-cost tables kept in the costs file (default: time them "
                        "afresh at the start of the run, so the drafters compared are weighed with tables timed "
                        "under the same conditions; the new tables replace the file's)")
    g = parser.add_argument_group("measurement")
    g.add_argument("--repeats", type=int, help="timed generations per prompt and config; each prompt's wall is "
                   "their median (default 3; --quick: 1)")
    g.add_argument("--compare", choices=("hf", "vllm"),
                   help="also run HuggingFace generate (assisted / prompt lookup), or vLLM (plain, its n-gram K=3 "
                        "and 5, its suffix decoding, and vLLM with verispec's proposer) in a vLLM environment")
    g.add_argument("--vllm-python", metavar="PATH",
                   help="with --compare vllm: the python of a vLLM environment with verispec installed "
                        "(default $VERISPEC_VLLM_PYTHON, else .venv-vllm/bin/python, made by make test-vllm)")
    g.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    g.add_argument("--quick", action="store_true",
                   help="small preset: code workload, 3 prompts, 64 new tokens, K in {4, auto} (~1-2 min)")
    g.add_argument("--out", metavar="DIR", help="write report.json, results.csv and PNG plots here")


def _parse_ks(text: str) -> list[int | str]:
    ks: list[int | str] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if part in ("auto", "tree", "heuristic"):
            k: int | str = part
        else:
            try:
                k = int(part)
            except ValueError:
                raise ValueError(f"--k: {part!r} is not an int, 'heuristic', 'auto' or 'tree'") from None
            if not 1 <= k <= 64:
                raise ValueError(f"--k: {k} is outside [1, 64]")
        if k not in ks:
            ks.append(k)
    if not ks:
        raise ValueError("--k is empty")
    return ks


def _parse_methods(text: str) -> list[str]:
    """``--method``: one verification method or a comma-separated sweep of them."""
    from ..verify import VERIFY_METHODS

    methods = list(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    bad = [m for m in methods if m not in VERIFY_METHODS]
    if not methods or bad:
        raise ValueError(f"--method: each must be one of {', '.join(VERIFY_METHODS)}, got {text!r}")
    return methods


def _resolve(args: argparse.Namespace) -> dict:
    preset = QUICK if args.quick else DEFAULTS
    opt = {key: getattr(args, key) if getattr(args, key) is not None else preset[key] for key in preset}
    if args.prompts and args.workload:
        raise ValueError("give either --workload or --prompts, not both")
    if args.split and not args.prompts:
        raise ValueError("--split selects lines of a --prompts file; give --prompts FILE.jsonl")
    if opt["max_new_tokens"] < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {opt['max_new_tokens']}")
    if opt["repeats"] < 1:
        raise ValueError(f"--repeats must be >= 1, got {opt['repeats']}")
    if opt["limit"] is not None and opt["limit"] < 1:
        raise ValueError(f"--limit must be >= 1, got {opt['limit']}")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    opt["ks"] = _parse_ks(opt["k"])
    opt["methods"] = _parse_methods(args.method)
    opt["sampling"] = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                     min_p=args.min_p, seed=args.seed)
    return opt


def _load_prompts(args: argparse.Namespace, opt: dict) -> tuple[list[BenchPrompt], str]:
    if args.prompts:
        prompts = load_prompt_file(args.prompts, skip_bad=args.skip_bad, split=args.split)
        name = Path(args.prompts).name + (f" ({args.split})" if args.split else "")
    else:
        prompts, name = load_workload(opt["workload"]), opt["workload"]
    if opt["limit"] is not None:
        seen: dict[str, int] = {}
        kept = []
        for p in prompts:
            seen[p.category] = seen.get(p.category, 0) + 1
            if seen[p.category] <= opt["limit"]:
                kept.append(p)
        prompts = kept
    return prompts, name


def _load_drafters(specs: list[str] | None, target, target_name: str, console: Console, notes: list[str]):
    """Benchmark entries for drafter specs (parsed by :mod:`verispec.drafters.registry`, as
    ``generate`` parses them); each draft model is loaded once for all the specs that use it."""
    from ..drafters import (BUILTIN_DRAFT_MODELS, EagleDrafter, HybridDrafter, ModelDrafter, PromptLookupDrafter,
                            make_drafter, resolve_spec, split_spec)
    from ..models import ModelLoadError, load_causal_lm
    from .runner import DrafterSpec

    loaded: dict = {}

    def build(spec: str):
        base = split_spec(resolve_spec(spec, target_name))[0]
        with console.status(f"loading draft {base} ..."):
            return make_drafter(spec, target=target_name, cache=loaded)

    if specs is None:  # prompt lookup, and each shipped draft model behind it
        specs = ["ngram"]
        if target_name == DEFAULT_TARGET:
            for name in BUILTIN_DRAFT_MODELS:
                try:
                    build(name)
                    specs.append(f"{name}+ngram")
                except ModelLoadError as e:
                    notes.append(f"default drafters: {name} unavailable: {e}")

    def entry(spec: str, drafter) -> DrafterSpec:
        base, lookup_first = split_spec(resolve_spec(spec, target_name))
        inner = drafter.model if isinstance(drafter, HybridDrafter) else drafter
        label = Path(base).name if os.sep in base or "/" in base else base
        if isinstance(inner, ModelDrafter):
            d = DrafterSpec(label, inner, "model", inner.lm)
            if inner.lm.vocab_map is not None:  # HF needs the full head; a distilled draft ships one
                full = load_causal_lm(base, slice_vocab_map=False)
                d.hf_lm = full if full.vocab_map is None else None
        elif isinstance(inner, EagleDrafter):
            d = DrafterSpec(label, inner, "eagle")
        else:
            d = DrafterSpec(label, inner, "ngram" if isinstance(inner, PromptLookupDrafter) else label)
        if lookup_first:
            d = DrafterSpec(f"hybrid({d.label})", drafter, "hybrid", d.draft_lm)
        return d

    out: list[DrafterSpec] = []
    for spec in specs:
        drafter = build(spec)
        if drafter is None:  # "none": target-only is always measured
            continue
        d = entry(spec, drafter)
        d.drafter.bind(target)  # tokenizer / feature mismatch: a clear error before anything runs
        if any(o.label == d.label for o in out):
            continue
        out.append(d)
    return out


def _machine() -> dict:
    import torch

    from ..models import cpu_matrix_units, cpu_name

    return {"platform": platform.platform(), "cpu": cpu_name(), "cpu_matrix_units": cpu_matrix_units(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "hostname": platform.node()}


def _versions() -> dict:
    import numpy
    import torch
    import transformers

    from .. import __version__

    return {"verispec": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
            "transformers": transformers.__version__, "numpy": numpy.__version__}


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _vllm_setup(args: argparse.Namespace) -> dict | None:
    """With ``--compare vllm``: the vLLM environment's python, its vLLM version and the model
    directory vLLM loads (``ValueError`` naming the argument when they do not hold)."""
    if getattr(args, "compare", None) != "vllm":
        if getattr(args, "vllm_python", None):
            raise ValueError("--vllm-python is for --compare vllm")
        return None
    from .vllm_compare import check_vllm_python, default_vllm_python, model_dir

    if args.temperature != 0 or args.method != "exact":
        raise ValueError("--compare vllm runs greedy decoding; leave --temperature at 0 and --method at exact")
    python = args.vllm_python or default_vllm_python()
    return {"python": python, "version": check_vllm_python(python), "model": model_dir(args.target)}


def _run_vllm(vllm: dict, run, report: dict, opt: dict, args: argparse.Namespace, console: Console,
              out: Path | None) -> dict:
    """The same prompt tokens through vLLM's configs; printed, and returned for report.json."""
    from .vllm_compare import analyse_vllm, print_vllm, run_vllm_compare

    prompts = [{"id": p.id, "category": p.category, "token_ids": run.prompt_ids[p.id]} for p in run.prompts]
    base = run.configs[0].key
    verispec_tokens = {m.prompt_id: m.tokens for m in run.measurements if m.config == base and m.repeat == 0}
    with console.status("vLLM ...") as status:
        raw = run_vllm_compare(vllm["python"], vllm["model"], prompts, opt["max_new_tokens"], opt["repeats"],
                               threads=args.threads, workdir=None if out is None else out / "vllm",
                               on_config=lambda cfg, i, n: status.update(f"vLLM {cfg} ({i + 1}/{n}) ..."))
    result = analyse_vllm(raw, verispec_tokens)
    result.update(python=vllm["python"], version=vllm["version"], model=str(vllm["model"]))
    mine = [r for r in report["configs"] if r["engine"] == "verispec"]
    print_vllm(result, console, mine, vllm["version"])
    return result


def run_bench(args: argparse.Namespace) -> int:
    """Run ``verispec bench`` with parsed ``args``; returns the exit code (130 if interrupted).
    Unless ``--reuse-costs``, the pass-cost tables ``k=auto`` weighs are timed afresh for the run
    (:func:`~verispec.engine.costs.retime_costs`), and the process reads the costs file again after."""
    if getattr(args, "reuse_costs", False):
        return _run_bench(args)
    retime_costs()
    try:
        return _run_bench(args)
    finally:
        retime_costs(False)


def _run_bench(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from ..models import load_causal_lm
    from .analysis import analyse
    from .pass_table import pass_cost_table
    from .reliability import cost_table_check
    from .report import print_report, write_outputs
    from .runner import BenchSettings, run_benchmark

    console = Console()
    if not console.is_terminal:  # logs and pipes: wide enough for the tables
        console = Console(width=200)
    opt = _resolve(args)
    vllm = _vllm_setup(args)  # a bad --vllm-python fails before anything runs
    costs = None
    if getattr(args, "costs", None) is not None:
        from ..engine.costs import load_costs

        costs = load_costs(args.costs, "--costs")
    prompts, workload = _load_prompts(args, opt)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    load_start = _loadavg()
    if load_start and machine_busy(load_start[0]):
        console.print(f"[yellow]note:[/] the machine is busy (load {load_start[0]:.1f} on {os.cpu_count()} cores): "
                      "timings are noisy, and multi-threaded torch suffers most from contention (try --threads 1)")
    with console.status(f"loading target {args.target} ..."):
        target = load_causal_lm(args.target)
    notes: list[str] = []
    drafters = _load_drafters(args.draft, target, args.target, console, notes)
    with console.status("measuring pass costs ..."):
        pass_costs = pass_cost_table(target, drafters, _machine()["cpu"])
    pass_costs["timed_afresh"] = not getattr(args, "reuse_costs", False)
    settings = BenchSettings(max_new_tokens=opt["max_new_tokens"], sampling=opt["sampling"], ks=opt["ks"],
                             repeats=opt["repeats"], seed=args.seed, method=opt["methods"][0],
                             methods=tuple(opt["methods"]),
                             compare_hf=args.compare == "hf", costs=costs)

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("benchmark", total=None)

        def on_start(total: int) -> None:
            progress.update(task, total=total)

        def on_step(desc: str, done: int, total: int) -> None:
            progress.update(task, completed=done, description=desc[:60])

        run = run_benchmark(target, drafters, prompts, settings, on_step=on_step, on_start=on_start)
    run.notes[:0] = notes

    report = analyse(run)
    report["summary"]["workload"] = workload
    s = opt["sampling"]
    report = {
        "summary": report.pop("summary"),
        "partial": report.pop("partial"),
        "command": ["verispec", "bench", *sys.argv[2:]] if len(sys.argv) > 1 and sys.argv[1] == "bench" else sys.argv,
        "versions": _versions(),
        "machine": {**_machine(), "loadavg_start": load_start, "loadavg_end": _loadavg(),
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(run.started)),
                    "seconds": round(run.finished - run.started, 1)},
        "settings": {
            "target": args.target, "drafters": [d.label for d in drafters], "workload": workload,
            "prompts_file": args.prompts, "split": args.split or None, "limit": opt["limit"], "quick": args.quick,
            "max_new_tokens": opt["max_new_tokens"], "ks": opt["ks"], "repeats": opt["repeats"],
            "seed": args.seed, "method": opt["methods"][0] if len(opt["methods"]) == 1 else opt["methods"],
            "compare": args.compare,
            "sampling": {"temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p},
            "sampling_desc": "greedy" if s.greedy else f"T={s.temperature:g}"
            + (f" top-k {s.top_k}" if s.top_k else "") + (f" top-p {s.top_p:g}" if s.top_p < 1 else "")
            + (f" min-p {s.min_p:g}" if s.min_p else ""),
            "timing": "batch 1 per prompt; wall per prompt = median over repeats; tokens/s = total tokens / total "
                      "wall over prompts; configs interleaved per prompt; one warm-up generation per config excluded; "
                      "speedup over the baseline (target-only, or the faster of verispec's and HF's with --compare "
                      "hf); 95% intervals: seeded percentile bootstrap over prompts (per prompt: over repeats)",
        },
        "prompts": [{"id": p.id, "category": p.category, "chat": p.chat, "prompt_tokens": len(run.prompt_ids[p.id])}
                    for p in run.prompts],
        **report,
        "pass_costs": pass_costs,
        "baseline_outputs": {m.prompt_id: target.tokenizer.decode(m.tokens, skip_special_tokens=True)
                             for m in run.measurements if m.config == run.configs[0].key and m.repeat == 0},
    }
    table_note = cost_table_check(pass_costs.get("v1_ms"),
                                  report["reliability"]["one_token_passes"].get("baseline_pass_ms"))
    if table_note is not None:
        report["notes"].append(table_note)
    print_report(report, console)
    if vllm is not None:
        report["vllm"] = _run_vllm(vllm, run, report, opt, args, console, out)
    if out is not None:
        paths = write_outputs(report, out)
        console.print(f"wrote {', '.join(str(p) for p in paths)}" + (" (partial)" if run.partial else ""))
    if run.partial:
        console.print("[yellow]interrupted: the report covers the generations that finished[/]")
        return 130
    return 0
