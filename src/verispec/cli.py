"""The ``verispec`` command line: ``generate``, ``bench``, ``certify``, ``distill`` and ``serve``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from .exits import run_command

__all__ = ["main"]


# ``verispec distill TOOL ...``: the data tools of a general draft head, each its own command line.
DISTILL_TOOLS = {"instructions": "verispec.distill.instructions.__main__", "answers": "verispec.distill.answers",
                 "pack": "verispec.distill.archive", "features": "verispec.distill.refeature",
                 "head": "verispec.distill.head", "average": "verispec.distill.average",
                 "grow-map": "verispec.distill.grow_map"}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``verispec`` console script; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if len(args_list) >= 2 and args_list[0] == "distill" and args_list[1] in DISTILL_TOOLS:
        import importlib

        tool = importlib.import_module(DISTILL_TOOLS[args_list[1]])
        return tool.main(args_list[2:], prog=f"verispec distill {args_list[1]}")
    if len(args_list) >= 2 and args_list[0] == "bench" and args_list[1] == "serve":
        from .serve.loadgen import main as loadgen_main

        return run_command("bench serve", lambda: loadgen_main(args_list[2:], prog="verispec bench serve"))
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if getattr(args, "kernels", None):  # every model this process loads (target, draft model, EAGLE head)
        os.environ["VERISPEC_KERNEL_CHOICE"] = args.kernels
    return run_command(args.command, lambda: args.func(args))


def add_kernels_argument(p: argparse.ArgumentParser) -> None:
    """``--kernels``: how every model the command loads computes on the CPU."""
    p.add_argument("--kernels", choices=["invariant", "measured", "fixed"],
                   help="CPU kernels of every model loaded: 'invariant' (a row's logits are the same bits "
                        "whatever its pass width and batch: greedy text equals target-only even at near-ties), "
                        "'measured' (the fastest timed on this machine) or 'fixed' (default: "
                        "$VERISPEC_KERNEL_CHOICE, else 'invariant')")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verispec", description="Exact, deterministic speculative decoding.")
    sub = p.add_subparsers(dest="command")

    g = sub.add_parser("generate", help="generate text with speculative decoding")
    g.add_argument("prompt", help="the prompt text")
    g.add_argument("--target", default="smollm2-135m", help="built-in name, HF model dir or .gguf file")
    g.add_argument("--draft", default="default",
                   help="draft model name/path, 'eagle' (the built-in EAGLE head; 'eagle:fp32' / 'eagle:fp16' / "
                        "'eagle:int8' for the weights its steps read, 'eagle:measured' for the fastest timed here; "
                        "default a rule on the CPU's flags) or an EAGLE head "
                        "directory, "
                        "'ngram' (prompt lookup), 'hybrid' (prompt lookup, then smollm2-135m-draft), 'NAME+ngram', "
                        "'none' (target only) or 'default' (the fastest measured for a built-in target: eagle+ngram "
                        "for smollm2-135m; prompt lookup for any other target)")
    g.add_argument("--k", default="auto",
                   help="draft length: an int, 'auto' (default: draft while the next token pays, from this "
                        "request's calibrated acceptance and a cost table fixed before it starts; a sampled 'exact' "
                        "request reads one that involves no timing, so a seed always gives the same text) or "
                        "'heuristic'")
    g.add_argument("--costs", metavar="FILE",
                   help="pin the pass-cost table every row of --k auto weighs: JSON {\"verify\": {\"1\": v1, "
                        "\"2\": v2, ...}, \"draft_step\": c} (default: measured for greedy and gumbel, a fixed "
                        "reference model for sampled exact rows)")
    g.add_argument("--method", default="exact", choices=["exact", "gumbel", "block"],
                   help="verification: 'exact' (token by token, default), 'gumbel' (the text does not depend on "
                        "the drafter) or 'block' (block verification of the draft chain: as exact, at least as "
                        "many tokens per pass in expectation with a model drafter's sampled drafts; greedy at "
                        "--temperature 0)")
    _add_sampling_arguments(g)
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    g.add_argument("--stream", action="store_true", help="print text as tokens are accepted")
    g.add_argument("--chat", action="store_true", help="apply the tokenizer's chat template")
    g.add_argument("--baseline", action="store_true", help="also run target-only decoding and report the speedup")
    add_kernels_argument(g)
    g.set_defaults(func=_cmd_generate)

    from .bench import add_bench_arguments
    from .distill import add_distill_arguments

    b = sub.add_parser("bench", help="measure acceptance and speedup against target-only and HF")
    b.add_argument("suite", nargs="?", choices=["generate", "verify"], default="generate",
                   help="'generate' (default): end-to-end decoding; 'verify': the verifier micro-benchmark")
    add_bench_arguments(b)
    add_kernels_argument(b)
    b.set_defaults(func=_cmd_bench)

    d = sub.add_parser("distill", help="train a small draft model to imitate a target",
                       epilog="data tools for a head that knows general text (each has --help): "
                              "verispec distill instructions | answers | pack | features | head | average | grow-map")
    add_distill_arguments(d)
    d.set_defaults(func=_cmd_distill)

    c = sub.add_parser("certify", help="prove the shipped verifier exact by enumeration over toy models")
    c.add_argument("--quick", action="store_true", help="a smaller grid (under a minute on 2 cores)")
    c.add_argument("--mutants", action="store_true",
                   help="then inject each deliberately wrong verifier and show that the grid catches it")
    c.set_defaults(func=_cmd_certify)

    from .serve import add_serve_arguments

    s = sub.add_parser("serve", help="an OpenAI-compatible server (continuous batching, speculative decoding)",
                       epilog="load test: verispec bench serve --help")
    add_serve_arguments(s)
    add_kernels_argument(s)
    s.set_defaults(func=_cmd_serve)
    return p


def _cmd_serve(args: argparse.Namespace) -> int:
    from .serve.server import run_serve

    return run_serve(args)


def _add_sampling_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0 = greedy (default); otherwise >= 1e-4 (smaller ones overflow logits / T)")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)


def _sampling(args: argparse.Namespace):
    from .sampling import SamplingParams

    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                          min_p=args.min_p, seed=args.seed)


def _cmd_generate(args: argparse.Namespace) -> int:
    from .drafters import make_drafter
    from .engine import SpeculativeDecoder
    from .engine.kpolicy import parse_k
    from .models import load_causal_lm

    console = Console(stderr=True)
    sampling = _sampling(args)
    k = parse_k(args.k)
    costs = None
    if args.costs is not None:
        from .engine.costs import load_costs

        costs = load_costs(args.costs, "--costs")
    with console.status(f"loading {args.target} and draft {args.draft} ..."):
        target = load_causal_lm(args.target)
        drafter = make_drafter(args.draft, target=args.target)
    decoder = SpeculativeDecoder(target, drafter, k=k, method=args.method, costs=costs)
    kwargs = dict(max_new_tokens=args.max_new_tokens, sampling=sampling, stop=args.stop, chat=args.chat)
    if args.stream:
        stream = decoder.generate(args.prompt, stream=True, **kwargs)
        for delta in stream:
            sys.stdout.write(delta.text)
            sys.stdout.flush()
        sys.stdout.write("\n")
        result = stream.result
    else:
        result = decoder.generate(args.prompt, **kwargs)
        print(result.texts[0])
    st = result.stats
    drafter_name = getattr(drafter, "name", "none") if drafter is not None else "none"
    alpha = "-" if st.drafted == 0 else f"{st.alpha:.2f}"
    line = (f"{st.emitted} tokens in {st.wall:.2f} s = {st.tokens_per_second:.1f} tok/s | draft {drafter_name}, "
            f"k={args.k}, alpha={alpha}, tau={st.tau:.2f} tokens/target pass")
    if drafter is not None and st.emitted:
        # Estimate: target-only would take one measured one-token target step per token.
        step = decoder.target_step_seconds(decoder.encode([args.prompt], chat=args.chat)[0] + result.token_ids[0])
        line += f" | est. speedup {st.emitted * step / max(st.wall - st.time_prefill, 1e-9):.2f}x"
    if args.baseline:
        base = SpeculativeDecoder(target, None, method=args.method).generate(args.prompt, **kwargs)
        line += (f" | measured speedup {st.tokens_per_second / base.stats.tokens_per_second:.2f}x "
                 f"vs target-only {base.stats.tokens_per_second:.1f} tok/s"
                 f"{'' if sampling.temperature else ', same text: ' + str(base.token_ids == result.token_ids)}")
    print(line, file=sys.stderr)  # one line, never wrapped
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.suite == "verify":
        from .bench.verify_bench import main as verify_main

        return verify_main((["--quick"] if args.quick else []) + (["--threads", str(args.threads)] if args.threads else []))
    from .bench import run_bench

    return run_bench(args)


def _cmd_distill(args: argparse.Namespace) -> int:
    from .distill import run_from_args

    return run_from_args(args)


def _cmd_certify(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from . import certify

    console = Console()
    cases = certify.default_grid(args.quick)
    results = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("enumerating the shipped verifier", total=len(cases))
        for case in cases:
            results.append(certify.run_case(case))
            progress.advance(task)
    failed = _certify_table(console, results, args.quick)
    console.print(f"{len(results) - failed} passed, {failed} failed" if failed else
                  f"all {len(results)} cases passed")
    tree_cases = certify.tree_grid(args.quick)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("enumerating the shipped tree and block verifiers", total=len(tree_cases))
        tree_results = certify.certify_trees(tree_cases, on_case=lambda: progress.advance(task))
    tree_failed = _tree_table(console, tree_results, args.quick)
    console.print(f"{len(tree_results) - tree_failed} tree cases passed, {tree_failed} failed" if tree_failed else
                  f"all {len(tree_results)} tree cases passed")
    failed += tree_failed
    if args.mutants:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("mutants", total=None)
            mutants = certify.run_mutants(cases, on_case=lambda: progress.advance(task))
            tree_mutants = certify.run_tree_mutants(tree_cases, on_case=lambda: progress.advance(task))
        survived = _mutant_table(console, mutants)
        console.print(f"{len(mutants) - survived} of {len(mutants)} mutants caught"
                      + (f"; {survived} SURVIVED" if survived else ""))
        tree_survived = _mutant_table(console, tree_mutants, "tree and block")
        console.print(f"{len(tree_mutants) - tree_survived} of {len(tree_mutants)} tree mutants caught"
                      + (f"; {tree_survived} SURVIVED" if tree_survived else ""))
        failed += survived + tree_survived
    return 1 if failed else 0


def _tree_table(console: Console, results: list, quick: bool) -> int:
    """One row per (mode, edge case) of the tree certificate; returns failures."""
    from .certify import TV_TOLERANCE

    table = Table(title=f"verispec certify{' --quick' if quick else ''}: trees (ragged shapes up to depth 3, "
                        f"branching 3, one batch) and block verification: one pass of the shipped verify_draft / "
                        f"verify(method='block') from each context, then the target, vs the target's law "
                        f"(pass: TV <= {TV_TOLERANCE:g}, no probe or pathwise mismatch)")
    for col in ("mode", "edge case", "dtype", "V", "shapes / K", "cases", "rows", "max TV", "probes", "pathwise",
                "result"):
        table.add_column(col, justify="left" if col in ("mode", "edge case", "dtype", "shapes / K") else "right")
    groups: dict[tuple[str, str, str], list] = {}
    for r in results:
        groups.setdefault((r.case.mode, r.case.edge, r.case.dtype.replace("float", "f")), []).append(r)
    failed = 0
    for (mode, edge, dtype), rs in groups.items():
        ok = all(r.passed for r in rs)
        failed += sum(not r.passed for r in rs)
        checked = [r.pathwise_mismatches for r in rs if r.pathwise_mismatches is not None]
        shapes = (f"K={_span(r.case.k for r in rs)}" if mode == "block" else
                  " ".join(sorted({s for r in rs for s in r.case.shapes})))
        table.add_row(mode, edge, dtype, _span(r.case.vocab for r in rs), shapes, str(len(rs)), str(sum(r.rows for r in rs)),
                      f"{max(r.tv for r in rs):.1e}", f"{sum(r.probe_mismatches for r in rs)} bad",
                      f"{sum(checked)} bad" if checked else "-", "[green]pass[/]" if ok else "[red]FAIL[/]")
    console.print(table)
    return failed


def _certify_table(console: Console, results: list, quick: bool) -> int:
    """One row per (mode, edge case): the worst total variation over its V x K grid; returns failures."""
    from .certify import TV_TOLERANCE

    table = Table(title=f"verispec certify{' --quick' if quick else ''}: law of the shipped verify() vs the "
                        f"target's law (large_v: one pass vs the rule's law; pass: TV <= {TV_TOLERANCE:g}, no probe "
                        f"or pathwise mismatch)")
    for col in ("mode", "edge case", "dtype", "V", "K", "N", "cases", "max TV", "probes", "pathwise", "result"):
        table.add_column(col, justify="right" if col not in ("mode", "edge case", "dtype") else "left")
    groups: dict[tuple[str, str, str], list] = {}
    for r in results:
        dtype = "f32+f64" if r.case.edge == "large_v" else r.case.dtype.replace("float", "f")
        groups.setdefault((r.case.method, r.case.edge, dtype), []).append(r)
    failed = 0
    for (method, edge, dtype), rs in groups.items():
        ok = all(r.passed for r in rs)
        failed += sum(not r.passed for r in rs)
        checked = [r.pathwise_mismatches for r in rs if r.pathwise_mismatches is not None]
        pathwise = f"{sum(checked)} bad" if checked else "-"
        table.add_row(
            method, edge, dtype,
            _span(r.case.vocab for r in rs), _span(r.case.k for r in rs), _span(r.case.n_tokens for r in rs),
            str(len(rs)), f"{max(r.tv for r in rs):.1e}", f"{sum(r.probe_mismatches for r in rs)} bad", pathwise,
            "[green]pass[/]" if ok else "[red]FAIL[/]",
        )
    console.print(table)
    return failed


def _mutant_table(console: Console, mutants: list, kind: str = "") -> int:
    """One row per mutant: what it breaks and the first case that caught it; returns survivors."""
    from .certify import TV_TOLERANCE

    table = Table(title=f"verispec certify --mutants: each wrong {kind + ' ' if kind else ''}verifier must fail "
                        f"the grid")
    for col in ("mutant", "what is wrong", "caught by", "TV", "evidence"):
        table.add_column(col, justify="right" if col == "TV" else "left")
    survived = 0
    for m in mutants:
        c = m.caught_by
        if c is None:
            survived += 1
            table.add_row(m.mutant.name, m.mutant.what, f"[red]SURVIVED[/] {m.cases_run} cases", "-", "-")
            continue
        evidence = [f"TV {c.tv:.0e}" if c.tv > TV_TOLERANCE else "",
                    f"{c.probe_mismatches} probe rows" if c.probe_mismatches else "",
                    f"{c.pathwise_mismatches} pathwise rows" if c.pathwise_mismatches else "",
                    "not constant on a cell" if getattr(c, "error", None) else ""]
        if hasattr(c.case, "mode"):  # a tree case
            where = f"{c.case.mode} {c.case.edge} V={c.case.vocab} " + (
                f"K={c.case.k}" if c.case.mode == "block" else "+".join(c.case.shapes))
        else:
            dtype = "" if c.case.dtype == "float64" or c.case.edge == "large_v" else f" {c.case.dtype}"
            where = f"{c.case.method} {c.case.edge}{dtype} V={c.case.vocab} K={c.case.k}"
        table.add_row(m.mutant.name, m.mutant.what, where,
                      "inf" if getattr(c, "error", None) else f"{c.tv:.1e}", ", ".join(e for e in evidence if e))
    console.print(table)
    return survived


def _span(values) -> str:
    vs = sorted(set(values))
    return str(vs[0]) if len(vs) == 1 else f"{vs[0]}-{vs[-1]}"


if __name__ == "__main__":
    sys.exit(main())
