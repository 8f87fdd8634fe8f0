"""`verispec serve` end to end: a live server subprocess on 127.0.0.1, the official openai client.

Two servers over the same tiny float64 models (target + a 1-layer draft model, context widened to
4096 so that a long request runs for a while): ``server`` (max batch 8, a verify budget small
enough that greedy / gumbel rows get their drafts capped once 4 rows run) and ``small``
(max batch 1, queue 1) for the queue-full and shutdown paths. Every text is compared with the
engine run in this process on the same files, one request alone (``solo``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
import torch

from verispec.drafters import make_drafter
from verispec.engine import Request, SpeculativeDecoder
from verispec.models import load_causal_lm
from verispec.sampling import SamplingParams
from verispec.testing import EOS_ID, save_tiny_llama

CONTEXT = 4096
MODEL = "target"
STARTUP_S = 120.0
TINY = ("--k", "3", "--dtype", "float64", "--threads", "1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _widen(path: Path, no_eos: bool = False) -> Path:
    """A context of CONTEXT tokens; ``no_eos``: an output head whose EOS row is zero and the others
    6x larger, so EOS (logit 0 against a top logit of about +16) practically never comes and a
    long request runs its whole length (the other distributions stay spread)."""
    cfg = path / "config.json"
    c = json.loads(cfg.read_text())
    c["max_position_embeddings"] = CONTEXT
    cfg.write_text(json.dumps(c))
    if no_eos:
        from safetensors.torch import load_file, save_file

        weights = load_file(path / "model.safetensors")
        head = weights["lm_head.weight"] * 6
        head[EOS_ID] = 0
        weights["lm_head.weight"] = head
        save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    return path


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-models")
    target = _widen(save_tiny_llama(root / MODEL, vocab_size=64, seed=0, dtype=torch.float64,
                                    tie_word_embeddings=False), no_eos=True)
    draft = _widen(save_tiny_llama(root / "draft", vocab_size=64, seed=1, layers=1, dtype=torch.float64))
    return target, draft


class Server:
    """A ``verispec serve`` subprocess; always killed by its fixture."""

    def __init__(self, target: Path | str, draft: Path | str, log: Path, *extra: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self._log = open(log, "w")
        cmd = [sys.executable, "-m", "verispec.cli", "serve", "--target", str(target), "--draft", str(draft),
               "--port", str(self.port), *extra]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=os.environ.copy())
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert self.proc.poll() is None, f"server exited at startup:\n{log.read_text()}"
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"server not up in {STARTUP_S} s:\n{log.read_text()}"
            time.sleep(0.2)
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=60)

    def metric(self, name: str) -> float:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


@pytest.fixture(scope="module")
def server(model_dirs, tmp_path_factory):
    target, draft = model_dirs
    srv = Server(target, draft, tmp_path_factory.mktemp("logs") / "server.log", *TINY, "--max-batch", "8",
                 "--max-queue", "64", "--verify-budget", "8")
    try:
        yield srv
    finally:
        srv.kill()


@pytest.fixture(scope="module")
def engine(model_dirs):
    """The engine in this process, on the same files and settings as the server."""
    target, draft = model_dirs
    lm = load_causal_lm(str(target), dtype=torch.float64)
    spec = SpeculativeDecoder(lm, make_drafter(str(draft), target=str(target), dtype=torch.float64), k=3)
    plain = SpeculativeDecoder(lm, None)
    return spec, plain


def solo(decoder: SpeculativeDecoder, prompt, max_tokens: int, sampling: SamplingParams, method: str = "exact",
         stop=(), chat: bool = False) -> str:
    """The request alone through the engine's step API."""
    outs = [o for o in decoder.run([Request(prompt, max_tokens, sampling, stop=list(stop), method=method, chat=chat)])
            if o.completion is not None]
    return outs[0].completion.text


CONFIGS = [  # (name, body fields, SamplingParams, method)
    ("greedy", {"temperature": 0}, SamplingParams(temperature=0), "exact"),
    ("exact", {"temperature": 0.9, "seed": 7}, SamplingParams(temperature=0.9, seed=7), "exact"),
    ("gumbel", {"temperature": 1.0, "seed": 3, "method": "gumbel"}, SamplingParams(temperature=1.0, seed=3),
     "gumbel"),
    ("filtered", {"temperature": 0.8, "seed": 11, "top_p": 0.9, "top_k": 20, "min_p": 0.02},
     SamplingParams(temperature=0.8, seed=11, top_p=0.9, top_k=20, min_p=0.02), "exact"),
]


def _extra(fields: dict) -> tuple[dict, dict]:
    """OpenAI's fields as arguments, verispec's as extra_body."""
    own = {k: fields[k] for k in ("top_k", "min_p", "method", "draft") if k in fields}
    return {k: v for k, v in fields.items() if k not in own}, own


def _complete(srv: Server, prompt: str, fields: dict, max_tokens: int = 24, stream: bool = False, stop=None):
    args, own = _extra(fields)
    kw = dict(model=MODEL, prompt=prompt, max_tokens=max_tokens, extra_body=own or None, stop=stop, **args)
    if not stream:
        r = srv.client.completions.create(**kw)
        return r.choices[0].text, r
    chunks = list(srv.client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    return text, chunks


@pytest.mark.parametrize("name, fields, sampling, method", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_completion_equals_engine_streamed_and_not(server, engine, name, fields, sampling, method):
    prompt = "the cat sat on the mat. the cat"
    want = solo(engine[0], prompt, 24, sampling, method)
    text, r = _complete(server, prompt, fields)
    assert text == want
    assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens == len(engine[0].encode([prompt])[0])
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    v = r.choices[0].model_extra["verispec"]
    assert 0 <= v["accepted"] <= v["drafted"] and v["target_passes"] >= 1
    assert r.usage.completion_tokens <= v["accepted"] + v["target_passes"]
    streamed, chunks = _complete(server, prompt, fields, stream=True)
    assert streamed == text
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens  # include_usage: the last chunk
    assert len({c.id for c in chunks}) == 1
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [r.choices[0].finish_reason]


def test_stop_strings_and_token_id_prompts(server, engine):
    ids = engine[0].encode(["abc abc abc"])[0]
    want = solo(engine[0], ids, 40, SamplingParams(temperature=0.7, seed=5), stop=["e", "q"])
    r = server.client.completions.create(model=MODEL, prompt=ids, max_tokens=40, temperature=0.7, seed=5,
                                         stop=["e", "q"])
    assert r.choices[0].text == want
    streamed, _ = _complete(server, "abc abc abc", {"temperature": 0.7, "seed": 5}, 40, stream=True, stop=["e", "q"])
    assert streamed == want


@pytest.mark.parametrize("stream", [False, True])
def test_chat_equals_engine_chat_template(server, engine, stream):
    content = "Write a haiku about caches."
    want = solo(engine[0], content, 30, SamplingParams(temperature=0.8, seed=9), chat=True)
    kw = dict(model=MODEL, messages=[{"role": "user", "content": content}], max_completion_tokens=30,
              temperature=0.8, seed=9)
    if stream:
        chunks = list(server.client.chat.completions.create(stream=True, **kw))
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        r = server.client.chat.completions.create(**kw)
        text = r.choices[0].message.content
        assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert text == want


def test_draft_none_is_target_only(server, engine):
    prompt = "abcabcabcabc"
    sampling = SamplingParams(temperature=0.9, seed=21)
    text, r = _complete(server, prompt, {"temperature": 0.9, "seed": 21, "draft": "none"}, 32)
    assert text == solo(engine[1], prompt, 32, sampling)  # the decoder without a drafter
    v = r.choices[0].model_extra["verispec"]
    assert v["drafted"] == 0 and v["accepted"] == 0 and v["target_passes"] == r.usage.completion_tokens
    _, with_draft = _complete(server, prompt, {"temperature": 0.9, "seed": 21}, 32)
    assert with_draft.choices[0].model_extra["verispec"]["drafted"] > 0


def test_models_health_metrics(server):
    models = server.client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert httpx.get(server.url + "/health", timeout=10).json() == {"status": "ok"}
    text = httpx.get(server.url + "/metrics", timeout=10).text
    for name in ("verispec:num_requests_running", "verispec:num_requests_waiting", "verispec:batch_size_bucket",
                 "verispec:prompt_tokens_total", "verispec:generation_tokens_total",
                 "verispec:time_to_first_token_seconds_bucket", "verispec:inter_token_latency_seconds_bucket",
                 "verispec:spec_decode_num_drafts_total", "verispec:spec_decode_num_draft_tokens_total",
                 "verispec:spec_decode_num_accepted_tokens_total",
                 "verispec:spec_decode_num_accepted_tokens_per_pos_total"):
        assert name in text, name


def test_load_mixed_clients_match_solo_runs(server, engine):
    """8 clients x 4 requests at once, greedy / seeded exact / gumbel / streamed: every text equals
    its solo run, every request answered exactly once."""
    kinds = [("greedy", {"temperature": 0}, SamplingParams(temperature=0), "exact", False),
             ("exact", {"temperature": 0.9}, None, "exact", False),
             ("gumbel", {"temperature": 1.0, "method": "gumbel"}, None, "gumbel", False),
             ("stream", {"temperature": 0.7}, None, "exact", True)]
    jobs = []
    for c in range(8):
        for j in range(4):
            name, fields, sampling, method, stream = kinds[(c + j) % 4]
            seed = 1000 + 10 * c + j
            fields = dict(fields, seed=seed)
            sp = sampling or SamplingParams(temperature=fields["temperature"], seed=seed)
            prompt = f"client {c} request {j}: the quick brown fox {c * j}"
            jobs.append((c, prompt, fields, sp, method, stream, 16 + 4 * j))
    before = server.metric('verispec:request_success_total{finished_reason="length"}') + \
        server.metric('verispec:request_success_total{finished_reason="eos"}')

    def client(c: int) -> list[tuple[str, str, str]]:
        out = []
        for (cc, prompt, fields, _, _, stream, n) in jobs:
            if cc != c:
                continue
            text, r = _complete(server, prompt, fields, n, stream=stream)
            rid = r[0].id if stream else r.id
            out.append((prompt, text, rid))
        return out

    with ThreadPoolExecutor(8) as pool:
        results = [x for xs in pool.map(client, range(8)) for x in xs]
    assert len(results) == 32
    assert len({rid for _, _, rid in results}) == 32  # none duplicated
    got = {p: t for p, t, _ in results}
    assert len(got) == 32  # none lost
    for (_, prompt, _, sp, method, _, n) in jobs:
        assert got[prompt] == solo(engine[0], prompt, n, sp, method), prompt
    after = server.metric('verispec:request_success_total{finished_reason="length"}') + \
        server.metric('verispec:request_success_total{finished_reason="eos"}')
    assert after - before == 32
    steps, rows = server.metric("verispec:batch_size_count"), server.metric("verispec:batch_size_sum")
    assert rows > steps  # some steps ran several requests at once
    assert server.metric('verispec:batch_size_bucket{le="8.0"}') == steps  # never more than --max-batch
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


BAD = [  # (endpoint, body, status, param)
    ("completions", {"model": MODEL, "prompt": 123}, 400, "prompt"),
    ("completions", {"model": MODEL}, 400, "prompt"),
    ("completions", {"model": MODEL, "prompt": "a", "max_tokens": "10"}, 400, "max_tokens"),
    ("completions", {"model": MODEL, "prompt": "a", "max_tokens": 0}, 400, "max_tokens"),
    ("completions", {"model": MODEL, "prompt": "a", "max_tokens": -3}, 400, "max_tokens"),
    ("completions", {"model": MODEL, "prompt": "a", "max_tokens": CONTEXT}, 400, "max_tokens"),
    ("completions", {"model": MODEL, "prompt": "x" * (CONTEXT + 10), "max_tokens": 1}, 400, "prompt"),
    ("completions", {"model": MODEL, "prompt": [1, 2, 999]}, 400, "prompt"),
    ("completions", {"model": MODEL, "prompt": "a", "temperature": -0.5}, 400, "temperature"),
    ("completions", {"model": MODEL, "prompt": "a", "temperature": "hot"}, 400, "temperature"),
    ("completions", {"model": MODEL, "prompt": "a", "top_p": 0}, 400, "top_p"),
    ("completions", {"model": MODEL, "prompt": "a", "top_p": 1.5}, 400, "top_p"),
    ("completions", {"model": MODEL, "prompt": "a", "top_k": -5}, 400, "top_k"),
    ("completions", {"model": MODEL, "prompt": "a", "min_p": 1.0}, 400, "min_p"),
    ("completions", {"model": MODEL, "prompt": "a", "seed": 2**64}, 400, "seed"),
    ("completions", {"model": MODEL, "prompt": "a", "stop": 5}, 400, "stop"),
    ("completions", {"model": MODEL, "prompt": "a", "n": 2}, 400, "n"),
    ("completions", {"model": MODEL, "prompt": "a", "stream": "yes"}, 400, "stream"),
    ("completions", {"model": MODEL, "prompt": "a", "method": "beam"}, 400, "method"),
    ("completions", {"model": MODEL, "prompt": "a", "draft": "eagle9"}, 400, "draft"),
    ("completions", {"model": MODEL, "prompt": "a", "logprobs": 3}, 400, "logprobs"),
    ("completions", {"model": "gpt-4", "prompt": "a"}, 404, "model"),
    ("completions", ["not", "an", "object"], 400, None),
    ("chat/completions", {"model": MODEL}, 400, "messages"),
    ("chat/completions", {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0]"),
    ("chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                          "max_completion_tokens": 0}, 400, "max_completion_tokens"),
    ("chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "n": 3}, 400, "n"),
]


def test_bad_requests_never_reach_the_engine(server):
    generated = server.metric("verispec:generation_tokens_total")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        r = http.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
        for endpoint, body, status, param in BAD:
            r = http.post(f"/v1/{endpoint}", json=body)
            assert r.status_code == status, (body, r.text)
            err = r.json()["error"]
            assert set(err) == {"message", "type", "param", "code"} and err["message"], err
            assert err["param"] == param, (body, err)
        assert http.get("/v1/nowhere").json()["error"]["code"] == "not_found"
        assert server.metric("verispec:generation_tokens_total") == generated  # nothing reached the engine
        assert http.get("/health").status_code == 200
    with pytest.raises(openai.BadRequestError):
        server.client.completions.create(model=MODEL, prompt="a", max_tokens=0)
    with pytest.raises(openai.NotFoundError):
        server.client.completions.create(model="nope", prompt="a", max_tokens=2)
    text, _ = _complete(server, "still serving", {"temperature": 0}, 8)
    assert text


def _wait_for(cond, what: str, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_disconnecting_clients_free_their_rows(server):
    aborted = server.metric("verispec:request_aborted_total")
    body = {"model": MODEL, "prompt": "a long one", "max_tokens": CONTEXT - 20, "temperature": 0.9, "seed": 1}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        with http.stream("POST", "/v1/completions", json=dict(body, stream=True)) as r:
            lines = r.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert json.loads(first[6:])["choices"][0]["text"]  # it is running
        # leaving the block closes the connection mid-stream
    _wait_for(lambda: server.metric("verispec:request_aborted_total") == aborted + 1, "stream not cancelled")
    with pytest.raises(httpx.ReadTimeout):  # a non-streamed request whose client gives up
        httpx.post(server.url + "/v1/completions", json=body, timeout=httpx.Timeout(30, read=0.5))
    _wait_for(lambda: server.metric("verispec:request_aborted_total") == aborted + 2, "request not cancelled")
    _wait_for(lambda: server.metric("verispec:num_requests_running") == 0, "rows not freed")
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
    text, _ = _complete(server, "after the disconnects", {"temperature": 0}, 8)
    assert text


@pytest.fixture()
def small(model_dirs, tmp_path):
    target, draft = model_dirs
    srv = Server(target, draft, tmp_path / "small.log", *TINY, "--max-batch", "1", "--max-queue", "1",
                 "--drain-timeout", "3")
    try:
        yield srv
    finally:
        srv.kill()


def test_full_queue_429_then_sigterm_drains_and_exits_0(small):
    long = {"model": MODEL, "prompt": "go", "max_tokens": CONTEXT - 10, "temperature": 0.9, "seed": 2,
            "stream": True}
    with httpx.Client(base_url=small.url, timeout=30) as http:
        with http.stream("POST", "/v1/completions", json=long) as running:
            lines = running.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))  # admitted: the one row
            with http.stream("POST", "/v1/completions", json=dict(long, seed=3)) as queued:
                assert queued.status_code == 200  # in the queue (headers come before any token)
                with httpx.Client(base_url=small.url, timeout=30) as other:
                    full = other.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2})
                    assert full.status_code == 429, full.text
                    assert full.json()["error"]["type"] == "rate_limit_error"
        _wait_for(lambda: small.metric("verispec:num_requests_running") == 0
                  and small.metric("verispec:num_requests_waiting") == 0, "closed streams not cancelled")
        assert http.get("/health").status_code == 200
        assert http.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 3}).status_code == 200

        # shutdown: an in-flight request, then SIGTERM; new requests get 503 while it drains
        with http.stream("POST", "/v1/completions", json=long) as inflight:
            lines = inflight.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            small.proc.send_signal(signal.SIGTERM)
            with httpx.Client(base_url=small.url, timeout=30) as other:
                r = other.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 2})
                assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down", r.text
                assert other.get("/health").status_code == 503
            rest = [line for line in lines if line.startswith("data: ")]  # finished or cancelled at the bound
            assert rest[-1] == "data: [DONE]"
    assert small.proc.wait(60) == 0
    assert "draining" in small.log_path.read_text()


def test_loadgen_reports_each_level(server, tmp_path):
    from verispec.serve.loadgen import main as loadgen

    out = tmp_path / "load.json"
    assert loadgen(["--url", server.url, "--workload", "code,qa", "--limit", "1", "--concurrency", "1,2",
                    "--max-tokens", "8", "--repeats", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    results = report["results"]
    assert [(r["spec"], r["concurrency"]) for r in results] == [("on", 1), ("off", 1), ("on", 2), ("off", 2)]
    for r in results:  # two prompts, two repeats, pooled
        assert r["requests"] == 4 and r["repeats"] == 2 and r["failed"] == 0 and r["output_tok_s"] > 0
        assert r["ttft_p50_ms"] > 0 and r["itl_p50_ms"] > 0
    assert all(r["mean_k"] > 0 for r in results if r["spec"] == "on")
    assert all(r["mean_k"] == 0 and r["tau"] == 1 for r in results if r["spec"] == "off")
    for c, on, off in ((c, *(r for r in results if r["concurrency"] == c)) for c in (1, 2)):
        ratio = report["on_over_off"][str(c)]
        assert ratio["pooled"] == pytest.approx(on["output_tok_s"] / off["output_tok_s"])
        assert ratio["lowest"] <= ratio["highest"]


def test_sigterm_exits_0(server):
    """Last in this module: the shared server stops cleanly on SIGTERM when idle."""
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(60) == 0
