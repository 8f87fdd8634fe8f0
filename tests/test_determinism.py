"""A seeded sampled "exact" request gives the same text in every process: nothing the engine
measures (the pass-cost table, the EAGLE head's draft weights) may change its draft lengths or
the bits of q.

Each run is a fresh Python interpreter (``subprocess``) on tiny offline models, so what one
process measured or cached cannot leak into another except through the files it wrote, as
between real runs. Every loop is bounded; no assertion reads a clock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import verispec

SRC = str(Path(verispec.__file__).resolve().parent.parent)  # the verispec these tests import
TIMEOUT = 240  # seconds per child process (a fresh interpreter imports torch and transformers)

# One run: a float32 tiny target and a tiny EAGLE head (float32, so every kind of draft weights
# can serve it), k="auto", one sampled "exact" request and one greedy request per prompt.
WORKER = textwrap.dedent('''
    import json, sys
    import torch
    torch.set_num_threads(1)
    from verispec.drafters import EagleDrafter
    from verispec.engine import SpeculativeDecoder
    from verispec.sampling import SamplingParams
    from verispec.testing import tiny_eagle, tiny_llama

    args = json.loads(sys.argv[1])
    if args.get("fastest"):  # what a timing of the draft weights would say on this "machine"
        from verispec.models import kernels
        kernels.timing.time_calls = lambda calls, *a, **kw: {k: 1.0 if k == args["fastest"] else 2.0 for k in calls}
    target = tiny_llama(vocab_size=64, hidden=64, layers=4, seed=0, dtype=torch.float32)
    drafter = EagleDrafter(tiny_eagle(target, seed=2), weights=args["weights"])
    dec = SpeculativeDecoder(target, drafter, k="auto", max_k=6)
    prompts = ["the cat sat on the mat", "abc abc abc abc"]
    sampled = dec.generate(prompts, 40, SamplingParams(temperature=0.9, seed=11))
    greedy = dec.generate(prompts, 24, SamplingParams(temperature=0))
    print(json.dumps({"sampled": sampled.token_ids, "greedy": greedy.token_ids,
                      "lengths": sampled.stats.draft_lengths, "weights": drafter.model.weights,
                      "costs": {str(w): t for w, t in dec.costs.verify.items()}, "c": dec.costs.draft_step}))
''')


def _env(tmp: Path, costs: Path, real: bool = False) -> dict:
    env = dict(os.environ)
    env.update(PYTHONPATH=SRC, VERISPEC_COSTS=str(costs), VERISPEC_KERNELS=str(tmp / "kernels.json"),
               OMP_NUM_THREADS="1")
    if not real:  # the real model keeps the user's model cache (prepared once per machine)
        env["VERISPEC_CACHE"] = str(tmp / "cache")
    env.pop("VERISPEC_KERNEL_CHOICE", None)
    return env


def _start(tmp: Path, costs: Path, worker: str = WORKER, **args) -> subprocess.Popen:
    script = tmp / f"worker-{abs(hash(worker))}.py"
    if not script.exists():
        script.write_text(worker)
    return subprocess.Popen([sys.executable, str(script), json.dumps(args)],
                            env=_env(tmp, costs, real=worker is not WORKER),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _run(tmp: Path, costs: Path, worker: str = WORKER, **args) -> dict:
    return _result(_start(tmp, costs, worker, **args))


def _rewrite(costs: Path, verify: dict, draft_step: float, busy: bool) -> None:
    """Every entry of the costs file replaced, as a re-timing on another day would leave it."""
    data = json.loads(costs.read_text())
    assert data, "the first run wrote no costs entry"
    costs.write_text(json.dumps({k: {"verify": verify, "draft_step": draft_step, "busy": busy} for k in data}))


FLAT = {str(w): 0.01 for w in range(1, 9)}  # wide passes free
DEAR = {str(w): 0.01 * (1 + 0.5 * (w - 1)) for w in range(1, 9)}  # each drafted token half a pass more


def test_seeded_exact_text_is_the_same_whatever_the_costs_file_holds(tmp_path):
    """The costs file measured afresh, read back, deleted and measured again, rewritten with
    tables that make drafting free or dear (quiet, and marked busy), and written by two processes
    started together: one text per seed. (Before the fix the cheap table drafted far more than
    the dear one, and the sampled text changed with it.)"""
    costs = tmp_path / "pass-costs.json"
    runs = {"fresh": _run(tmp_path, costs, weights="fp32")}
    runs["read back"] = _run(tmp_path, costs, weights="fp32")
    costs.unlink()
    runs["deleted"] = _run(tmp_path, costs, weights="fp32")
    _rewrite(costs, FLAT, 1e-6, busy=False)
    runs["free drafts"] = _run(tmp_path, costs, weights="fp32")
    _rewrite(costs, DEAR, 0.02, busy=True)  # dear, and timed "busy": a quiet machine times it again
    runs["dear drafts"] = _run(tmp_path, costs, weights="fp32")
    costs.unlink()
    both = [_start(tmp_path, costs, weights="fp32") for _ in range(2)]
    runs["together 1"], runs["together 2"] = (_result(p) for p in both)
    first = runs["fresh"]
    assert sum(first["lengths"][1:]) > 0, "the request never drafted: the test would show nothing"
    for name, r in runs.items():
        assert r["sampled"] == first["sampled"], f"{name}: sampled exact text changed"
        assert r["lengths"] == first["lengths"], f"{name}: draft lengths changed"
        assert r["greedy"] == first["greedy"], name
    # the tables themselves did differ (what greedy rows read): the text did not follow them
    assert runs["free drafts"]["c"] != runs["fresh"]["c"] or runs["free drafts"]["costs"] != runs["fresh"]["costs"]


@pytest.mark.parametrize("weights", ["fp32", "fp16", "int8"])
def test_each_draft_weight_precision_is_reproducible(tmp_path, weights):
    """Forced draft weights: each kind gives one text per seed across processes whose costs
    files differ (the text may differ between kinds: q's bits do)."""
    from verispec.models import fp16_linear, int8_linear

    make = {"fp16": fp16_linear, "int8": int8_linear}.get(weights)
    if make is not None and make(torch.zeros(8, 64)) is None:
        pytest.skip(f"this torch build has no {weights} weight kernel")
    costs = tmp_path / "pass-costs.json"
    first = _run(tmp_path, costs, weights=weights)
    _rewrite(costs, FLAT, 1e-6, busy=False)
    again = _run(tmp_path, costs, weights=weights)
    assert first["weights"] == again["weights"] == weights
    assert first["sampled"] == again["sampled"] and first["lengths"] == again["lengths"]


def test_default_draft_weights_follow_the_cpu_rule_not_a_timing(tmp_path):
    """Two processes whose timings of the draft weights disagree (one finds float32 fastest, the
    other int8 or float16) bind the same default weights, the CPU rule's, and give one text.
    (Before the fix the default was the timing's pick, and q's bits, hence the text, followed it.)"""
    from verispec.drafters.eagle_head import capability_draft_weights
    from verispec.testing import tiny_eagle, tiny_llama

    target = tiny_llama(vocab_size=64, hidden=64, layers=4, seed=0, dtype=torch.float32)
    files = tiny_eagle(target, seed=2)
    rule = capability_draft_weights(files.head.float(), target.model.get_output_embeddings().weight.detach())
    other = "fp32" if rule != "fp32" else "fp16"
    runs = []
    for fastest in (rule, other):
        kernels = tmp_path / f"k-{fastest}"
        kernels.mkdir()
        runs.append(_run(kernels, tmp_path / "pass-costs.json", weights="auto", fastest=fastest))
    assert [r["weights"] for r in runs] == [rule, rule]
    assert runs[0]["sampled"] == runs[1]["sampled"]
    forced = _run(tmp_path, tmp_path / "pass-costs.json", weights=rule)
    assert forced["sampled"] == runs[0]["sampled"]  # the default is that precision, bit for bit


def test_the_cpu_rule_maps_the_cpus_seen():
    """The rule on the flags of the CPUs this ran on (as :func:`verispec.models.cpu_matrix_units`
    lists them), for a head every kernel serves."""
    from verispec.drafters.eagle_head import capability_draft_weights
    from verispec.models import fp16_linear, int8_linear
    from verispec.testing import tiny_eagle, tiny_llama

    if int8_linear(torch.zeros(8, 64)) is None or fp16_linear(torch.zeros(8, 64)) is None:
        pytest.skip("this torch build lacks the int8 or the fbgemm float16 weight kernel")
    target = tiny_llama(vocab_size=64, hidden=64, layers=2, seed=0, dtype=torch.float32)
    head = tiny_eagle(target, seed=2).head.float()
    out = target.model.get_output_embeddings().weight.detach()
    epyc = "avx2 avx512f avx512_bf16 avx512_vnni avx_vnni"  # AMD EPYC, AVX-512 with bfloat16, no AMX
    xeon_amx = "avx2 avx512f avx512_bf16 avx512_fp16 avx512_vnni avx_vnni amx_tile amx_bf16 amx_int8"
    xeon = "avx2 avx512f avx512_vnni"  # AVX-512 without bfloat16
    old_epyc = "avx2"
    assert capability_draft_weights(head, out, epyc) == "int8"
    assert capability_draft_weights(head, out, xeon_amx) == "int8"
    assert capability_draft_weights(head, out, xeon) == "fp16"
    assert capability_draft_weights(head, out, old_epyc) == "fp16"
    assert capability_draft_weights(head, out, "") == "fp32"
    assert capability_draft_weights(head.double(), out.double(), epyc) == "fp32"  # no CPU kernel for float64


WRITER = textwrap.dedent('''
    import json, sys
    from verispec.engine import costs
    name, n = sys.argv[1], int(sys.argv[2])
    for i in range(n):
        costs._write_costs(f"{name} {i}", {"verify": {"1": 1.0}, "draft_step": 0.0, "busy": False})
''')


def test_two_processes_writing_the_costs_file_keep_each_others_entries(tmp_path):
    """Two processes add entries to one costs file at the same time (read, add, write): every
    entry of both is there at the end. (Without the lock a write made from a stale read drops the
    other process's newest entries.)"""
    costs = tmp_path / "pass-costs.json"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    n = 150
    procs = [subprocess.Popen([sys.executable, str(script), name, str(n)], env=_env(tmp_path, costs),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    for p in procs:
        _, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 0, err[-2000:]
    keys = set(json.loads(costs.read_text()))
    missing = {f"{name} {i}" for name in ("a", "b") for i in range(n)} - keys
    assert not missing, f"{len(missing)} entries lost, e.g. {sorted(missing)[:3]}"


REAL_WORKER = textwrap.dedent('''
    import json, sys
    import torch
    torch.set_num_threads(1)
    from verispec.drafters import make_drafter
    from verispec.engine import SpeculativeDecoder
    from verispec.models import load_causal_lm
    from verispec.sampling import SamplingParams

    target = load_causal_lm("smollm2-135m")
    drafter = make_drafter("default", target="smollm2-135m")  # eagle+ngram, default draft weights
    dec = SpeculativeDecoder(target, drafter, k="auto")
    out = dec.generate(["Write a short poem about the sea."], 48, SamplingParams(temperature=0.8, seed=5), chat=True)
    print(json.dumps({"sampled": out.token_ids, "lengths": out.stats.draft_lengths,
                      "weights": drafter.model.model.weights, "c": dec.costs.draft_step}))
''')


@pytest.mark.slow
def test_smollm2_seeded_exact_text_is_the_same_whatever_the_costs_file_holds(tmp_path):
    """The real default pair (SmolLM2-135M, eagle+ngram, k="auto"): one process measures the
    costs afresh, a second reads a rewritten table where drafting is free; one text."""
    costs = tmp_path / "pass-costs.json"
    first = _run(tmp_path, costs, REAL_WORKER)
    _rewrite(costs, FLAT, 1e-6, busy=False)
    again = _run(tmp_path, costs, REAL_WORKER)
    assert sum(first["lengths"][1:]) > 0
    assert again["weights"] == first["weights"]
    assert again["sampled"] == first["sampled"] and again["lengths"] == first["lengths"]
