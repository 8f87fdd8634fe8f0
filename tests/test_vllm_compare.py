"""``verispec bench --compare vllm`` without vLLM: the argument checks and the analysis of the
results the vLLM script writes."""

from __future__ import annotations

import sys

import pytest

from verispec.bench.vllm_compare import SCRIPT, analyse_vllm, check_vllm_python, model_dir
from verispec.cli import main


def test_a_python_without_vllm_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="--vllm-python: .* not a file"):
        check_vllm_python(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="--vllm-python: .*not a python with vllm"):
        check_vllm_python(sys.executable)  # this environment has no vllm
    with pytest.raises(ValueError, match="--vllm-python: no vLLM environment"):
        check_vllm_python(None)
    with pytest.raises(ValueError, match="--target"):
        model_dir(str(tmp_path))  # no config.json
    assert SCRIPT.is_file()


def test_the_cli_names_the_argument(capsys, tmp_path):
    assert main(["bench", "--quick", "--vllm-python", str(tmp_path)]) == 2
    assert "--vllm-python is for --compare vllm" in capsys.readouterr().err
    assert main(["bench", "--quick", "--compare", "vllm", "--vllm-python", str(tmp_path / "py")]) == 2
    assert "--vllm-python" in capsys.readouterr().err


def _run(cfg, walls, tokens, drafted=0, accepted=0, ok=True):
    prompts = [{"id": f"p{i}", "category": "code" if i < 2 else "chat", "tokens": t, "wall": w,
                "drafts": 1 if drafted else 0, "draft_tokens": drafted, "accepted": accepted}
               for i, (w, t) in enumerate(zip(walls, tokens))]
    return {"config": cfg, "ok": ok, "error": None if ok else "ImportError: x", "prompts": prompts if ok else None}


def test_analysis_speedups_acceptance_and_equality():
    toks = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]]
    results = {"plain": _run("plain", [1.0, 1.0, 2.0], toks),
               "verispec:12": _run("verispec:12", [0.5, 0.5, 2.0], toks, drafted=4, accepted=3),
               "ngram:3": _run("ngram:3", [1.0, 1.0, 1.0], [toks[0], toks[1], [9, 9, 9, 8]], drafted=2, accepted=1),
               "suffix:12": _run("suffix:12", [], [], ok=False)}
    out = analyse_vllm(results, {"p0": toks[0], "p1": toks[1], "p2": toks[2]})
    rows = {r["config"]: r for r in out["configs"]}
    assert rows["plain"]["speedup"] == pytest.approx(1.0)
    assert rows["verispec:12"]["speedup"] == pytest.approx((12 / 3.0) / (12 / 4.0))
    assert rows["verispec:12"]["per_category"]["code"]["speedup"] == pytest.approx(2.0)
    assert rows["verispec:12"]["per_category"]["chat"]["speedup"] == pytest.approx(1.0)
    assert rows["verispec:12"]["acceptance"] == pytest.approx(9 / 12) and rows["verispec:12"]["outputs_equal"]
    assert rows["ngram:3"]["outputs_equal"] is False and rows["ngram:3"]["mismatches"] == ["p2"]
    assert not rows["suffix:12"]["ok"] and "ImportError" in rows["suffix:12"]["error"]
    assert out["plain_equals_verispec_target_only"] is True and out["categories"] == ["code", "chat"]
