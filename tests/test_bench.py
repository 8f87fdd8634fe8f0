"""Tests for verispec.bench: theory, metrics, workloads, an end-to-end tiny run, Ctrl-C."""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

import pytest
import torch

from verispec.bench import add_bench_arguments, run_bench
from verispec.bench import runner as bench_runner
from verispec.bench.analysis import analyse
from verispec.bench.runner import BenchSettings, DrafterSpec, run_benchmark
from verispec.bench.theory import (
    cost_ratio,
    expected_tokens,
    median_widths,
    optimal_k,
    predicted_speedup,
    predicted_speedup_over_lengths,
    verify_cost,
)
from verispec.workloads import (
    BUILTIN_WORKLOADS,
    WorkloadError,
    load_prompt_file,
    load_workload,
    parse_prompts,
)
from verispec.drafters import ModelDrafter, PromptLookupDrafter
from verispec.engine import GenerationStats
from verispec.sampling import SamplingParams
from verispec.testing import save_tiny_llama, tiny_llama

# ---------------------------------------------------------------------------------------------- theory


def test_expected_tokens_hand_computed() -> None:
    assert expected_tokens(0.5, 1) == pytest.approx(1.5)  # 1 + 0.5
    assert expected_tokens(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_tokens(0.0, 5) == 1.0  # every draft rejected: the one corrected token
    assert expected_tokens(1.0, 4) == 5.0  # every draft accepted: K + the bonus token
    assert expected_tokens(0.999999, 4) == pytest.approx(5.0, abs=1e-4)  # continuous at alpha -> 1
    with pytest.raises(ValueError):
        expected_tokens(1.5, 2)


def test_leviathan_theorem_3_8_values() -> None:
    # (1 - 0.75^8) / (0.25 (7 * 0.02 + 1)) = 3.1575...
    assert predicted_speedup(0.75, 7, 0.02) == pytest.approx((1 - 0.75**8) / (0.25 * 1.14), rel=1e-12)
    assert predicted_speedup(0.75, 7, 0.02) == pytest.approx(3.16, abs=0.01)
    # Leviathan Table 2-style cases: alpha .8, c .05 -> about 3.0x-3.4x near K = 7..10.
    assert predicted_speedup(0.8, 7, 0.05) == pytest.approx((1 - 0.8**8) / (0.2 * 1.35), rel=1e-12)
    # A verify pass costing 1.5x one token divides the speedup accordingly.
    assert predicted_speedup(0.6, 4, 0.0, verify=1.5) == pytest.approx(expected_tokens(0.6, 4) / 1.5)
    # A free, always-accepted draft: K + 1 tokens per pass.
    assert predicted_speedup(1.0, 4, 0.0) == 5.0


def test_prediction_over_measured_draft_lengths() -> None:
    ratios = {1: 1.0, 3: 1.2, 5: 1.4}
    # Every pass at K = 4 with the draft time of 4 steps of c each: Leviathan's formula.
    s, e, v = predicted_speedup_over_lengths(0.7, [0, 0, 0, 0, 10], 10 * 4 * 0.05, ratios)
    assert s == pytest.approx(predicted_speedup(0.7, 4, 0.05, verify=1.4))
    assert (e, v) == (pytest.approx(expected_tokens(0.7, 4)), pytest.approx(1.4))
    # Prompt lookup that finds a match in half the passes: those without one emit 1 token at cost 1.
    s, e, v = predicted_speedup_over_lengths(0.7, [5, 0, 0, 0, 5], 0.0, ratios)
    assert s == pytest.approx((5 + 5 * expected_tokens(0.7, 4)) / (5 * 1.0 + 5 * 1.4))
    assert e == pytest.approx((1 + expected_tokens(0.7, 4)) / 2) and v == pytest.approx(1.2)
    assert all(math.isnan(x) for x in predicted_speedup_over_lengths(0.7, [], 0.0, ratios))


def test_optimal_k() -> None:
    # Leviathan Fig. 3 intuition: higher alpha and lower c -> longer drafts.
    k_lo, _ = optimal_k(0.5, 0.1)
    k_hi, s_hi = optimal_k(0.9, 0.01)
    assert k_lo < k_hi
    assert s_hi == pytest.approx(max(predicted_speedup(0.9, k, 0.01) for k in range(1, 13)))
    # Brute force against the definition with a measured verify curve.
    ratios = {1: 1.0, 2: 1.55, 5: 1.5, 9: 1.8, 17: 2.0}
    k, s = optimal_k(0.7, 0.05, ratios, max_k=16)
    brute = max(range(1, 17), key=lambda k: predicted_speedup(0.7, k, 0.05, verify_cost(ratios, k + 1)))
    assert k == brute and s == pytest.approx(predicted_speedup(0.7, k, 0.05, verify_cost(ratios, k + 1)))


def test_verify_cost_interpolation() -> None:
    r = {1: 1.0, 3: 2.0, 5: 2.5}
    assert verify_cost(r, 3) == 2.0
    assert verify_cost(r, 2) == pytest.approx(1.5)
    assert verify_cost(r, 4.5) == pytest.approx(2.375)
    assert verify_cost(r, 7) == pytest.approx(3.0)  # slope 0.25 per width continued
    assert verify_cost({2: 1.4}, 9) == 1.4
    assert verify_cost({}, 4) == 1.0


def test_metrics_from_stats_hand_computed() -> None:
    assert median_widths({1: [0.1, 0.3, 0.2], 5: [0.4], 3: []}) == {1: 0.2, 5: 0.4}
    # 10 draft forwards in 0.05 s = 5 ms per step; v(1) = 100 ms -> c = 0.05.
    assert cost_ratio(0.05, 10, 40, 0.1) == pytest.approx(0.05)
    # Point-mass drafter: no forwards, the lookup cost per drafted token.
    assert cost_ratio(0.002, 0, 20, 0.1) == pytest.approx(0.001)
    assert math.isnan(cost_ratio(0.0, 0, 0, 0.1))

    # Four passes of K = 2 accepting 2, 1, 0, 0 drafts: 3 accepted of 6 tested (3 rejections), of 8 drafted.
    st = GenerationStats(drafted=8, accepted=3, rejected=3, emitted=7, target_forwards=4, row_steps=4,
                         slot_drafted=[4, 4], slot_tested=[4, 2], slot_accepted=[2, 1])
    assert st.alpha == 0.5 and st.draft_acceptance == 3 / 8 and st.tau == 7 / 4
    assert st.per_position_acceptance == [0.5, 0.5]


def test_analysis_aggregates_hand_made_run() -> None:
    """Tokens/s = total tokens / total median wall; speedup against the baseline; alpha/tau pooled."""
    from verispec.bench.runner import BenchConfig, Measurement
    from verispec.workloads import BenchPrompt

    prompts = [BenchPrompt("p1", "x", "a"), BenchPrompt("p2", "y", "b")]
    cfgs = [BenchConfig("target-only", "verispec", None, None), BenchConfig("ngram k=2", "verispec", "ngram", 2)]

    def stats(n, wall, drafted=0, accepted=0, rejected=0, forwards=None, widths=None, slots=([], [], []), lengths=()):
        s = GenerationStats(drafted=drafted, accepted=accepted, rejected=rejected, emitted=n,
                            target_forwards=forwards or n, row_steps=forwards or n, wall=wall, time_target=wall * 0.8,
                            time_draft=0.001 * drafted)
        s.verify_width_seconds = widths or {1: [0.1] * (forwards or n)}
        s.slot_drafted, s.slot_tested, s.slot_accepted = slots
        s.draft_lengths = list(lengths) or [forwards or n]
        return s

    ms = [
        Measurement("p1", "x", "target-only", 0, [1] * 10, 1.0, "length", stats(10, 1.0)),
        Measurement("p1", "x", "target-only", 1, [1] * 10, 3.0, "length", stats(10, 3.0)),  # median of 1, 3 = 2
        Measurement("p2", "y", "target-only", 0, [2] * 10, 2.0, "length", stats(10, 2.0)),
        Measurement("p1", "x", "ngram k=2", 0, [1] * 10, 1.0, "length",
                    stats(10, 1.0, drafted=8, accepted=6, rejected=2, forwards=4, widths={3: [0.15] * 4},
                          slots=([4, 4], [4, 4], [4, 2]), lengths=[0, 0, 4])),  # passes accept 2, 2, 1, 1
        Measurement("p2", "y", "ngram k=2", 0, [2] * 9 + [3], 1.0, "length",
                    stats(10, 1.0, drafted=8, accepted=2, rejected=4, forwards=6, widths={3: [0.15] * 6},
                          slots=([4, 4], [4, 2], [2, 0]), lengths=[2, 0, 4])),  # 4 drafting passes accept 1, 1, 0, 0
    ]
    run = bench_runner.BenchRun("t", prompts, {"p1": [1], "p2": [2]}, cfgs,
                                BenchSettings(sampling=SamplingParams(temperature=0.0), ks=(2,)), ms)
    rep = analyse(run)
    base, spec = rep["configs"]
    assert base["tokens_per_s"] == pytest.approx(20 / 4.0)  # 20 tokens over 2 + 2 s
    assert spec["tokens_per_s"] == pytest.approx(20 / 2.0)
    assert spec["speedup"] == pytest.approx(2.0)
    assert spec["alpha"] == pytest.approx(8 / 14)  # accepted / (accepted + rejected), pooled
    assert spec["draft_acceptance"] == pytest.approx(8 / 16)
    assert spec["tau"] == pytest.approx(20 / 10)
    assert rep["theory"]["verify_ratio"] == {1: 1.0, 3: pytest.approx(1.5)}
    assert spec["c"] == pytest.approx((0.016 / 16) / 0.1)  # point mass: lookup time per drafted token / v(1)
    # Pass by pass: 2 passes drafted nothing (1 token, cost 1), 8 drafted 2 (E(8/14, 2) tokens, cost
    # 1.5); drafting took 0.016 s = 0.16 one-token passes of 0.1 s.
    assert spec["draft_lengths"] == [2, 0, 8]
    assert spec["predicted_speedup"] == pytest.approx((2 + 8 * expected_tokens(8 / 14, 2)) / (0.16 + 2 + 8 * 1.5))
    assert spec["verify_ratio"] == pytest.approx((2 + 8 * 1.5) / 10)
    assert spec["per_position_acceptance"] == [pytest.approx(6 / 8), pytest.approx(2 / 6)]
    # p2's speculative output differs at token 9: loudly reported, and the summary says False.
    assert spec["outputs_equal"] is False
    assert spec["mismatches"] == [{"prompt_id": "p2", "repeat": 0, "first_difference": 9,
                                   "baseline_tokens": 10, "tokens": 10}]
    assert rep["summary"]["greedy_outputs_equal"] is False
    assert rep["categories"]["x"]["ngram k=2"]["speedup"] == pytest.approx(2.0)
    assert rep["categories"]["y"]["ngram k=2"]["speedup"] == pytest.approx(2.0)
    assert rep["categories"]["x"]["ngram k=2"]["alpha"] == pytest.approx(6 / 8)
    assert rep["categories"]["y"]["ngram k=2"]["alpha"] == pytest.approx(2 / 6)
    assert rep["categories"]["x"]["target-only"]["alpha"] is None
    assert rep["summary"]["best"]["k"] == 2 and rep["summary"]["vs_hf"] is None


# ---------------------------------------------------------------------------------------------- workloads


def test_builtin_workloads() -> None:
    for name in BUILTIN_WORKLOADS:
        prompts = load_workload(name)
        assert len(prompts) >= 8
        assert {p.category for p in prompts} == {name}
        assert len({p.id for p in prompts}) == len(prompts)
        assert all(40 <= len(p.text) <= 1500 for p in prompts)
    every = load_workload("all")
    assert len(every) == sum(len(load_workload(n)) for n in BUILTIN_WORKLOADS)
    assert len({p.id for p in every}) == len(every)  # ids unique across workloads too
    assert [p.category for p in load_workload("code,grounded")][0] == "code"
    with pytest.raises(WorkloadError, match="unknown workload 'poetry'"):
        load_workload("poetry")


def test_spec_bench_format(tmp_path: Path) -> None:
    f = tmp_path / "q.jsonl"
    f.write_text(
        '{"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now another."]}\n'
        "\n"
        '{"question_id": "m-2", "category": "math", "turns": ["What is 2 + 2?"]}\n'
    )
    ps = load_prompt_file(f)
    assert [(p.id, p.category, p.text, p.chat) for p in ps] == [
        ("81", "writing", "Write a haiku.", True), ("m-2", "math", "What is 2 + 2?", True)]


@pytest.mark.parametrize("line, message", [
    ("{not json", "not valid JSON"),
    ('["a list"]', "expected a JSON object"),
    ('{"question_id": 1, "turns": ["x"]}', "missing key"),
    ('{"question_id": 1, "category": "c", "turns": []}', "turns must be a non-empty list"),
    ('{"question_id": 1, "category": "c", "turns": "text"}', "turns must be a non-empty list"),
    ('{"question_id": 1, "category": "c", "turns": [3]}', "first turn"),
    ('{"question_id": null, "category": "c", "turns": ["x"]}', "question_id"),
    ('{"question_id": 1, "category": "", "turns": ["x"]}', "category"),
    ('{"question_id": 0, "category": "c", "turns": ["dup"]}', "duplicate question_id"),
])
def test_spec_bench_malformed_lines(tmp_path: Path, line: str, message: str) -> None:
    f = tmp_path / "q.jsonl"
    f.write_text('{"question_id": 0, "category": "c", "turns": ["fine"]}\n' + line + "\n")
    with pytest.raises(WorkloadError, match=rf"q.jsonl, line 2: .*{message}"):
        load_prompt_file(f)
    with pytest.warns(UserWarning, match=rf"line 2: .*{message}"):
        ps = load_prompt_file(f, skip_bad=True)
    assert [p.id for p in ps] == ["0"]


def test_an_instruction_file_reads_as_prompts_and_a_split_keeps_its_own(tmp_path: Path) -> None:
    from verispec.distill.instructions import Instruction, write_jsonl

    f = tmp_path / "i.jsonl"
    write_jsonl([Instruction("qa-1", "qa", "s1", "train", "Q one?"), Instruction("qa-2", "qa", "s2", "heldout", "Q two?"),
                 Instruction("chat-3", "chat", "s3", "heldout", "Hi there.")], f)
    assert [(p.id, p.category, p.text) for p in load_prompt_file(f)] == [
        ("qa-1", "qa", "Q one?"), ("qa-2", "qa", "Q two?"), ("chat-3", "chat", "Hi there.")]
    assert [p.id for p in load_prompt_file(f, split="heldout")] == ["qa-2", "chat-3"]
    assert [p.id for p in load_prompt_file(f, split="train")] == ["qa-1"]
    with pytest.raises(WorkloadError, match="no prompts of split 'dev'"):
        load_prompt_file(f, split="dev")
    g = tmp_path / "q.jsonl"
    g.write_text('{"question_id": 1, "category": "c", "turns": ["x"]}\n')
    with pytest.raises(WorkloadError, match="line 1: no 'split' key"):
        load_prompt_file(g, split="heldout")


def test_spec_bench_file_errors(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="does not exist"):
        load_prompt_file(tmp_path / "missing.jsonl")
    with pytest.raises(WorkloadError, match="no prompts"):
        parse_prompts("\n\n", source="empty")
    with pytest.warns(UserWarning), pytest.raises(WorkloadError, match="no prompts"):
        parse_prompts("{bad\n", source="bad", skip_bad=True)


# ---------------------------------------------------------------------------------------------- end to end

SHORT_PROMPTS = (
    '{"question_id": "e1", "category": "edit", "turns": ["rename x to y: x = 1; x = x + 2; print(x)"]}\n'
    '{"question_id": "e2", "category": "edit", "turns": ["fix: teh cat sat on teh mat, teh end"]}\n'
    '{"question_id": "q1", "category": "qa", "turns": ["what is a list?"]}\n'
)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("bench")
    target = save_tiny_llama(root / "target", vocab_size=96, hidden=32, layers=2, seed=1, dtype=torch.float32)
    draft = save_tiny_llama(root / "draft", vocab_size=96, hidden=16, layers=1, seed=2, dtype=torch.float32)
    prompts = root / "short.jsonl"
    prompts.write_text(SHORT_PROMPTS)
    return target, draft, prompts


@pytest.fixture()
def one_thread():
    """Restore torch's thread count after a test that sets --threads 1 (2 shared cores thrash)."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_bench_arguments(p)
    return p.parse_args(list(argv))


def test_bench_end_to_end_writes_every_output(tiny_pair, tmp_path: Path, one_thread, capsys, monkeypatch) -> None:
    from verispec.bench import command
    from verispec.engine import costs

    target, draft, prompts = tiny_pair
    out = tmp_path / "out"
    retimed = []
    monkeypatch.setattr(command, "retime_costs", lambda on=True: retimed.append(on) or costs.retime_costs(on))
    rc = run_bench(_args("--target", str(target), "--draft", "ngram", "--draft", str(draft), "--prompts", str(prompts),
                         "--max-new-tokens", "6", "--k", "2,auto", "--compare", "hf", "--threads", "1",
                         "--out", str(out)))
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    assert list(report)[0] == "summary"
    s = report["summary"]
    assert set(s) == {"workload", "target", "baseline", "baseline_tokens_per_s", "reliable", "greedy_outputs_equal",
                      "best", "vs_hf", "vs_hf_best", "vs_hf_best_ci", "vs_hf_best_configs"}
    assert set(s["best"]) == {"drafter", "k", "tokens_per_s", "speedup", "speedup_ci", "alpha", "tau",
                              "predicted_speedup"}
    assert s["baseline"] in ("target-only", "hf target-only")  # the faster of the two (timing: either may win)
    assert s["vs_hf_best"] is not None and len(s["vs_hf_best_configs"]) == 2
    assert {"reliability", "baselines", "warnings"} <= set(report)
    assert s["workload"] == "short.jsonl" and s["baseline_tokens_per_s"] > 0
    assert s["greedy_outputs_equal"] is True  # exactness: speculative greedy == target-only greedy
    assert report["hf_outputs_equal"] is True  # and HF's greedy agrees
    assert report["partial"] is False
    assert {"versions", "machine", "settings", "command", "theory", "categories"} <= set(report)
    assert set(report["categories"]) == {"edit", "qa"}
    cfgs = {c["config"]: c for c in report["configs"]}
    assert {"target-only", "ngram k=2", "ngram k=auto", "draft k=2", "draft k=auto", "hf target-only",
            "hf ngram k=2", "hf draft k=2", "hf draft k=heuristic"} == set(cfgs)
    assert cfgs["draft k=2"]["draft_forwards"] > 0 and cfgs["draft k=2"]["c"] > 0
    assert cfgs["ngram k=2"]["vs_hf"] is not None and cfgs["ngram k=2"]["hf_config"] == "hf ngram k=2"
    # HF's tau from its counted target passes: plain decoding emits one token per pass (the prefill's included)
    assert cfgs["hf target-only"]["tau"] == 1.0 and cfgs["hf target-only"]["target_forwards"] == 3 * 6 * 3  # x repeats
    assert all(cfgs[k]["tau"] >= 1.0 for k in ("hf ngram k=2", "hf draft k=2"))
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 3 * len(cfgs)  # one row per prompt x config
    assert {"speedup_low", "speedup_high", "config_speedup_low", "config_speedup_high", "baseline"} <= set(rows[0])
    for c in cfgs.values():  # 3 prompts: every speedup but the baseline's own has an interval
        assert (c["speedup_ci"] is None) == c["reference"]
    assert {r["equal_to_baseline"] for r in rows if r["engine"] == "verispec" and r["drafter"]} == {"True"}
    for name in ("speedup_vs_k.png", "acceptance_per_position.png", "tokens_per_s_by_category.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob(".*tmp"))  # atomic writes leave no temp files
    text = capsys.readouterr().out
    assert "greedy check: every speculative output equals target-only" in text
    assert report["pass_costs"]["timed_afresh"] is True and "(timed before the run;" in text
    assert retimed == [True, False] and costs._RETIME["on"] is False  # then the process reads the file again


def test_bench_sampling_gumbel_is_drafter_invariant(one_thread) -> None:
    """With the gumbel method the check applies to sampled runs too (same seed -> same text)."""
    torch.set_num_threads(1)
    target = tiny_llama(vocab_size=96, hidden=32, layers=2, seed=1, dtype=torch.float64)
    draft = tiny_llama(vocab_size=96, hidden=16, layers=1, seed=2, dtype=torch.float64)
    from verispec.workloads import BenchPrompt

    prompts = [BenchPrompt("a", "c", "abc abc abc ab", chat=False), BenchPrompt("b", "c", "hello hello hel", chat=False)]
    drafters = [DrafterSpec("ngram", PromptLookupDrafter(), "ngram"),
                DrafterSpec("tiny", ModelDrafter(draft), "model", draft)]
    settings = BenchSettings(max_new_tokens=8, sampling=SamplingParams(temperature=1.0), ks=(3,), method="gumbel",
                             warmup_tokens=2)
    run = run_benchmark(target, drafters, prompts, settings)
    rep = analyse(run)
    assert rep["summary"]["greedy_outputs_equal"] is True
    assert all(c["outputs_equal"] for c in rep["configs"] if c["drafter"])
    # exact method + sampling: no token-level check is possible
    settings = BenchSettings(max_new_tokens=4, sampling=SamplingParams(temperature=1.0), ks=(2,), warmup_tokens=2)
    assert analyse(run_benchmark(target, drafters[:1], prompts, settings))["summary"]["greedy_outputs_equal"] is None


def test_bench_ctrl_c_writes_partial_report(tiny_pair, tmp_path: Path, monkeypatch, one_thread) -> None:
    target, _, prompts = tiny_pair
    calls = {"n": 0}
    real = bench_runner._generate

    def flaky(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 9:  # 3 warm-ups, then 5 timed generations finish, then Ctrl-C
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(bench_runner, "_generate", flaky)
    out = tmp_path / "partial"
    rc = run_bench(_args("--target", str(target), "--draft", "ngram", "--prompts", str(prompts), "--max-new-tokens",
                         "5", "--k", "1,2", "--threads", "1", "--out", str(out)))
    assert rc == 130
    report = json.loads((out / "report.json").read_text())
    assert report["partial"] is True
    assert sum(c["generations"] for c in report["configs"]) == 5
    assert report["summary"]["baseline_tokens_per_s"] > 0
    assert (out / "results.csv").exists() and (out / "speedup_vs_k.png").exists()


def test_bench_arguments_validation(tiny_pair) -> None:
    target, _, prompts = tiny_pair
    with pytest.raises(ValueError, match="--k"):
        run_bench(_args("--target", str(target), "--prompts", str(prompts), "--k", "2,fast"))
    with pytest.raises(ValueError, match="either --workload or --prompts"):
        run_bench(_args("--workload", "code", "--prompts", str(prompts)))
    with pytest.raises(ValueError, match="context"):  # prompt + max_new_tokens beyond the model's 512 positions
        run_bench(_args("--target", str(target), "--draft", "ngram", "--workload", "code", "--limit", "1",
                        "--max-new-tokens", "500", "--threads", "1"))


def test_quick_preset_and_explicit_overrides() -> None:
    from verispec.bench.command import _resolve

    opt = _resolve(_args("--quick"))
    assert (opt["workload"], opt["ks"], opt["max_new_tokens"], opt["limit"]) == ("code", [4, "auto"], 64, 3)
    opt = _resolve(_args("--quick", "--k", "2", "--max-new-tokens", "16"))
    assert (opt["ks"], opt["max_new_tokens"], opt["workload"]) == ([2], 16, "code")
    opt = _resolve(_args())
    assert opt["ks"] == [1, 2, 4, 6, 8, "auto"] and opt["max_new_tokens"] == 128 and opt["sampling"].greedy


def test_bench_default_drafter_matches_generate(tiny_pair) -> None:
    from rich.console import Console

    from verispec.bench.command import _load_drafters
    from verispec.models import load_causal_lm

    target, _, _ = tiny_pair
    tgt = load_causal_lm(target)
    specs = _load_drafters(["default"], tgt, str(target), Console(quiet=True), [])
    assert [d.label for d in specs] == ["ngram"]  # not a built-in target: prompt lookup, as in generate


# ---------------------------------------------------------------------------------------------- noisy machines
# Issue 13, section 4: repeats, bootstrap intervals, the faster of two baselines, the one-token pass
# check (and its single re-measure), theory bounded by its inputs. Fake timings only: no assertion
# here depends on how fast anything ran.

from rich.console import Console  # noqa: E402

from verispec.bench.intervals import bootstrap_ratio, bootstrap_repeats_ratio  # noqa: E402
from verispec.bench.reliability import cost_table_check, one_token_pass_check, relative_gap  # noqa: E402
from verispec.bench.report import _csv, print_report  # noqa: E402
from verispec.bench.runner import BenchConfig, BenchRun, Measurement  # noqa: E402
from verispec.bench.theory import monotone_costs, non_monotone  # noqa: E402
from verispec.workloads import BenchPrompt  # noqa: E402


def _fake_stats(n: int, wall: float, widths: dict[int, list[float]], drafted: int = 0, accepted: int = 0,
                rejected: int = 0, lengths: list[int] | None = None) -> GenerationStats:
    """Stats of one generation of ``n`` tokens in ``wall`` s whose target passes took ``widths`` (width -> s)."""
    passes = sum(len(v) for v in widths.values())
    s = GenerationStats(drafted=drafted, accepted=accepted, rejected=rejected, emitted=n, target_forwards=passes,
                        row_steps=passes, wall=wall, time_target=sum(sum(v) for v in widths.values()),
                        time_draft=1e-4 * drafted)
    s.verify_width_seconds = {w: list(v) for w, v in widths.items()}
    s.draft_lengths = lengths if lengths is not None else [passes]
    return s


def _run(ms: list[Measurement], configs: list[BenchConfig], prompts: list[BenchPrompt], **kw) -> BenchRun:
    return BenchRun("t", prompts, {p.id: [1] for p in prompts}, configs,
                    BenchSettings(sampling=SamplingParams(temperature=0.0), ks=(2,)), ms, **kw)


def _report(run: BenchRun) -> dict:
    """``analyse`` plus the fields ``print_report`` reads from the command (no model needed)."""
    rep = analyse(run)
    rep["summary"]["workload"] = "fake"
    rep["settings"] = {"max_new_tokens": 10, "sampling_desc": "greedy", "method": "exact"}
    return rep


def _printed(rep: dict) -> str:
    console = Console(width=250, record=True, force_terminal=False)
    print_report(rep, console)
    return console.export_text()


BASE, SPEC = BenchConfig("target-only", "verispec", None, None), BenchConfig("ngram k=2", "verispec", "ngram", 2)
FOUR = [BenchPrompt(f"p{i}", "ab"[i % 2], "x") for i in range(4)]


def _two_config_run(base_pass: float, spec_pass: float, spec_walls=(1.0, 1.2, 0.8, 1.1), repeats: int = 1) -> BenchRun:
    """Four prompts x ``repeats``: target-only (10 tokens, 2 s) and ngram k=2 (10 tokens, ``spec_walls``),
    whose one-token passes took ``base_pass`` / ``spec_pass`` seconds."""
    ms = []
    for r in range(repeats):
        for i, p in enumerate(FOUR):
            ms.append(Measurement(p.id, p.category, BASE.key, r, [1] * 10, 2.0 + 0.1 * r, "length",
                                  _fake_stats(10, 2.0, {1: [base_pass] * 10})))
            ms.append(Measurement(p.id, p.category, SPEC.key, r, [1] * 10, spec_walls[i] + 0.05 * r, "length",
                                  _fake_stats(10, spec_walls[i], {1: [spec_pass] * 2, 3: [1.1 * spec_pass] * 3},
                                              drafted=6, accepted=4, rejected=2, lengths=[2, 0, 3])))
    return _run(ms, [BASE, SPEC], FOUR)


def test_repeats_default_three_outside_quick() -> None:
    from verispec.bench.command import _resolve

    assert _resolve(_args())["repeats"] == 3
    assert _resolve(_args("--quick"))["repeats"] == 1
    assert _resolve(_args("--quick", "--repeats", "2"))["repeats"] == 2
    assert _resolve(_args("--repeats", "5"))["repeats"] == 5
    with pytest.raises(ValueError, match="--repeats must be >= 1, got 0"):
        _resolve(_args("--repeats", "0"))
    with pytest.raises(ValueError, match="--split selects lines of a --prompts file"):
        _resolve(_args("--split", "heldout"))


def test_bootstrap_interval_is_seeded_and_brackets_the_ratio() -> None:
    tok_a, wall_a = [10, 20, 30, 40, 50], [1.0, 1.5, 2.5, 2.0, 4.0]
    tok_b, wall_b = [10, 20, 30, 40, 50], [2.0, 2.5, 4.0, 5.0, 6.0]
    ci = bootstrap_ratio(tok_a, wall_a, tok_b, wall_b)
    assert ci == bootstrap_ratio(tok_a, wall_a, tok_b, wall_b)  # deterministic
    point = (sum(tok_a) / sum(wall_a)) / (sum(tok_b) / sum(wall_b))
    assert ci[0] < point < ci[1]
    # Every resampled ratio lies between the smallest and largest per-prompt ratio.
    per = [(t / w) / (t / v) for t, w, v in zip(tok_a, wall_a, wall_b)]
    assert min(per) <= ci[0] and ci[1] <= max(per)
    # Every prompt 2x faster: no spread at all.
    assert bootstrap_ratio([5, 7], [1.0, 2.0], [5, 7], [2.0, 4.0]) == (pytest.approx(2.0), pytest.approx(2.0))
    assert bootstrap_ratio([5], [1.0], [5], [2.0]) is None  # one prompt: nothing to resample
    with pytest.raises(ValueError, match="one value per prompt"):
        bootstrap_ratio([1, 2], [1.0], [1, 2], [1.0, 2.0])
    # Over repeats: one prompt's ratio of median walls; None with a single repeat.
    lo, hi = bootstrap_repeats_ratio(10, [1.0, 1.1, 0.9], 10, [2.0, 2.2, 1.8])
    assert lo <= 2.0 <= hi and bootstrap_repeats_ratio(10, [1.0], 10, [2.0, 2.1]) is None


def test_every_speedup_has_a_bootstrap_interval(tmp_path: Path) -> None:
    run = _two_config_run(0.1, 0.1, repeats=2)
    rep = _report(run)
    base, spec = rep["configs"]
    assert base["reference"] and base["speedup"] is None and base["speedup_ci"] is None
    # 40 tokens over a median wall of 2.05 s per prompt vs 40 over the spec medians.
    walls = [1.025, 1.225, 0.825, 1.125]
    assert spec["speedup"] == pytest.approx((40 / sum(walls)) / (40 / (4 * 2.05)))
    assert spec["speedup_ci"] == pytest.approx(list(bootstrap_ratio([10] * 4, walls, [10] * 4, [2.05] * 4)))
    assert rep["summary"]["best"]["speedup_ci"] == spec["speedup_ci"]
    # Per category (two prompts each) and per prompt (two repeats each): intervals too.
    assert rep["categories"]["a"]["ngram k=2"]["speedup_ci"] == pytest.approx(list(
        bootstrap_ratio([10, 10], walls[0::2], [10, 10], [2.05, 2.05])))
    pp = next(p for p in rep["per_prompt"] if p["config"] == SPEC.key and p["prompt_id"] == "p0")
    assert pp["speedup"] == pytest.approx(2.05 / 1.025) and pp["speedup_ci"][0] <= pp["speedup"] <= pp["speedup_ci"][1]
    rows = list(csv.DictReader(_csv(rep).splitlines()))
    row = next(r for r in rows if r["config"] == SPEC.key and r["prompt_id"] == "p0")
    assert float(row["speedup_low"]) == pytest.approx(pp["speedup_ci"][0], rel=1e-5)
    assert float(row["config_speedup_high"]) == pytest.approx(spec["speedup_ci"][1], rel=1e-5)
    assert row["baseline"] == "target-only" and row["run_reliable"] == "True"
    text = _printed(rep)
    assert f"[{spec['speedup_ci'][0]:.2f}-{spec['speedup_ci'][1]:.2f}]" in text and "prompts [low-high]" in text
    from verispec.bench.report import write_outputs

    write_outputs(rep, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())["configs"][1]["speedup_ci"] == spec["speedup_ci"]


def test_compare_hf_speedups_are_over_the_faster_baseline() -> None:
    """HF's plain generate at 7.5 tok/s against verispec's 5: speedups over 7.5, with a warning."""
    hf_base = BenchConfig("hf target-only", "hf", None, None)
    hf_ngram = BenchConfig("hf ngram k=2", "hf", "ngram", 2)
    run = _two_config_run(0.1, 0.1, spec_walls=(1 / 3,) * 4)  # verispec ngram: 30 tok/s
    for p in FOUR:
        run.measurements.append(Measurement(p.id, p.category, hf_base.key, 0, [1] * 10, 4 / 3, "length"))
        run.measurements.append(Measurement(p.id, p.category, hf_ngram.key, 0, [1] * 10, 0.5, "length"))
    run.configs += [hf_base, hf_ngram]
    rep = _report(run)
    cfg = {c["config"]: c for c in rep["configs"]}
    assert cfg["ngram k=2"]["speedup"] == pytest.approx(4.0)  # 30 / 7.5, not 30 / 5
    assert rep["summary"]["baseline"] == "hf target-only"
    assert rep["summary"]["baseline_tokens_per_s"] == pytest.approx(7.5)
    assert cfg["target-only"]["speedup"] == pytest.approx(5 / 7.5) and not cfg["target-only"]["reference"]
    assert cfg["hf ngram k=2"]["speedup"] == pytest.approx(20 / 7.5) and cfg["hf target-only"]["reference"]
    assert rep["categories"]["a"]["ngram k=2"]["speedup"] == pytest.approx(4.0)
    assert rep["baselines"]["differ"] is True and rep["baselines"]["gap"] == pytest.approx(0.5)
    assert any("baselines differ by 50%" in w for w in rep["warnings"])
    # The fastest verispec config (ngram, 30 tok/s) over the fastest HF config (HF ngram, 20 tok/s).
    assert rep["summary"]["vs_hf_best"] == pytest.approx(1.5)
    assert rep["summary"]["vs_hf_best_configs"] == ["ngram k=2", "hf ngram k=2"]
    assert rep["summary"]["vs_hf_best_ci"] == [pytest.approx(1.5), pytest.approx(1.5)]
    text = _printed(rep)
    assert "4.00x" in text and "6.00x" not in text and "over hf target-only" in text
    # Baselines within 10%: no warning, and the faster one (verispec here) is still the reference.
    for m in run.measurements:
        if m.config == hf_base.key:
            m.wall = 2.1
    rep = _report(run)
    assert rep["summary"]["baseline"] == "target-only" and rep["baselines"]["differ"] is False
    assert not any("baselines differ" in w for w in rep["warnings"])


def test_one_token_pass_check() -> None:
    assert relative_gap(197, 34) == pytest.approx(197 / 34 - 1) and relative_gap(34, 197) == relative_gap(197, 34)
    run = _two_config_run(0.197, 0.034)
    c = one_token_pass_check(run.measurements, BASE.key, [SPEC.key])
    assert (c["baseline_pass_ms"], c["speculative_pass_ms"]) == (pytest.approx(197), pytest.approx(34))
    assert (c["baseline_passes"], c["speculative_passes"], c["agree"]) == (40, 8, False)
    assert one_token_pass_check(_two_config_run(0.060, 0.053).measurements, BASE.key, [SPEC.key])["agree"] is True
    assert one_token_pass_check(_two_config_run(0.060, 0.051).measurements, BASE.key, [SPEC.key])["agree"] is False
    # Means, not medians: a few passes stalled for a second (a contended 2-core machine) move the
    # summed time, and so the speedup, but not the median.
    stalled = _two_config_run(0.058, 0.058)
    for m in stalled.measurements:
        if m.config == BASE.key and m.prompt_id == "p0":
            m.stats.verify_width_seconds[1][:3] = [1.0, 1.0, 1.0]
    c = one_token_pass_check(stalled.measurements, BASE.key, [SPEC.key])
    assert c["baseline_median_ms"] == pytest.approx(58) and c["agree"] is False
    assert c["baseline_pass_ms"] == pytest.approx((37 * 58 + 3000) / 40)
    # A drafter that never makes a one-token pass: nothing to compare, not a failure.
    ms = [m for m in run.measurements if m.config == BASE.key]
    assert one_token_pass_check(ms, BASE.key, [SPEC.key])["agree"] is None


def test_a_cost_table_timed_under_other_conditions_is_named() -> None:
    """Run 2 of BENCHMARKS' whole-split bench: its table put a one-token pass at 34.2 ms, the run's
    were 25.8 ms. Within 15% (run 1: 26.3 against 29.4) or without either number: no warning."""
    w = cost_table_check(34.2, 25.8)
    assert w is not None and "34.2 ms" in w and "25.8 ms" in w and "33% apart" in w and "--costs" in w
    assert cost_table_check(25.8, 34.2) is not None  # either way round
    assert cost_table_check(26.3, 29.4) is None
    assert cost_table_check(None, 25.8) is None and cost_table_check(34.2, None) is None


def test_the_bench_notes_when_its_cost_table_disagrees_with_the_run(tiny_pair, tmp_path: Path, one_thread, capsys,
                                                                   monkeypatch) -> None:
    """The table the run's K choices weighed, scaled 10x (as if timed on a busy machine): the report
    notes it and prints it, as a note, not a warning (the speedups are measured; whether the tiny
    run's own one-token passes agree is timing, not asserted here)."""
    from verispec.bench import pass_table

    target, _, prompts = tiny_pair
    real = pass_table.pass_cost_table

    def slow_table(*args, **kwargs):
        table = real(*args, **kwargs)
        return {**table, "v1_ms": 10 * table["v1_ms"]}
    monkeypatch.setattr(pass_table, "pass_cost_table", slow_table)
    out = tmp_path / "out"
    assert run_bench(_args("--target", str(target), "--draft", "ngram", "--prompts", str(prompts), "--max-new-tokens",
                           "6", "--k", "2", "--threads", "1", "--out", str(out))) == 0
    report = json.loads((out / "report.json").read_text())
    said = [w for w in report["notes"] if w.startswith("the pass-cost table k=auto weighed")]
    assert len(said) == 1 and not any(w.startswith("the pass-cost table") for w in report["warnings"])
    assert "the pass-cost table k=auto weighed" in capsys.readouterr().out


def test_disagreeing_one_token_passes_mark_the_run_unreliable(tmp_path: Path) -> None:
    """The issue's run: target-only at 197 ms per pass, 34 ms inside the speculative configs."""
    rep = _report(_two_config_run(0.197, 0.034))
    assert rep["summary"]["reliable"] is False and rep["reliability"]["reliable"] is False
    assert rep["warnings"][0].startswith("UNRELIABLE RUN: target-only's one-token passes took 197.0 ms")
    text = _printed(rep)
    assert "UNRELIABLE" in text and "no headline" in text and "best:" not in text
    from verispec.bench.report import write_outputs

    write_outputs(rep, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text())["summary"]["reliable"] is False
    assert {r["run_reliable"] for r in csv.DictReader((tmp_path / "results.csv").open())} == {"False"}
    # Passes that agree: a headline.
    rep = _report(_two_config_run(0.060, 0.058))
    assert rep["summary"]["reliable"] is True and "best: ngram k=2" in _printed(rep)


class _FakeGenerate:
    """Stands in for ``runner._generate``: 10 tokens per call; target-only's one-token passes take
    ``base_passes[i]`` s on its i-th timed round (one round = every prompt x repeat), 0.034 s inside
    ngram configs."""

    def __init__(self, base_passes: list[float]) -> None:
        self.base_passes = base_passes
        self.calls: list[str] = []

    def __call__(self, cfg, target, ids, max_new, settings, seed):
        self.calls.append(cfg.key)
        if cfg.drafter is None:
            rounds = self.calls.count(cfg.key) - 1  # minus the warm-up
            per_round = settings.repeats * 2  # two prompts
            t = self.base_passes[min(len(self.base_passes) - 1, max(0, rounds - 1) // per_round)]
            return [1] * max_new, 10 * t, "length", _fake_stats(max_new, 10 * t, {1: [t] * 10}), None
        st = _fake_stats(max_new, 0.2, {1: [0.034] * 2, 3: [0.04] * 3}, drafted=6, accepted=4, rejected=2,
                         lengths=[2, 0, 3])
        return [1] * max_new, 0.2, "length", st, None


@pytest.mark.parametrize("second, reliable", [(0.035, True), (0.197, False)])
def test_runner_remeasures_the_baseline_once(monkeypatch, second: float, reliable: bool) -> None:
    target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    prompts = [BenchPrompt("a", "c", "abc abc", chat=False), BenchPrompt("b", "c", "hello", chat=False)]
    fake = _FakeGenerate([0.197, second])
    monkeypatch.setattr(bench_runner, "_generate", fake)
    settings = BenchSettings(max_new_tokens=10, sampling=SamplingParams(temperature=0.0), ks=(2,), repeats=2,
                             warmup_tokens=2)
    run = run_benchmark(target, [DrafterSpec("ngram", PromptLookupDrafter(), "ngram")], prompts, settings)
    # Warm-up + 2 repeats x 2 prompts, then exactly one re-measure of 2 x 2: bounded.
    assert fake.calls.count("target-only") == 1 + 4 + 4 and fake.calls.count("ngram k=2") == 1 + 4
    assert [c["agree"] for c in run.baseline_checks] == [False, reliable]
    assert len(run.superseded) == 4 and sum(m.config == "target-only" for m in run.measurements) == 4
    assert any("re-measured once" in n for n in run.notes)
    rep = analyse(run)
    assert rep["summary"]["reliable"] is reliable and rep["reliability"]["remeasured"] is True
    # The speedup is over the re-measured baseline (10 passes of `second` s per 10 tokens).
    assert rep["summary"]["baseline_tokens_per_s"] == pytest.approx(1 / second)
    # Without the option: no re-measure, the run is simply flagged.
    fake.calls.clear()
    settings.remeasure_baseline = False
    run = run_benchmark(target, [DrafterSpec("ngram", PromptLookupDrafter(), "ngram")], prompts, settings)
    assert fake.calls.count("target-only") == 5 and analyse(run)["summary"]["reliable"] is False


def test_theory_never_predicts_more_than_its_inputs_allow() -> None:
    """A loaded baseline inflates v(1), so v(2)/v(1) < 1; the old code then printed "optimal K 1,
    predicted 2.58x" although one draft yields at most 2 tokens per pass."""
    load = {1: 1.0, 2: 0.7, 3: 0.75, 5: 1.3}
    k, s = optimal_k(0.95, 0.0, load, max_k=1)
    assert k == 1 and s <= 2.0  # the old code: 1.95 / 0.7 = 2.79x
    s, _, _ = predicted_speedup_over_lengths(1.0, [0, 10], 0.0, load)
    assert s <= 2.0
    assert verify_cost(load, 2) == 1.0 and verify_cost({2: 0.5}, 4) == 1.0
    assert monotone_costs(load) == {1: 1.0, 2: 1.0, 3: 1.0, 5: 1.3}
    assert non_monotone(load) == [{"width": 2, "cost": 0.7, "narrower_width": 1, "narrower_cost": 1.0},
                                  {"width": 3, "cost": 0.75, "narrower_width": 1, "narrower_cost": 1.0}]
    assert non_monotone({1: 1.0, 2: 1.1, 3: 1.2}) == []
    # One stalled median at a rarely used width moves the fit by its weight, not to its height
    # (a running maximum would make every wider pass cost 9x).
    fit = monotone_costs({1: 1.0, 2: 9.15, 3: 0.87, 5: 1.2}, {1: 500, 2: 1, 3: 50, 5: 40})
    assert fit[2] == fit[3] == pytest.approx((9.15 + 50 * 0.87) / 51) and fit[5] == 1.2
    import random

    rng = random.Random(0)
    for _ in range(200):  # any measured costs, any alpha and c: at most K + 1 tokens per pass of cost >= 1
        ratios = {w: rng.uniform(0.2, 3.0) for w in rng.sample(range(1, 14), 4)}
        alpha, c = rng.random(), rng.uniform(0.0, 0.2)
        k, s = optimal_k(alpha, c, ratios)
        assert s <= k + 1 + 1e-12
        lengths = [rng.randrange(5) for _ in range(6)]
        if sum(lengths):
            assert predicted_speedup_over_lengths(alpha, lengths, 0.0, ratios)[0] <= len(lengths) + 1e-12


def test_report_says_when_verify_costs_are_not_monotone() -> None:
    # Baseline passes at 0.197 s pool into v(1); the speculative configs' 3-token passes took 0.04 s.
    rep = _report(_two_config_run(0.197, 0.034))
    th = rep["theory"]
    assert th["verify_monotone"] is False
    assert th["verify_non_monotone"] == [{"width": 3, "ms": pytest.approx(37.4), "narrower_width": 1,
                                          "narrower_ms": pytest.approx(197.0)}]
    assert th["verify_ratio_used"] == {1: 1.0, 3: 1.0}
    for d in th["drafters"].values():
        assert d["optimal_predicted_speedup"] <= d["optimal_k"] + 1
    spec = rep["configs"][1]
    assert spec["predicted_speedup"] <= 3.0  # at most 2 drafts per pass here
    assert "not monotone in width (v(3) 37.4 ms < v(1) 197.0 ms)" in _printed(rep)
    assert _report(_two_config_run(0.034, 0.034))["theory"]["verify_monotone"] is True


def test_every_run_measures_the_pass_cost_table_it_is_read_against(tiny_target, tiny_draft):
    """v(n)/v(1) for n = 1..16 and each drafter's step and c (a lookup drafts for free)."""
    from verispec.bench.pass_table import pass_cost_table
    from verispec.bench.runner import DrafterSpec
    from verispec.drafters import ModelDrafter, PromptLookupDrafter

    specs = [DrafterSpec("ngram", PromptLookupDrafter(), "ngram"), DrafterSpec("small", ModelDrafter(tiny_draft), "model")]
    for s in specs:
        s.drafter.bind(tiny_target)
    table = pass_cost_table(tiny_target, specs, "test cpu")
    assert list(table["ratio"]) == list(range(1, 17)) and table["ratio"][1] == 1.0
    assert table["drafters"]["ngram"]["c"] == 0.0 and table["drafters"]["small"]["c"] > 0
    assert all(table["ratio"][n] > 0 for n in range(1, 17)) and "goals" not in table


def test_the_kernel_line_names_what_each_shape_runs():
    from verispec.bench.report import _kernels_line, _ranges

    assert _ranges([1, 2, 3, 5, 7, 8]) == "1-3,5,7-8" and _ranges([]) == ""
    line = _kernels_line({"choice": "measured", "linears": {"576x576": {"packed_rows": [1, 2, 3]},
                                                            "576x192": {"packed_rows": []}},
                          "head": {"rows": {"packed": [1, 3], "mm_t": [2]}, "beyond": "mm_t"}})
    assert line == "measured; 576x576 packed for 1-3 rows; plain 576x192; head packed 1,3, mm_t 2, beyond: mm_t"
    line = _kernels_line({"choice": "measured", "linears": {"576x576": {"packed_rows": [1], "rowdot_rows": [2, 3]}},
                          "head": {"rows": {"rowdot": [1, 2], "mm_t": [3]}, "beyond": "mm_t"}})
    assert line == "measured; 576x576 packed for 1 rows, rowdot for 2-3 rows; head rowdot 1-2, mm_t 3, beyond: mm_t"
    assert _kernels_line({"choice": None}) == "plain (no CPU kernel)"


def test_tree_acceptance_is_pooled_and_printed() -> None:
    """Trees: acceptance per (depth, sibling rank), pooled over generations, in report.json and printed."""
    a = _fake_stats(10, 1.0, {5: [0.1] * 5}, drafted=20, accepted=5, rejected=3, lengths=[0, 0, 0, 0, 5])
    b = _fake_stats(10, 1.0, {5: [0.1] * 5}, drafted=20, accepted=5, rejected=3, lengths=[0, 0, 0, 0, 5])
    a.tree_tested, a.tree_accepted = {(1, 0): 5, (1, 1): 3}, {(1, 0): 2, (1, 1): 1}
    b.tree_tested, b.tree_accepted = {(1, 0): 5, (2, 0): 2}, {(1, 0): 3, (2, 0): 2}
    prompts = FOUR[:2]
    ms = [Measurement(p.id, p.category, c.key, 0, [1] * 10, 1.0, "length", s)
          for p in prompts for c, s in ((BASE, _fake_stats(10, 2.0, {1: [0.1] * 10})), (SPEC, a if p.id == "p0" else b))]
    rep = _report(_run(ms, [BASE, SPEC], prompts))
    spec = rep["configs"][1]
    assert spec["tree_acceptance"] == [{"depth": 1, "rank": 0, "tested": 10, "accepted": 5},
                                       {"depth": 1, "rank": 1, "tested": 3, "accepted": 1},
                                       {"depth": 2, "rank": 0, "tested": 2, "accepted": 2}]
    assert "d1 r0 0.50 (n 10); d1 r1 0.33 (n 3); d2 r0 1.00 (n 2)" in _printed(rep)
