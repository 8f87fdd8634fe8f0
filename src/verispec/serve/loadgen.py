"""``verispec bench serve`` (or ``python -m verispec.serve.loadgen``): load a server with the built-in workloads.

Starts ``verispec serve`` on a free loopback port (or targets ``--url``), warms it up (every
prompt once per speculation setting at the highest concurrency, a few tokens each, untimed: a
server's first batches pay for building kernels and shapes), then for each concurrency level runs
the workloads' prompts with that many clients at once, each streaming its answers, once per
speculation setting (``on``: the server's drafter; ``off``: every request sent with ``"draft":
"none"``) and ``--repeats`` times, the settings' order alternating between repeats so that drift
hits both alike. It reports per setting and level, pooled over the repeats: output tokens per
second (all clients' completion tokens over the summed wall time), time to first token and
inter-token latency p50 / p95 (ITL: the gaps between streamed chunks that carry text, over the
tokens between them, as vLLM's benchmark counts them), mean K (draft tokens per target pass,
from the ``verispec`` object of each answer) and tau (tokens per target pass); then on / off per
level, with the lowest and highest ratio of single repeats.

Only the standard library talks HTTP here (``http.client``, one thread per client).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from urllib.parse import urlparse

from ..workloads import load_workload

__all__ = ["main", "run_level", "LevelResult"]


@dataclass
class Answer:
    ok: bool
    ttft: float = float("nan")
    gaps: list[float] = field(default_factory=list)  # seconds per token between text chunks
    tokens: int = 0
    drafted: int = 0
    passes: int = 0
    error: str = ""


@dataclass
class LevelResult:
    spec: str
    concurrency: int
    requests: int
    failed: int
    wall_s: float
    output_tok_s: float
    ttft_p50_ms: float
    ttft_p95_ms: float
    itl_p50_ms: float
    itl_p95_ms: float
    mean_k: float
    tau: float
    repeats: int = 1


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    i = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[i]


def _one(url: str, model: str, prompt, max_tokens: int, temperature: float, spec_on: bool, seed: int | None,
         timeout: float) -> Answer:
    u = urlparse(url)
    chat = prompt.chat
    body = {"model": model, "max_tokens" if not chat else "max_completion_tokens": max_tokens,
            "temperature": temperature, "stream": True, "stream_options": {"include_usage": True}}
    if seed is not None:
        body["seed"] = seed
    if chat:
        body["messages"] = [{"role": "user", "content": prompt.text}]
    else:
        body["prompt"] = prompt.text
    if not spec_on:
        body["draft"] = "none"
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/v1/chat/completions" if chat else "/v1/completions", json.dumps(body),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return Answer(False, error=f"HTTP {r.status}: {r.read()[:200]!r}")
        ans = Answer(True)
        last = None
        pending_chunks: list[float] = []  # times of text chunks
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                break
            obj = json.loads(data)
            if "error" in obj:
                return Answer(False, error=str(obj["error"].get("message")))
            for c in obj.get("choices", []):
                text = c.get("text") if not chat else (c.get("delta") or {}).get("content")
                if text:
                    now = time.perf_counter()
                    if last is None:
                        ans.ttft = now - t0
                    pending_chunks.append(now)
                    last = now
                v = c.get("verispec")
                if v:
                    ans.drafted, ans.passes = int(v["drafted"]), int(v["target_passes"])
            if obj.get("usage"):
                ans.tokens = int(obj["usage"]["completion_tokens"])
        # ITL: chunk gaps spread over the tokens they carried (the first chunk's tokens are in the TTFT)
        if len(pending_chunks) > 1 and ans.tokens > 1:
            per_chunk = (ans.tokens - 1) / (len(pending_chunks) - 1)
            for a, b in zip(pending_chunks, pending_chunks[1:]):
                ans.gaps.append((b - a) / per_chunk)
        return ans
    except (OSError, http.client.HTTPException, ValueError) as e:
        return Answer(False, error=f"{type(e).__name__}: {e}")
    finally:
        conn.close()


def _answers(url: str, model: str, prompts: list, concurrency: int, spec_on: bool, max_tokens: int,
             temperature: float, timeout: float = 600.0, seeded: bool = True) -> tuple[list[Answer], float]:
    """All ``prompts`` through ``concurrency`` clients at once (each client takes the next prompt;
    prompt i is sent with seed i, or none): the answers and the wall time in seconds."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        answers = list(pool.map(lambda ip: _one(url, model, ip[1], max_tokens, temperature, spec_on,
                                                ip[0] if seeded else None, timeout), enumerate(prompts)))
    wall = time.perf_counter() - t0
    for a in answers:
        if not a.ok:
            print(f"  request failed: {a.error}", file=sys.stderr)
    return answers, wall


def _pooled(spec_on: bool, concurrency: int, runs: list[tuple[list[Answer], float]]) -> LevelResult:
    """One level's result over ``runs`` (answers, wall seconds) of the same prompts."""
    answers = [a for run, _ in runs for a in run]
    wall = sum(w for _, w in runs)
    good = [a for a in answers if a.ok]
    tokens = sum(a.tokens for a in good)
    passes = sum(a.passes for a in good)
    ttft = [a.ttft for a in good if a.ttft == a.ttft]
    itl = [g for a in good for g in a.gaps]
    return LevelResult("on" if spec_on else "off", concurrency, len(answers), len(answers) - len(good), wall,
                       tokens / wall if wall > 0 else float("nan"), 1e3 * _pct(ttft, 0.5), 1e3 * _pct(ttft, 0.95),
                       1e3 * _pct(itl, 0.5), 1e3 * _pct(itl, 0.95),
                       sum(a.drafted for a in good) / passes if passes else float("nan"),
                       tokens / passes if passes else float("nan"), len(runs))


def run_level(url: str, model: str, prompts: list, concurrency: int, spec_on: bool, max_tokens: int,
              temperature: float, timeout: float = 600.0) -> LevelResult:
    """All ``prompts`` through ``concurrency`` clients at once (each client takes the next prompt)."""
    return _pooled(spec_on, concurrency, [_answers(url, model, prompts, concurrency, spec_on, max_tokens,
                                                   temperature, timeout)])


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def _tok_s(run: tuple[list[Answer], float]) -> float:
    answers, wall = run
    return sum(a.tokens for a in answers if a.ok) / wall if wall > 0 else float("nan")


def _line(r: LevelResult) -> str:
    return (f"spec {r.spec:3} x{r.concurrency:<2} {r.output_tok_s:8.1f} tok/s  TTFT p50/p95 "
            f"{r.ttft_p50_ms:7.1f}/{r.ttft_p95_ms:7.1f} ms  ITL p50/p95 {r.itl_p50_ms:6.1f}/"
            f"{r.itl_p95_ms:6.1f} ms  mean K {r.mean_k:4.2f}  tau {r.tau:4.2f}  failed {r.failed}/{r.requests}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def _start_server(args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "verispec.cli", "serve", "--target", args.target, "--draft", args.draft, "--k",
           args.k, "--port", str(port), "--max-batch", str(args.max_batch), "--dtype", args.dtype,
           "--verify-budget", str(args.verify_budget), "--threads", str(args.threads),
           "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + args.startup_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"verispec serve exited with {proc.returncode} at startup")
        try:
            if _get(url, "/health")[0] == 200:
                return proc, url
        except OSError:
            pass
        time.sleep(0.25)
    proc.kill()
    raise RuntimeError(f"verispec serve did not answer /health within {args.startup_timeout} s")


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Load a verispec server with the built-in workloads.")
    p.add_argument("--url", default=None, help="a running server (default: start one with the options below)")
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--draft", default="default")
    p.add_argument("--k", default="auto")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--verify-budget", type=int, default=0,
                   help="the started server's --verify-budget (default 0: no cap, the K policy alone)")
    p.add_argument("--threads", type=int, default=0, help="the started server's --threads (0: torch's default)")
    p.add_argument("--workload", default="all", help="built-in workloads, comma-separated, or 'all'")
    p.add_argument("--limit", type=int, default=2, help="prompts per workload")
    p.add_argument("--concurrency", default="1,2,4,8", help="comma-separated client counts")
    p.add_argument("--spec", default="on,off", help="'on', 'off' or both")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--no-seed", action="store_true",
                   help="send no seed (OpenAI's default; sampled rows then draft less under load, as greedy ones)")
    p.add_argument("--repeats", type=int, default=2,
                   help="runs of each level per setting, the settings' order alternating (default 2)")
    p.add_argument("--warmup-tokens", type=int, default=8,
                   help="tokens per prompt of the untimed warm-up round (0: no warm-up; default 8)")
    p.add_argument("--startup-timeout", type=float, default=300.0)
    p.add_argument("--out", default=None, help="also write the results as JSON here")
    return p


def main(argv: list[str] | None = None, prog: str = "python -m verispec.serve.loadgen") -> int:
    args = _parser(prog).parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    if not levels or any(c < 1 for c in levels):
        raise ValueError(f"--concurrency must be positive ints, got {args.concurrency!r}")
    specs = [s.strip() for s in args.spec.split(",") if s.strip()]
    if not specs or any(s not in ("on", "off") for s in specs):
        raise ValueError(f"--spec takes 'on', 'off' or 'on,off', got {args.spec!r}")
    if args.limit < 1 or args.max_tokens < 1:
        raise ValueError("--limit and --max-tokens must be >= 1")
    if args.repeats < 1 or args.warmup_tokens < 0:
        raise ValueError(f"--repeats must be >= 1 and --warmup-tokens >= 0, got {args.repeats} and "
                         f"{args.warmup_tokens}")
    by_cat: dict[str, list] = {}
    for pr in load_workload(args.workload):
        by_cat.setdefault(pr.category, []).append(pr)
    prompts = [pr for ps in by_cat.values() for pr in ps[: args.limit]]
    proc = None
    url = args.url
    try:
        if url is None:
            proc, url = _start_server(args)
        status, body = _get(url, "/v1/models")
        if status != 200:
            raise RuntimeError(f"{url}/v1/models answered {status}")
        model = json.loads(body)["data"][0]["id"]
        print(f"{len(prompts)} prompts ({args.workload}, {args.limit} per workload), {args.max_tokens} tokens, "
              f"temperature {args.temperature}{', no seed' if args.no_seed else ''}, model {model} at {url}", file=sys.stderr)
        if args.warmup_tokens:
            for spec in specs:  # untimed: the first batches build kernels and shapes
                _answers(url, model, prompts, max(levels), spec == "on", args.warmup_tokens, args.temperature,
                         seeded=not args.no_seed)
        results, ratios = [], {}
        for c in levels:
            runs: dict[str, list] = {s: [] for s in specs}
            for r in range(args.repeats):
                for spec in (specs if r % 2 == 0 else specs[::-1]):
                    runs[spec].append(_answers(url, model, prompts, c, spec == "on", args.max_tokens,
                                               args.temperature, seeded=not args.no_seed))
            for spec in specs:
                res = _pooled(spec == "on", c, runs[spec])
                results.append(res)
                print(_line(res), flush=True)
            if len(specs) == 2:
                single = [_ratio(_tok_s(a), _tok_s(b)) for a, b in zip(runs["on"], runs["off"])]
                on, off = (next(x for x in results[-2:] if x.spec == s) for s in ("on", "off"))
                ratios[c] = (_ratio(on.output_tok_s, off.output_tok_s), min(single), max(single))
                print(f"on / off x{c:<2} {ratios[c][0]:.2f} (repeats {ratios[c][1]:.2f}-{ratios[c][2]:.2f})",
                      flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"args": vars(args), "results": [asdict(r) for r in results],
                           "on_over_off": {str(c): {"pooled": r[0], "lowest": r[1], "highest": r[2]}
                                           for c, r in ratios.items()}}, f, indent=1)
        return 1 if any(r.failed for r in results) else 0
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    sys.exit(main())
