"""``verispec bench --compare vllm``: the same prompts through vLLM, in a vLLM environment.

vLLM pins its own torch and transformers, so it lives in another environment (``make test-vllm``
makes ``.venv-vllm``); this module never imports it. It runs ``integrations/vllm_bench.py`` with
that environment's python, once per configuration (a fresh engine each, one after another):

* ``plain``: vLLM without speculation (the reference of every vLLM speedup);
* ``ngram:3``, ``ngram:5``: vLLM's own n-gram proposer (its default match lengths, 5 to 5);
* ``verispec:12``: vLLM with verispec's proposer (:mod:`verispec.integrations.vllm`), K up to 12;
* ``suffix:12``: vLLM's suffix decoding, where arctic-inference is installed (else the report
  says why it did not run).

Same prompt tokens (verispec's chat template applied once, here), greedy, the same
``--max-new-tokens`` and ``--repeats``; each prompt alone (batch 1), as verispec's own configs.
Acceptance is vLLM's own counters; every greedy output is compared with vLLM plain's.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["VLLM_CONFIGS", "SCRIPT", "check_vllm_python", "default_vllm_python", "model_dir", "run_vllm_compare",
           "analyse_vllm", "print_vllm"]

VLLM_CONFIGS = ("plain", "ngram:3", "ngram:5", "verispec:12", "suffix:12")
SCRIPT = Path(__file__).resolve().parent.parent / "integrations" / "vllm_bench.py"
PYTHON_ENV = "VERISPEC_VLLM_PYTHON"
_CONFIG_TIMEOUT = 3600  # seconds per configuration (start-up, warm-up and every prompt)


def default_vllm_python() -> str | None:
    """``$VERISPEC_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` under the current directory
    (``make test-vllm`` makes it), else None."""
    env = os.environ.get(PYTHON_ENV)
    if env:
        return env
    local = Path(".venv-vllm") / "bin" / "python"
    return str(local) if local.exists() else None


def check_vllm_python(python: str | None, name: str = "--vllm-python") -> str:
    """vLLM's version in the environment of ``python``; ``ValueError`` naming ``name`` when it is
    missing, not a python, or has no vllm or no verispec (its proposer) installed."""
    if not python:
        raise ValueError(f"{name}: no vLLM environment given and no .venv-vllm here (make test-vllm makes one; "
                         f"or set ${PYTHON_ENV})")
    if not Path(python).is_file():
        raise ValueError(f"{name}: {python!r} is not a file")
    code = "import vllm, verispec.integrations.vllm; print(vllm.__version__)"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ValueError(f"{name}: {python!r} did not run: {e}") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ValueError(f"{name}: {python!r} is not a python with vllm and verispec installed ({last})")
    lines = out.stdout.strip().splitlines()
    if not lines:
        raise ValueError(f"{name}: {python!r} is not a python with vllm and verispec installed (it printed nothing)")
    return lines[-1]


def model_dir(target: str) -> Path:
    """The directory vLLM loads for verispec's ``--target`` (a built-in name or a HF directory)."""
    from ..models import BUILTIN_MODELS
    from ..models.builtin import _builtin_dir

    if target in BUILTIN_MODELS:
        return _builtin_dir(target)
    path = Path(target).expanduser()
    if not (path.is_dir() and (path / "config.json").is_file()):
        raise ValueError(f"--compare vllm: --target {target!r} must be a built-in model or a HF model directory "
                         "(vLLM loads a directory)")
    return path.resolve()


def run_vllm_compare(python: str, model: Path, prompts: list[dict], max_new_tokens: int, repeats: int,
                     threads: int | None = None, workdir: Path | None = None, configs=VLLM_CONFIGS,
                     on_config: Callable[[str, int, int], None] | None = None) -> dict[str, dict]:
    """Each of ``configs`` on ``prompts`` (``[{id, category, token_ids}]``) in vLLM: the raw
    result of each run (``ok``, ``error``, per prompt tokens, wall and vLLM's counters). The
    logs of each run are kept in ``workdir`` (default: a temporary directory)."""
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="verispec-vllm-")
        workdir = Path(tmp.name)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "prompts.json").write_text(json.dumps(prompts))
    results: dict[str, dict] = {}
    try:
        for i, cfg in enumerate(configs):
            if on_config:
                on_config(cfg, i, len(configs))
            tag = cfg.replace(":", "-")
            out = workdir / f"vllm-{tag}.json"
            cmd = [python, str(SCRIPT), "--model", str(model), "--prompts", str(workdir / "prompts.json"),
                   "--config", cfg, "--out", str(out), "--max-new-tokens", str(max_new_tokens),
                   "--repeats", str(repeats), "--eager"]
            if threads:
                cmd += ["--threads", str(threads)]
            with open(workdir / f"vllm-{tag}.log", "w") as log:
                try:
                    subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=_CONFIG_TIMEOUT)
                except subprocess.TimeoutExpired:
                    results[cfg] = {"config": cfg, "ok": False, "error": f"timed out after {_CONFIG_TIMEOUT} s"}
                    continue
            try:
                results[cfg] = json.loads(out.read_text())
            except (OSError, ValueError):
                tail = (workdir / f"vllm-{tag}.log").read_text()[-600:]
                results[cfg] = {"config": cfg, "ok": False, "error": f"no result; log tail: {tail}"}
    finally:
        if tmp is not None:
            tmp.cleanup()
    return results


def analyse_vllm(results: dict[str, dict], verispec_tokens: dict[str, list[int]] | None = None) -> dict:
    """Tokens/s, speedup over vLLM plain (overall and per category), acceptance (vLLM's
    counters: accepted / drafted tokens) and greedy equality with vLLM plain, per config."""
    plain = results.get("plain") or {}
    base = {p["id"]: p for p in plain.get("prompts", [])} if plain.get("ok") else {}

    def tps(rows: list[dict]) -> float | None:
        wall = sum(r["wall"] for r in rows)
        return sum(len(r["tokens"]) for r in rows) / wall if wall > 0 else None

    out: dict = {"configs": [], "categories": [], "plain_equals_verispec_target_only": None}
    cats: list[str] = []
    for r in plain.get("prompts", []):
        if r["category"] not in cats:
            cats.append(r["category"])
    out["categories"] = cats
    if base and verispec_tokens:
        out["plain_equals_verispec_target_only"] = all(verispec_tokens.get(i) == p["tokens"] for i, p in base.items())
    for cfg, res in results.items():
        row: dict = {"config": cfg, "ok": bool(res.get("ok")), "error": res.get("error"),
                     "speculative_config": res.get("speculative_config"), "vllm_version": res.get("vllm_version"),
                     "load_seconds": res.get("load_seconds")}
        prompts = res.get("prompts") or []
        if row["ok"] and prompts:
            t = tps(prompts)
            drafted = sum(p["draft_tokens"] for p in prompts)
            row.update(tokens_per_s=t, tokens=sum(len(p["tokens"]) for p in prompts),
                       acceptance=sum(p["accepted"] for p in prompts) / drafted if drafted else None,
                       draft_tokens=drafted, accepted=sum(p["accepted"] for p in prompts),
                       drafts=sum(p["drafts"] for p in prompts))
            if base:
                ref = tps([base[p["id"]] for p in prompts if p["id"] in base])
                row["speedup"] = t / ref if t and ref else None
                mism = [p["id"] for p in prompts if p["id"] in base and p["tokens"] != base[p["id"]]["tokens"]]
                row["outputs_equal"], row["mismatches"] = not mism, mism
            per = {}
            for c in cats:
                mine = [p for p in prompts if p["category"] == c]
                ref_rows = [base[p["id"]] for p in mine if p["id"] in base]
                ct, rt = (tps(mine) if mine else None), (tps(ref_rows) if ref_rows else None)
                d = sum(p["draft_tokens"] for p in mine)
                per[c] = {"tokens_per_s": ct, "speedup": ct / rt if ct and rt else None,
                          "acceptance": sum(p["accepted"] for p in mine) / d if d else None}
            row["per_category"] = per
        if "proposer" in res:
            row["proposer"] = res["proposer"]
        out["configs"].append(row)
    return out


def print_vllm(report: dict, console, verispec_rows: list[dict] | None = None, vllm_version: str | None = None) -> None:
    """The vLLM table (beside verispec's own configs, each against its own engine's plain run)
    and the per-category speedups."""
    from rich.table import Table

    def f(x, fmt=".2f"):
        return "-" if x is None else format(x, fmt)

    t = Table(title=f"vLLM {vllm_version or ''} (same prompt tokens, greedy, batch 1, a fresh engine per config, "
                    "enforce_eager) beside verispec")
    for col in ("engine", "config", "tok/s", "speedup", "over", "acceptance", "equal to plain"):
        t.add_column(col, justify="left" if col in ("engine", "config", "over") else "right")
    for r in verispec_rows or []:
        t.add_row("verispec", r["config"], f(r.get("tokens_per_s")),
                  "1.00" if r.get("drafter") is None else f(r.get("speedup")) + "x", "verispec target-only",
                  f(r.get("draft_acceptance")), {True: "yes", False: "NO", None: "-"}[r.get("outputs_equal")])
    for r in report["configs"]:
        if not r["ok"]:
            t.add_row("vllm", r["config"], "-", "-", "-", "-", f"did not run: {(r['error'] or '')[:90]}")
            continue
        t.add_row("vllm", r["config"], f(r.get("tokens_per_s")),
                  "1.00" if r["config"] == "plain" else f(r.get("speedup")) + "x", "vLLM plain",
                  f(r.get("acceptance")), {True: "yes", False: "NO", None: "-"}[r.get("outputs_equal")])
    console.print(t)
    cats = report["categories"]
    if len(cats) > 1:
        c = Table(title="vLLM: speedup over vLLM plain per category (acceptance)")
        c.add_column("config")
        for cat in cats:
            c.add_column(cat, justify="right")
        for r in report["configs"]:
            if r["ok"] and r["config"] != "plain":
                c.add_row(r["config"], *(f"{f(v['speedup'])}x ({f(v['acceptance'])})"
                                         for v in (r["per_category"][cat] for cat in cats)))
        console.print(c)
    eq = report.get("plain_equals_verispec_target_only")
    if eq is not None:
        console.print(("vLLM plain's greedy outputs equal verispec target-only's" if eq else
                       "note: vLLM plain's greedy outputs differ from verispec target-only's on some prompt "
                       "(two engines' float32 kernels, a near-tie); each engine's configs are checked against "
                       "its own plain run"))
    for r in report["configs"]:
        if r.get("proposer"):
            p = r["proposer"]
            console.print(f"verispec proposer in vLLM: {p.get('steps')} steps, {p.get('drafted')} tokens drafted, "
                          f"{p.get('empty')} empty drafts, {p.get('explored')} exploring steps; vLLM step seconds by "
                          "tokens fed: " + ", ".join(f"{k}: {1e3 * v:.1f} ms" for k, v in p.get("step_seconds", {}).items()))
