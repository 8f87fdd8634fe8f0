"""Turn a :class:`BenchRun` into the numbers of the report (a JSON-ready dict).

Aggregation (Spec-Bench style): a config's tokens/s = total tokens / total wall over prompts,
each prompt's wall the median over repeats; speedup = that over the baseline's tokens/s on
the same prompts in the same run. The baseline is verispec's target-only decoding, or, with
``--compare hf``, the faster of it and HF's plain ``generate`` (a warning when they differ by
more than 10%). Every speedup carries a 95% bootstrap interval over prompts
(:mod:`verispec.bench.intervals`; per prompt: over repeats). alpha (accepted / tested,
Leviathan's per-token acceptance), the draft acceptance (accepted / drafted), tau and
per-position acceptance pool the counts of every generation of a config. Verify costs ``v(w)``
are medians of all target passes of width ``w`` in the run (all verispec configs pooled, same
model and machine), ``v(1)`` from them too; predictions read them through a monotone fit
(:func:`verispec.bench.theory.monotone_costs`) and the report says where they are not monotone.
The run is unreliable when the baseline's one-token passes and those inside the speculative
configs disagree by more than 15% (:mod:`verispec.bench.reliability`).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence

from ..engine import GenerationStats, add_counts
from .intervals import bootstrap_ratio, bootstrap_repeats_ratio
from .reliability import BASELINE_TOLERANCE, one_token_pass_check, relative_gap
from .runner import BenchConfig, BenchRun, Measurement
from .theory import (cost_ratio, median_widths, monotone_costs, non_monotone, optimal_k,
                     predicted_speedup_over_lengths, safe_ratio)

__all__ = ["analyse"]

_TIME_KEYS = ("time_prefill", "time_target", "time_draft", "time_verify", "time_other")


def analyse(run: BenchRun) -> dict:
    """All numbers of a run: per config, per prompt, per category, theory, equality and reliability checks."""
    by_cfg: dict[str, list[Measurement]] = defaultdict(list)
    for m in run.measurements:
        by_cfg[m.config].append(m)
    per_prompt = {c.key: _per_prompt(by_cfg.get(c.key, [])) for c in run.configs}
    order = [p.id for p in run.prompts]  # the bootstrap's prompt order: fixed, so intervals are reproducible
    base_cfg = run.configs[0]
    base_tokens: dict[str, list[int]] = {}
    for m in sorted(by_cfg.get(base_cfg.key, []), key=lambda m: m.repeat):
        base_tokens.setdefault(m.prompt_id, m.tokens)
    warnings: list[str] = []

    # The baseline: verispec target-only, or the faster of it and HF's plain generate.
    ref_key = base_cfg.key
    baselines = None
    hf_base_cfg = next((c for c in run.configs if c.engine == "hf" and c.drafter is None), None)
    if hf_base_cfg is not None:
        vpp, hpp = per_prompt[base_cfg.key], per_prompt[hf_base_cfg.key]
        common = set(vpp) & set(hpp)
        v_tps, h_tps = _tps(vpp, common), _tps(hpp, common)
        gap = relative_gap(v_tps, h_tps)
        if math.isfinite(h_tps) and (not math.isfinite(v_tps) or h_tps > v_tps):
            ref_key = hf_base_cfg.key
        baselines = {"verispec": base_cfg.key, "hf": hf_base_cfg.key, "verispec_tokens_per_s": _nan_to_none(v_tps),
                     "hf_tokens_per_s": _nan_to_none(h_tps), "gap": _nan_to_none(gap),
                     "tolerance": BASELINE_TOLERANCE, "differ": bool(math.isfinite(gap) and gap > BASELINE_TOLERANCE),
                     "reference": ref_key}
        if baselines["differ"]:
            warnings.append(f"the two target-only baselines differ by {100 * gap:.0f}% (> {100 * BASELINE_TOLERANCE:.0f}%"
                            f"): verispec {v_tps:.2f} tok/s, HF generate {h_tps:.2f} tok/s; speedups are over the "
                            f"faster ({ref_key})")
    ref = per_prompt[ref_key]

    def speedup(pp: dict, ids: Iterable[str] | None = None) -> tuple[float, list[float] | None]:
        """(pp's speedup over the reference on the prompts both measured, its 95% interval)."""
        return _ratio_ci(pp, ref, order, ids)

    # Verify cost table, pooled over every verispec target pass of the run.
    widths: dict[int, list[float]] = defaultdict(list)
    for m in run.measurements:
        if m.stats is not None:
            for w, ts in m.stats.verify_width_seconds.items():
                widths[int(w)].extend(ts)
    v_sec = median_widths(widths)
    v1 = v_sec.get(1, math.nan)
    v_ratio = {w: s / v1 for w, s in v_sec.items()} if math.isfinite(v1) and v1 > 0 else {}
    # Predictions read a monotone fit (weighted by the passes measured at each width; >= 1).
    v_used = monotone_costs(v_ratio, {w: len(widths[w]) for w in v_ratio}) if v_ratio else {}

    methods = list(run.settings.methods) or [run.settings.method]
    greedy_check = run.settings.sampling.greedy or all(m == "gumbel" for m in methods)
    hf_check = run.settings.sampling.greedy
    configs = []
    for cfg in run.configs:
        ms = by_cfg.get(cfg.key, [])
        row = _config_row(cfg, ms, per_prompt[cfg.key], v1, v_used)
        row["reference"] = cfg.key == ref_key
        sp, ci = speedup(per_prompt[cfg.key])
        row["speedup"], row["speedup_ci"] = (None, None) if row["reference"] else (_nan_to_none(sp), ci)
        if cfg.is_baseline and greedy_check:
            row["mismatches"] = _mismatches(ms, base_tokens)  # repeats of the baseline itself
            row["outputs_equal"] = None if not ms else not row["mismatches"]
        elif not cfg.is_baseline and ((cfg.engine == "verispec" and greedy_check) or (cfg.engine == "hf" and hf_check)):
            row["mismatches"] = _mismatches(ms, base_tokens)
            row["outputs_equal"] = None if not ms or not base_tokens else not row["mismatches"]
        else:
            row["mismatches"], row["outputs_equal"] = [], None
        configs.append(row)
    rows = {r["config"]: r for r in configs}

    # verispec vs HF: same drafter and K, or (adaptive K) HF's best setting of that drafter.
    for r in configs:
        r["vs_hf"], r["vs_hf_ci"], r["hf_config"] = None, None, None
        if r["engine"] != "verispec" or r["drafter"] is None:
            continue
        same = [h for h in configs if h["engine"] == "hf" and h["drafter"] == r["drafter"] and h["tokens_per_s"]]
        exact = [h for h in same if h["k"] == r["k"]]
        cands = exact or ([] if isinstance(r["k"], int) else same)
        if cands:
            h = max(cands, key=lambda h: h["tokens_per_s"])
            ratio, ci = _ratio_ci(per_prompt[r["config"]], per_prompt[h["config"]], order)
            r["vs_hf"], r["vs_hf_ci"], r["hf_config"] = _nan_to_none(ratio), ci, h["config"]
    hf_base = rows[hf_base_cfg.key] if hf_base_cfg is not None else None

    # The fastest verispec config (any, target-only included) over the fastest HF config.
    vs_hf_best = vs_hf_best_ci = vs_hf_best_configs = None
    fast_v = [r for r in configs if r["engine"] == "verispec" and r["tokens_per_s"]]
    fast_h = [r for r in configs if r["engine"] == "hf" and r["tokens_per_s"]]
    if fast_v and fast_h:
        bv = max(fast_v, key=lambda r: r["tokens_per_s"])
        bh = max(fast_h, key=lambda r: r["tokens_per_s"])
        ratio, vs_hf_best_ci = _ratio_ci(per_prompt[bv["config"]], per_prompt[bh["config"]], order)
        vs_hf_best, vs_hf_best_configs = _nan_to_none(ratio), [bv["config"], bh["config"]]

    # Predicted optimal K per drafter from its pooled alpha and c.
    drafters: dict[str, dict] = {}
    for r in configs:
        if r["engine"] == "verispec" and r["drafter"] is not None and r["drafted"]:
            d = drafters.setdefault(r["drafter"], {"drafted": 0, "accepted": 0, "rejected": 0, "time_draft": 0.0,
                                                   "draft_steps": 0})
            d["drafted"] += r["drafted"]
            d["accepted"] += r["accepted"]
            d["rejected"] += r["rejected"]
            d["time_draft"] += r["time_draft"]
            d["draft_steps"] += r["draft_forwards"] or r["drafted"]
    drops = [{"width": d["width"], "ms": 1e3 * d["cost"], "narrower_width": d["narrower_width"],
              "narrower_ms": 1e3 * d["narrower_cost"]} for d in non_monotone(v_sec)]
    theory = {"v1_seconds": _nan_to_none(v1), "verify_seconds": v_sec, "verify_ratio": v_ratio,
              "verify_ratio_used": v_used,
              "verify_monotone": not drops, "verify_non_monotone": drops, "drafters": {}}
    for name, d in drafters.items():
        alpha = d["accepted"] / (d["accepted"] + d["rejected"])
        c = cost_ratio(d["time_draft"], d["draft_steps"], d["draft_steps"], v1)
        entry = {"alpha": alpha, "c": _nan_to_none(c)}
        if math.isfinite(c):
            k, s = optimal_k(alpha, c, v_used or None)
            k_thm, s_thm = optimal_k(alpha, c, None)
            entry.update(optimal_k=k, optimal_predicted_speedup=s, optimal_k_thm38=k_thm, optimal_speedup_thm38=s_thm)
        theory["drafters"][name] = entry

    # Per category: tokens/s, speedup and alpha (pooled over the category's prompts) of every config.
    categories: dict[str, dict] = {}
    cats = sorted({p.category for p in run.prompts}, key=[p.category for p in run.prompts].index)
    for cat in cats:
        ids = {p.id for p in run.prompts if p.category == cat}
        out = {}
        for cfg in run.configs:
            pp = per_prompt[cfg.key]
            tps = _tps(pp, ids & set(pp))
            acc = sum(pp[i].get("accepted") or 0 for i in ids & set(pp))
            tested = acc + sum(pp[i].get("rejected") or 0 for i in ids & set(pp))
            sp, ci = speedup(pp, ids)
            copied = sum(pp[i].get("copied_accepted") or 0 for i in ids & set(pp))
            empty = sum(pp[i].get("empty_drafts") or 0 for i in ids & set(pp))
            steps = sum(pp[i].get("row_steps") or 0 for i in ids & set(pp))
            out[cfg.key] = {"tokens_per_s": _nan_to_none(tps),
                            "speedup": None if cfg.key == ref_key else _nan_to_none(sp),
                            "speedup_ci": None if cfg.key == ref_key else ci,
                            "alpha": _nan_to_none(safe_ratio(acc, tested)) if cfg.drafter is not None else None,
                            "empty_draft_share": _nan_to_none(safe_ratio(empty, steps)) if cfg.drafter is not None
                            else None,
                            # of the accepted drafts, those prompt lookup copied (a hybrid's lookup vs its model)
                            "copied_share": _nan_to_none(safe_ratio(copied, acc)) if cfg.drafter is not None
                            else None}
        categories[cat] = out

    # Reliability: the baseline's one-token passes against those inside the speculative configs.
    spec_keys = [c.key for c in run.configs if c.engine == "verispec" and c.drafter is not None]
    final = one_token_pass_check(run.measurements, base_cfg.key, spec_keys, run.settings.pass_tolerance)
    reliability = {"reliable": final["agree"], "one_token_passes": final, "remeasured": bool(run.superseded),
                   "checks": list(run.baseline_checks) or [final]}
    if final["agree"] is False:
        warnings.insert(0, f"UNRELIABLE RUN: target-only's one-token passes took {final['baseline_pass_ms']:.1f} ms "
                           f"on average ({final['baseline_passes']} passes), those inside the speculative configs "
                           f"{final['speculative_pass_ms']:.1f} ms ({final['speculative_passes']} passes): "
                           f"{100 * final['gap']:.0f}% apart (> {100 * final['tolerance']:.0f}%)"
                           + (" after re-measuring the baseline" if run.superseded else "")
                           + "; something else competed for the CPU. This run's speedups are not a measurement "
                             "of the engine: rerun on a quiet machine (or with --threads 1)")

    spec = [r for r in configs if r["engine"] == "verispec" and r["drafter"] is not None and r["tokens_per_s"]]
    best = max(spec, key=lambda r: r["speedup"] or -1.0) if spec else None
    checked = [r["outputs_equal"] for r in configs
               if r["engine"] == "verispec" and r["drafter"] is not None and r["outputs_equal"] is not None]
    hf_checked = [r["outputs_equal"] for r in configs if r["engine"] == "hf" and r["outputs_equal"] is not None]
    summary = {
        "workload": None,  # filled by the caller (it knows the command line)
        "target": run.target,
        "baseline": ref_key,
        "baseline_tokens_per_s": rows[ref_key]["tokens_per_s"],
        "reliable": final["agree"],
        "greedy_outputs_equal": all(checked) if checked else None,
        "best": None if best is None else {
            "drafter": best["drafter"], "k": best["k"], "tokens_per_s": best["tokens_per_s"],
            "speedup": best["speedup"], "speedup_ci": best["speedup_ci"], "alpha": best["alpha"],
            "tau": best["tau"], "predicted_speedup": best["predicted_speedup"],
        },
        "vs_hf": None if best is None else best["vs_hf"],
        "vs_hf_best": vs_hf_best,
        "vs_hf_best_ci": vs_hf_best_ci,
        "vs_hf_best_configs": vs_hf_best_configs,
    }
    per_prompt_rows = []
    for key, pp in per_prompt.items():
        for pid, vals in pp.items():
            r = ref.get(pid)
            sp = ci = None
            if key != ref_key and r is not None:
                sp = _nan_to_none(safe_ratio(safe_ratio(vals["n_tokens"], vals["wall"]),
                                             safe_ratio(r["n_tokens"], r["wall"])))
                iv = bootstrap_repeats_ratio(vals["n_tokens"], vals["walls"], r["n_tokens"], r["walls"])
                ci = None if iv is None else list(iv)
            per_prompt_rows.append({"prompt_id": pid, "config": key, **vals, "speedup": sp, "speedup_ci": ci})
    return {
        "summary": summary,
        "partial": run.partial,
        "configs": configs,
        "baselines": baselines,
        "hf_baseline_vs_verispec_baseline": None if hf_base is None else _nan_to_none(
            safe_ratio(rows[base_cfg.key]["tokens_per_s"], hf_base["tokens_per_s"])),
        "hf_outputs_equal": all(hf_checked) if hf_checked else None,
        "reliability": reliability,
        "theory": theory,
        "categories": categories,
        "per_prompt": per_prompt_rows,
        "warnings": warnings,
        "notes": list(run.notes),
    }


def _ratio_ci(pp: dict[str, dict], ref: dict[str, dict], order: Sequence[str],
              ids: Iterable[str] | None = None) -> tuple[float, list[float] | None]:
    """``pp``'s tokens/s over ``ref``'s on the prompts both measured (restricted to ``ids``), and its
    95% bootstrap interval over those prompts (``None`` with fewer than two)."""
    keep = set(pp) & set(ref) if ids is None else set(pp) & set(ref) & set(ids)
    common = [i for i in order if i in keep]
    ratio = safe_ratio(_tps(pp, common), _tps(ref, common))
    iv = bootstrap_ratio([pp[i]["n_tokens"] for i in common], [pp[i]["wall"] for i in common],
                         [ref[i]["n_tokens"] for i in common], [ref[i]["wall"] for i in common])
    return ratio, None if iv is None else list(iv)


# ----------------------------------------------------------------------------------------------


def _per_prompt(ms: list[Measurement]) -> dict[str, dict]:
    """prompt id -> {category, n_tokens, wall (median over repeats), tokens_per_s, repeats, stats sums}."""
    groups: dict[str, list[Measurement]] = defaultdict(list)
    for m in ms:
        groups[m.prompt_id].append(m)
    out = {}
    for pid, g in groups.items():
        wall = statistics.median(m.wall for m in g)
        n = g[0].n_tokens
        st = _sum_stats(m.stats for m in g if m.stats is not None)
        out[pid] = {
            "category": g[0].category, "n_tokens": n, "wall": wall, "walls": [m.wall for m in g],
            "tokens_per_s": n / wall if wall > 0 else None, "repeats": len(g), "finish_reason": g[0].finish_reason,
            "alpha": _nan_to_none(safe_ratio(st["accepted"], st["accepted"] + st["rejected"])) if st else None,
            "draft_acceptance": _nan_to_none(safe_ratio(st["accepted"], st["drafted"])) if st else None,
            "tau": _nan_to_none(safe_ratio(st["emitted"], st["row_steps"])) if st else None,
            **({k: st[k] for k in ("drafted", "accepted", "rejected", "target_forwards", "draft_forwards",
                                   "copied_accepted", *_TIME_KEYS)}
               if st else {}),
            "empty_drafts": (st["draft_lengths"][0] if st["draft_lengths"] else 0) if st else None,
            "row_steps": st["row_steps"] if st else None,
        }
    return out


def _sum_stats(stats: Iterable[GenerationStats]) -> dict | None:
    stats = list(stats)
    if not stats:
        return None
    keys = ("drafted", "accepted", "rejected", "emitted", "target_forwards", "row_steps", "draft_forwards", "wall",
            "time_prefill", "time_target", "time_draft", "time_verify", "copied_drafted", "copied_accepted")
    out = {k: sum(getattr(s, k) for s in stats) for k in keys}
    out["time_other"] = sum(s.time_other for s in stats)
    for key in ("slot_drafted", "slot_tested", "slot_accepted", "draft_lengths"):  # ragged lists: sum by index
        out[key] = []
        for s in stats:
            add_counts(out[key], getattr(s, key))
    out["calibration"] = [[], [], []]  # per confidence bucket: tested, accepted, predicted sum
    for s in stats:
        for total, part in zip(out["calibration"], s.calibration):
            total.extend([0.0] * (len(part) - len(total)))
            for i, x in enumerate(part):
                total[i] += x
    out["tree"] = {}  # draft trees: (depth, sibling rank) -> [accepted, tested]
    for s in stats:
        for key, n in s.tree_tested.items():
            cell = out["tree"].setdefault(key, [0, 0])
            cell[0] += s.tree_accepted.get(key, 0)
            cell[1] += n
    return out


def _tps(pp: dict[str, dict], ids: Iterable[str]) -> float:
    ids = list(ids)
    n = sum(pp[i]["n_tokens"] for i in ids)
    w = sum(pp[i]["wall"] for i in ids)
    return n / w if w > 0 else math.nan


def _config_row(cfg: BenchConfig, ms: list[Measurement], pp: dict, v1: float, v_ratio: dict[int, float]) -> dict:
    tps = _tps(pp, pp)
    row: dict = {
        "config": cfg.key, "engine": cfg.engine, "drafter": cfg.drafter, "k": cfg.k,
        "hf_setting": cfg.hf.describe() if cfg.hf is not None and cfg.hf.kind != "none" else None,
        "prompts": len(pp), "generations": len(ms), "tokens": sum(v["n_tokens"] for v in pp.values()),
        "tokens_per_s": _nan_to_none(tps),
        "speedup": None, "speedup_ci": None,  # filled by analyse (it knows the baseline)
    }
    st = _sum_stats(m.stats for m in ms if m.stats is not None)
    if st is None:  # HF: tokens, time and target passes (tau: tokens per pass, its prefill included)
        passes = [m.hf_passes for m in ms]
        tau = safe_ratio(sum(m.n_tokens for m in ms), sum(passes)) if ms and None not in passes else math.nan
        row.update(alpha=None, draft_acceptance=None, tau=_nan_to_none(tau), drafted=None, accepted=None,
                   rejected=None, draft_forwards=None, predicted_speedup=None,
                   target_forwards=sum(passes) if None not in passes else None)
        return row
    alpha = safe_ratio(st["accepted"], st["accepted"] + st["rejected"])  # per tested token (Leviathan)
    tau = safe_ratio(st["emitted"], st["row_steps"])
    mean_k = safe_ratio(st["drafted"], st["row_steps"])  # drafted tokens per target pass
    c = cost_ratio(st["time_draft"], st["draft_forwards"], st["drafted"], v1)
    row.update(
        alpha=_nan_to_none(alpha), draft_acceptance=_nan_to_none(safe_ratio(st["accepted"], st["drafted"])),
        tau=_nan_to_none(tau), mean_k=_nan_to_none(mean_k),
        drafted=st["drafted"], accepted=st["accepted"], rejected=st["rejected"], emitted=st["emitted"],
        target_forwards=st["target_forwards"], draft_forwards=st["draft_forwards"],
        copied_drafted=st["copied_drafted"], copied_accepted=st["copied_accepted"],
        copied_share=_nan_to_none(safe_ratio(st["copied_accepted"], st["accepted"])),
        per_position_acceptance=[_nan_to_none(safe_ratio(a, t))
                                 for a, t in zip(st["slot_accepted"], st["slot_tested"])],
        slot_drafted=st["slot_drafted"], slot_tested=st["slot_tested"], slot_accepted=st["slot_accepted"],
        time_breakdown={k: st[k] for k in ("wall", *_TIME_KEYS)},
        time_draft=st["time_draft"],
        target_step_ms=_nan_to_none(1e3 * safe_ratio(st["time_target"], st["target_forwards"])),
        c=_nan_to_none(c),
    )
    # Theory: Leviathan with the measured alpha, pass by pass over the measured draft lengths
    # (a fixed K drafts fewer where prompt lookup finds no match), the measured draft time and
    # v(n+1)/v(1); vr = the mean verify cost per pass.
    pred = vr = e = None
    if cfg.drafter is not None and math.isfinite(alpha) and sum(st["draft_lengths"]) and v_ratio:
        pred, e, vr = predicted_speedup_over_lengths(alpha, st["draft_lengths"], st["time_draft"] / v1, v_ratio)
    tested, accepted, predicted = (st["calibration"] + [[], [], []])[:3]
    row["empty_draft_share"] = _nan_to_none(safe_ratio(st["draft_lengths"][0], sum(st["draft_lengths"]))) \
        if st["draft_lengths"] else None
    row["calibration"] = [{"bucket": b, "tested": int(t), "observed": _nan_to_none(safe_ratio(a, t)),
                           "predicted": _nan_to_none(safe_ratio(q, t))}
                          for b, (t, a, q) in enumerate(zip(tested, accepted, predicted)) if t]
    if st["tree"]:  # acceptance per (depth, sibling rank) of draft trees
        row["tree_acceptance"] = [{"depth": d, "rank": r, "tested": t, "accepted": a}
                                  for (d, r), (a, t) in sorted(st["tree"].items())]
    row.update(draft_lengths=st["draft_lengths"], verify_ratio=_nan_to_none(vr) if vr is not None else None,
               expected_tokens=_nan_to_none(e) if e is not None else None,
               predicted_speedup=_nan_to_none(pred) if pred is not None else None)
    return row


def _mismatches(ms: list[Measurement], base_tokens: dict[str, list[int]]) -> list[dict]:
    """Generations whose tokens differ from target-only decoding of the same prompt."""
    out = []
    for m in ms:
        ref = base_tokens.get(m.prompt_id)
        if ref is None or ref == m.tokens:
            continue
        first = next((i for i, (a, b) in enumerate(zip(ref, m.tokens)) if a != b), min(len(ref), len(m.tokens)))
        out.append({"prompt_id": m.prompt_id, "repeat": m.repeat, "first_difference": first,
                    "baseline_tokens": len(ref), "tokens": len(m.tokens)})
    return out


def _nan_to_none(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x
