"""The verispec proposer inside a real vLLM engine on SmolLM2-135M (``make test-vllm``).

Run with the python of the vLLM environment (``.venv-vllm``); skipped where vllm is not
importable (``make test``). Each engine runs in its own process (vLLM starts worker processes),
through the script ``verispec bench --compare vllm`` runs. ``$VERISPEC_VLLM_MODEL``: the model
directory (``make test-vllm`` prepares verispec's built-in one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm", reason="vllm is not installed here (make test-vllm makes .venv-vllm)")

pytestmark = pytest.mark.vllm

SCRIPT = Path(__file__).resolve().parents[2] / "src" / "verispec" / "integrations" / "vllm_bench.py"
PROMPTS = [  # code and a grounded task: prompt lookup finds what to copy
    "Rewrite this function with type hints, keeping the body:\n\ndef total(items):\n    result = 0\n"
    "    for item in items:\n        result = result + item.price * item.count\n    return result\n",
    "Say hello.",
    "List the keys of this JSON object, one per line: {\"name\": \"Ada\", \"year\": 1843, \"field\": \"mathematics\","
    " \"known_for\": \"the first program\"}",
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    model = os.environ.get("VERISPEC_VLLM_MODEL") or str(Path.home() / ".cache" / "verispec" / "smollm2-135m")
    if not (Path(model) / "config.json").is_file():
        pytest.skip(f"no model directory at {model} (make test-vllm prepares it; or set VERISPEC_VLLM_MODEL)")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    prompts = [{"id": f"p{i}", "category": "test",
                "token_ids": list(tok.apply_chat_template([{"role": "user", "content": text}],
                                                          add_generation_prompt=True, tokenize=True,
                                                          return_dict=False))}
               for i, text in enumerate(PROMPTS)]
    d = tmp_path_factory.mktemp("vllm")
    (d / "prompts.json").write_text(json.dumps(prompts))
    return d, model


def run(workdir, config: str, *extra: str, tokens: int = 64) -> dict:
    d, model = workdir
    out = d / f"{config.replace(':', '-')}{'-'.join(extra)}.json"
    cmd = [sys.executable, str(SCRIPT), "--model", model, "--prompts", str(d / "prompts.json"), "--config", config,
           "--out", str(out), "--max-new-tokens", str(tokens), "--eager", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["ok"], result.get("traceback") or result.get("error")
    return result


def test_greedy_output_equals_vllm_plain_and_drafts_are_accepted(workdir):
    plain = run(workdir, "plain")
    spec = run(workdir, "verispec:8")
    assert [p["tokens"] for p in spec["prompts"]] == [p["tokens"] for p in plain["prompts"]]
    drafted = sum(p["draft_tokens"] for p in spec["prompts"])
    accepted = sum(p["accepted"] for p in spec["prompts"])
    assert drafted > 0 and accepted > 0, (drafted, accepted)  # vLLM's own counters
    assert sum(p["draft_tokens"] for p in plain["prompts"]) == 0
    stats = spec["proposer"]  # written by the proposer in vLLM's worker
    assert stats["drafted"] > 0 and stats["steps"] > 0 and stats["step_seconds"]


def test_a_request_finishes_early_and_one_joins_late(workdir):
    res = run(workdir, "verispec:8", "--join-late", tokens=48)
    batch, alone = res["batch"], res["alone"]
    assert set(batch) == {"long", "short", "late"}
    assert len(batch["short"]["tokens"]) <= 6 and batch["short"]["finished_step"] < batch["long"]["finished_step"]
    assert batch["late"]["finished_step"] > batch["short"]["finished_step"]
    for rid in batch:  # in a changing batch, each request's greedy text is the one it has alone
        assert batch[rid]["tokens"] == alone[rid], rid
    assert res["counters"]["vllm:spec_decode_num_accepted_tokens"] > 0


def test_a_bad_config_is_refused_by_name(workdir):
    d, model = workdir
    proc = subprocess.run([sys.executable, str(SCRIPT), "--model", model, "--prompts", str(d / "prompts.json"),
                           "--config", "verispec:0", "--out", str(d / "bad.json")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0 and "--config" in proc.stderr
