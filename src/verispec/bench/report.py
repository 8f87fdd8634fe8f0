"""Render a benchmark report: rich tables in the terminal; report.json, results.csv and PNG plots.

Every file is written atomically (a temp file in the same directory, then ``os.replace``), so
an interrupted run never leaves a half-written report.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

__all__ = ["print_report", "write_outputs", "atomic_write_text"]

PLOTS = ("speedup_vs_k.png", "acceptance_per_position.png", "tokens_per_s_by_category.png")


def _f(x, fmt: str = ".2f", none: str = "-") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return none
    return format(x, fmt)


def _ci(ci: list[float] | None, none: str = "-") -> str:
    """A 95% interval as ``low-high`` (two decimals), or ``none``."""
    return none if not ci else f"{ci[0]:.2f}-{ci[1]:.2f}"


def _x(x: float | None, ci: list[float] | None = None) -> str:
    """A speedup as ``1.84x``, with its interval as ``1.84x [1.62-2.05]`` when there is one."""
    if x is None:
        return "-"
    return f"{x:.2f}x" + (f" [{_ci(ci)}]" if ci else "")


# ---------------------------------------------------------------------------------------------- terminal


def print_report(report: dict, console: Console) -> None:
    """Print the report's tables, checks, warnings and (for a reliable run) the headline."""
    s = report["summary"]
    rows = report["configs"]
    unreliable = s.get("reliable") is False
    ref = s.get("baseline") or next(r["config"] for r in rows if r["engine"] == "verispec" and r["drafter"] is None)
    title = (f"verispec bench: {s['target']} on {s['workload']} "
             f"({report['settings']['max_new_tokens']} new tokens, {report['settings']['sampling_desc']}, "
             f"method {report['settings']['method']})")
    if report["partial"]:
        title += " [PARTIAL: interrupted]"
    if unreliable:
        title += " [bold red][UNRELIABLE: the machine was busy, see below][/]"
    t = Table(title=title, caption=f"speedup over {ref} with its 95% bootstrap interval over prompts \\[low-high]; "
                                   "alpha = accepted / tested drafts (Leviathan's per-token acceptance; a draft is "
                                   "tested when all before it were accepted), acc/draft = accepted / drafted")
    for col in ("config", "K", "tok/s", "speedup [95% CI]", "alpha", "acc/draft", "tau", "c", "v(K+1)/v(1)",
                "predicted", "vs HF", "equal"):
        t.add_column(col, justify="left" if col == "config" else "right")
    best = s["best"]
    for r in rows:
        if r["engine"] != "verispec":
            continue
        is_best = best is not None and r["drafter"] == best["drafter"] and r["k"] == best["k"] and not unreliable
        eq = {True: "[green]yes[/]", False: "[bold red]NO[/]", None: "-"}[r["outputs_equal"]]
        k = "-" if r["k"] is None else (str(r["k"]) if isinstance(r["k"], int) else f"{r['k']} ({_f(r.get('mean_k'), '.1f')})")
        sp = "1.00 (baseline)" if r.get("reference") else _x(r["speedup"], r.get("speedup_ci"))
        t.add_row(
            ("[bold]" if is_best else "") + r["config"] + (" *" if is_best else ""),
            k, _f(r["tokens_per_s"]), ("[red]" + sp + "?[/]") if unreliable and not r.get("reference") else sp,
            _f(r.get("alpha")), _f(r.get("draft_acceptance")), _f(r.get("tau")), _f(r.get("c"), ".3f"),
            _f(r.get("verify_ratio")),
            _f(r.get("predicted_speedup"), ".2f") + ("x" if r.get("predicted_speedup") is not None else ""),
            _x(r.get("vs_hf"), r.get("vs_hf_ci")), eq,
        )
    console.print(t)

    hf = [r for r in rows if r["engine"] == "hf"]
    if hf:
        h = Table(title="HuggingFace generate (same model objects, prompts and settings, interleaved)")
        for col in ("config", "HF setting", "tok/s", "tau", f"speedup over {ref} [95% CI]", "equal to target-only"):
            h.add_column(col, justify="left" if col in ("config", "HF setting") else "right")
        for r in hf:
            eq = {True: "[green]yes[/]", False: "[bold red]NO[/]", None: "-"}[r["outputs_equal"]]
            h.add_row(r["config"], r["hf_setting"] or "plain greedy/sampling", _f(r["tokens_per_s"]), _f(r.get("tau")),
                      "1.00 (baseline)" if r.get("reference") else _x(r["speedup"], r.get("speedup_ci")), eq)
        console.print(h)

    b = Table(title="Where the time goes (share of wall clock, all generations) and target pass cost")
    for col in ("config", "prefill", "target", "draft", "verify", "other", "ms/target pass", "draft steps"):
        b.add_column(col, justify="left" if col == "config" else "right")
    for r in rows:
        tb = r.get("time_breakdown")
        if not tb or not tb["wall"]:
            continue
        w = tb["wall"]
        b.add_row(r["config"], *(f"{100 * tb[k] / w:.0f}%" for k in
                                 ("time_prefill", "time_target", "time_draft", "time_verify", "time_other")),
                  _f(r.get("target_step_ms"), ".1f"), str(r.get("draft_forwards") or 0))
    console.print(b)

    cats = report["categories"]
    if len(cats) > 1:
        c = Table(title=f"tokens/s (speedup over {ref} [95% CI], alpha) per category",
                  caption="empty: passes that drafted nothing; copied: accepted drafts that prompt lookup copied "
                          "from the context (the rest a model drew)")
        c.add_column("config")
        for cat in cats:
            c.add_column(cat, justify="right")
        for r in rows:
            cells = []
            for cat in cats:
                v = cats[cat].get(r["config"], {})
                sp, al, em = v.get("speedup"), v.get("alpha"), v.get("empty_draft_share")
                cp = v.get("copied_share")
                extra = ", ".join(x for x in (sp is not None and _x(sp, v.get("speedup_ci")),
                                              al is not None and f"a {al:.2f}",
                                              em is not None and em > 0 and f"{100 * em:.0f}% empty",
                                              cp is not None and cp > 0 and f"{100 * cp:.0f}% copied") if x)
                cells.append(_f(v.get("tokens_per_s")) + (f" ({extra})" if extra else ""))
            c.add_row(r["config"], *cells)
        console.print(c)

    for r in rows:  # the auto policy's calibration: predicted vs observed acceptance per bucket
        cal = r.get("calibration") or []
        if cal:
            parts = [f"{_bucket_name(x['bucket'])} {_f(x['predicted'], '.2f')}/{_f(x['observed'], '.2f')} "
                     f"(n {x['tested']})" for x in cal]
            console.print(f"calibration {r['config']} (bucket of the previous token's confidence: "
                          f"predicted/observed acceptance): " + "; ".join(parts))

    for r in rows:  # draft trees: where the extra guesses were accepted
        tree = r.get("tree_acceptance") or []
        if tree:
            parts = [f"d{x['depth']} r{x['rank']} {x['accepted'] / x['tested']:.2f} (n {x['tested']})"
                     for x in tree if x["tested"] and x["depth"] <= 4 and x["rank"] <= 2]
            console.print(f"tree {r['config']} (acceptance by depth d and sibling rank r, tested nodes): "
                          + "; ".join(parts) + f"; {_f(r.get('mean_k'), '.1f')} nodes per pass")

    _print_pass_costs(report.get("pass_costs"), console)

    th = report["theory"]
    vr = ", ".join(f"{w}:{r:.2f}" for w, r in th["verify_ratio"].items())
    console.print(f"verify cost v(w)/v(1) measured: {vr or '-'}  (v(1) = {_f(th['v1_seconds'] and 1e3 * th['v1_seconds'], '.1f')} ms)")
    drops = th.get("verify_non_monotone") or []
    if drops:
        worst = sorted(drops, key=lambda d: d["ms"] / d["narrower_ms"])[:3]
        console.print("[yellow]note:[/] measured verify costs are not monotone in width ("
                      + ", ".join(f"v({d['width']}) {d['ms']:.1f} ms < v({d['narrower_width']}) {d['narrower_ms']:.1f} ms"
                                  for d in worst)
                      + (f", {len(drops) - len(worst)} more" if len(drops) > len(worst) else "")
                      + "): noise or load; predictions use a monotone fit (a wider pass never costs less "
                        "than a narrower one): " + ", ".join(f"{w}:{r:.2f}" for w, r in th["verify_ratio_used"].items()))
    for name, d in th["drafters"].items():
        if "optimal_k" in d:
            console.print(f"theory {name}: alpha {d['alpha']:.2f}, c {d['c']:.3f} -> optimal K {d['optimal_k']} "
                          f"(predicted {d['optimal_predicted_speedup']:.2f}x with measured verify cost; "
                          f"Thm 3.8 with flat verify: K {d['optimal_k_thm38']}, {d['optimal_speedup_thm38']:.2f}x)")

    rel = report.get("reliability") or {}
    chk = rel.get("one_token_passes") or {}
    if chk.get("agree") is not None:
        console.print(("[green]" if chk["agree"] else "[bold red]")
                      + f"one-token passes (mean): target-only {chk['baseline_pass_ms']:.1f} ms, inside the speculative "
                        f"configs {chk['speculative_pass_ms']:.1f} ms ({100 * chk['gap']:.0f}% apart, limit "
                        f"{100 * chk['tolerance']:.0f}%)" + (", after re-measuring target-only" if rel.get("remeasured") else "")
                      + "[/]")
    elif chk:
        console.print("one-token passes: not checked (no one-token pass inside the speculative configs)")

    eq = s["greedy_outputs_equal"]
    if eq is True:
        n = sum(r["generations"] for r in rows if r["engine"] == "verispec" and r["drafter"] is not None)
        console.print(f"[green]greedy check: every speculative output equals target-only decoding token for token "
                      f"({n} generations)[/]")
    elif eq is False:
        console.print("[bold red]GREEDY CHECK FAILED: speculative output differs from target-only decoding:[/]")
        for r in rows:
            for m in r["mismatches"]:
                if r["engine"] == "verispec":
                    console.print(f"[bold red]  MISMATCH {r['config']}: prompt {m['prompt_id']} (repeat {m['repeat']}), "
                                  f"first different token at {m['first_difference']}[/]")
    else:
        console.print("output equality check: not applicable (sampling with method exact) or nothing measured")
    if report.get("hf_outputs_equal") is not None:
        if report["hf_outputs_equal"]:
            console.print("[green]HF check: HF's greedy outputs equal verispec target-only outputs[/]")
        else:
            console.print("[bold red]HF check: some HF greedy outputs differ from verispec target-only outputs:[/]")
            for r in rows:
                if r["engine"] == "hf":
                    for m in r["mismatches"]:
                        console.print(f"[red]  {r['config']}: prompt {m['prompt_id']}, first different token at "
                                      f"{m['first_difference']}[/]")
    for note in report.get("notes", []):
        console.print(f"[yellow]note:[/] {note}")
    for w in report.get("warnings", []):
        console.print(f"[bold red]warning:[/] {w}" if w.startswith("UNRELIABLE") else f"[yellow]warning:[/] {w}")
    if unreliable:
        console.print("[bold red]no headline: this run's baseline is not comparable with its speculative configs "
                      "(report.json: summary.reliable = false)[/]")
    elif best is not None:
        console.print(f"best: [bold]{best['drafter']} k={best['k']}[/]: {_f(best['tokens_per_s'])} tok/s, "
                      f"{_x(best['speedup'], best.get('speedup_ci'))} over {ref} ({_f(s['baseline_tokens_per_s'])} "
                      f"tok/s), predicted {_f(best['predicted_speedup'])}x"
                      + (f", {s['vs_hf']:.2f}x HF (same drafter)" if s["vs_hf"] is not None else "")
                      + (f"; fastest verispec over fastest HF ({' / '.join(s['vs_hf_best_configs'])}): "
                         f"{_x(s['vs_hf_best'], s.get('vs_hf_best_ci'))}" if s.get("vs_hf_best") is not None else ""))


# ---------------------------------------------------------------------------------------------- files


def atomic_write_bytes(path: Path, write: Callable[[io.BufferedWriter], None]) -> None:
    """Write ``path`` through ``write(file)`` into a temp file beside it, then ``os.replace``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, lambda f: f.write(text.encode("utf-8")))


def write_outputs(report: dict, out: Path) -> list[Path]:
    """Write report.json, results.csv and the PNG plots into ``out``; returns the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    p = out / "report.json"
    atomic_write_text(p, json.dumps(_clean(report), indent=2, default=_json_default, allow_nan=False) + "\n")
    written.append(p)
    p = out / "results.csv"
    atomic_write_text(p, _csv(report))
    written.append(p)
    written.extend(_plots(report, out))
    return written


def _clean(x):
    """NaN / inf -> None, recursively (report.json is strict JSON)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _json_default(x):
    if isinstance(x, float):
        return None
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)


CSV_COLUMNS = ("prompt_id", "category", "config", "engine", "drafter", "k", "repeats", "n_tokens", "wall_s",
               "tokens_per_s", "baseline", "speedup", "speedup_low", "speedup_high", "config_speedup",
               "config_speedup_low", "config_speedup_high", "run_reliable", "alpha", "draft_acceptance", "tau",
               "drafted", "accepted", "copied_accepted", "rejected", "target_forwards", "draft_forwards",
               "time_prefill", "time_target",
               "time_draft", "time_verify", "time_other", "finish_reason", "equal_to_baseline")


def _csv(report: dict) -> str:
    """One row per (prompt, config). ``speedup``: this prompt's, over the run's baseline (``baseline``),
    with a 95% interval over repeats (``speedup_low``/``_high``, empty with one repeat);
    ``config_speedup*``: the config's over all prompts with its interval over prompts;
    ``equal_to_baseline``: tokens equal verispec target-only's."""
    cfgs = {r["config"]: r for r in report["configs"]}
    ref = report["summary"].get("baseline")
    reliable = report["summary"].get("reliable")
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for pp in report["per_prompt"]:
        cfg = cfgs[pp["config"]]
        bad = {m["prompt_id"] for m in cfg["mismatches"]}
        equal = None if cfg["outputs_equal"] is None else pp["prompt_id"] not in bad
        ci, cci = pp.get("speedup_ci") or (None, None), cfg.get("speedup_ci") or (None, None)
        row = {**pp, "engine": cfg["engine"], "drafter": cfg["drafter"] or "", "k": "" if cfg["k"] is None else cfg["k"],
               "wall_s": pp["wall"], "baseline": ref, "speedup_low": ci[0], "speedup_high": ci[1],
               "config_speedup": cfg["speedup"], "config_speedup_low": cci[0], "config_speedup_high": cci[1],
               "run_reliable": reliable, "equal_to_baseline": equal}
        w.writerow(["" if row.get(c) is None else _cell(row.get(c)) for c in CSV_COLUMNS])
    return buf.getvalue()


def _cell(x) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _plots(report: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    rows = [r for r in report["configs"]]
    spec = [r for r in rows if r["engine"] == "verispec" and r["drafter"] is not None]
    drafters = list(dict.fromkeys(r["drafter"] for r in spec))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    written = []

    def save(fig, name: str) -> None:
        path = out / name
        atomic_write_bytes(path, lambda f: fig.savefig(f, format="png", dpi=110, bbox_inches="tight"))
        plt.close(fig)
        written.append(path)

    # 1. speedup vs K: measured (solid), predicted (dashed); adaptive policies as markers at their mean K.
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, d in enumerate(drafters):
        col = colors[i % len(colors)]
        fixed = sorted((r for r in spec if r["drafter"] == d and isinstance(r["k"], int) and r["speedup"] is not None),
                       key=lambda r: r["k"])
        if fixed:
            ax.plot([r["k"] for r in fixed], [r["speedup"] for r in fixed], "o-", color=col, label=f"{d} measured")
            bars = [r for r in fixed if r.get("speedup_ci")]
            if bars:  # 95% bootstrap intervals over prompts
                ax.errorbar([r["k"] for r in bars], [r["speedup"] for r in bars], fmt="none", ecolor=col, alpha=0.5,
                            capsize=3, yerr=[[max(0.0, r["speedup"] - r["speedup_ci"][0]) for r in bars],
                                             [max(0.0, r["speedup_ci"][1] - r["speedup"]) for r in bars]])
            pred = [r for r in fixed if r["predicted_speedup"] is not None]
            if pred:
                ax.plot([r["k"] for r in pred], [r["predicted_speedup"] for r in pred], "s--", color=col, alpha=0.6,
                        label=f"{d} predicted")
        for j, r in enumerate(r for r in spec if r["drafter"] == d and not isinstance(r["k"], int)):
            if r["speedup"] is not None and r.get("mean_k") is not None:
                ax.plot([r["mean_k"]], [r["speedup"]], "*^"[j % 2], ms=12, color=col, label=f"{d} k={r['k']} (at mean K)")
    ax.axhline(1.0, color="grey", lw=1, ls=":")
    ax.set_xlabel("draft length K")
    ax.set_ylabel(f"speedup over {report['summary'].get('baseline') or 'target-only'} (bars: 95% CI)")
    ax.set_title(f"{report['summary']['target']}: speedup vs K"
                 + (" [UNRELIABLE RUN]" if report["summary"].get("reliable") is False else ""))
    if spec:
        ax.legend(fontsize=7)
    save(fig, PLOTS[0])

    # 2. per-position acceptance.
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, r in enumerate(spec):
        acc = r.get("per_position_acceptance") or []
        xs = [j + 1 for j, a in enumerate(acc) if a is not None]
        if xs:
            ax.plot(xs, [a for a in acc if a is not None], "o-", ms=3, label=r["config"],
                    color=colors[drafters.index(r["drafter"]) % len(colors)], alpha=0.4 + 0.6 * (i % 3) / 2)
    ax.set_xlabel("draft position")
    ax.set_ylabel("P(accepted | earlier drafts accepted)")
    ax.set_ylim(0, 1.02)
    ax.set_title("per-position acceptance")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, ncol=2)
    save(fig, PLOTS[1])

    # 3. tokens/s per category (grouped bars).
    cats = list(report["categories"])
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows) * max(1, len(cats)) / 3), 4.5))
    width = 0.8 / max(1, len(rows))
    for j, r in enumerate(rows):
        ys = [report["categories"][c].get(r["config"], {}).get("tokens_per_s") or 0.0 for c in cats]
        ax.bar([i + j * width for i in range(len(cats))], ys, width, label=r["config"])
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cats))], cats)
    ax.set_ylabel("tokens/s")
    ax.set_title("tokens/s per category")
    ax.legend(fontsize=6, ncol=2)
    save(fig, PLOTS[2])
    return written


def _bucket_name(b: int) -> str:
    """A calibration bucket: 0 is a draft's first token, b >= 1 a confidence in ((b-1)/10, b/10]."""
    return "first" if b == 0 else f"{(b - 1) / 10:.1f}-{b / 10:.1f}"


def _print_pass_costs(pc: dict | None, console: Console) -> None:
    """The pass-cost table measured before the run (what k=auto weighs)."""
    if not pc:
        return
    ratios = " ".join(f"{n}:{r:.2f}" for n, r in pc["ratio"].items())
    when = {True: "timed before the run",
            False: "the costs file's, or timed now where it had none (--reuse-costs)"}.get(pc.get("timed_afresh"),
                                                                                          "measured before the run")
    console.print(f"pass costs on {pc['cpu']} ({when}; what k=auto weighs): v(1) = "
                  f"{pc['v1_ms']:.1f} ms; v(n)/v(1): {ratios}")
    for label, d in pc["drafters"].items():
        console.print(f"  draft step {label}: {d['draft_step_ms']:.2f} ms, c = {d['c']:.3f}")
    for name, k in (pc.get("kernels") or {}).items():
        console.print(f"  kernels {name}: {_kernels_line(k)}")


def _kernels_line(k: dict) -> str:
    """One line of :func:`verispec.models.kernel_report`: the choice and what it picked."""
    if not k or k.get("choice") is None:
        return "plain (no CPU kernel)"
    parts = [k["choice"]]
    if k["choice"] == "invariant":  # one kernel for every linear and row count, and the attend kernel
        return "invariant (panel linears and head for every row count, attend attention)" + (
            f"; draft weights {k['eagle']['weights']}" if k.get("eagle") else "")
    plain = []
    for shape, v in (k.get("linears") or {}).items():
        used = [f"{name} for {_ranges(rows)} rows" for name in ("packed", "rowdot")
                if (rows := v.get(f"{name}_rows"))]
        if used:
            parts.append(f"{shape} " + ", ".join(used))
        else:
            plain.append(shape)
    if plain:
        parts.append("plain " + ", ".join(plain))
    head = k.get("head")
    if head:
        parts.append("head " + ", ".join(f"{name} {_ranges(rows)}" for name, rows in head["rows"].items() if rows)
                     + f", beyond: {head['beyond']}")
    if k.get("eagle"):
        parts.append(f"draft weights {k['eagle']['weights']}")
    return "; ".join(parts)


def _ranges(xs: list[int]) -> str:
    """``[1, 2, 3, 5]`` as ``"1-3,5"``."""
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return ",".join(out)
