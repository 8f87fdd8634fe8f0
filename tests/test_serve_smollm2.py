"""`verispec serve` on the built-in pair (SmolLM2-135M-Instruct, the default eagle+ngram drafter,
k=auto): greedy and gumbel answers, alone and four at once, equal target-only decoding in this
process (slow: loads the real model twice)."""

from __future__ import annotations

import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

from verispec import SamplingParams, SpeculativeDecoder, load_causal_lm
from verispec.engine import Request

from test_serve import Server

pytestmark = pytest.mark.slow

PROMPTS = ["Name three colours.", "Write a haiku about caches.", "What is 12 times 7?", "Say hello in French."]


def test_smollm2_answers_equal_target_only(tmp_path):
    srv = Server("smollm2-135m", "default", tmp_path / "smollm2.log", "--max-batch", "4")
    try:
        lm = load_causal_lm("smollm2-135m")
        plain = SpeculativeDecoder(lm, None)

        def want(content: str, sampling: SamplingParams, method: str) -> str:
            req = Request(content, 24, sampling, method=method, chat=True)
            return next(o.completion.text for o in plain.run([req]) if o.completion is not None)

        cases = [(p, {"temperature": 0}, SamplingParams(temperature=0), "exact") for p in PROMPTS[:2]] + \
                [(p, {"temperature": 0.8, "seed": 5, "extra_body": {"method": "gumbel"}},
                  SamplingParams(temperature=0.8, seed=5), "gumbel") for p in PROMPTS[2:]]

        def ask(case):
            content, fields, _, _ = case
            r = srv.client.chat.completions.create(model="smollm2-135m", max_completion_tokens=24,
                                                   messages=[{"role": "user", "content": content}], **fields)
            return r.choices[0].message.content, r.choices[0].model_extra["verispec"]

        alone = [ask(c) for c in cases]
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(ask, cases))
        for (content, _, sampling, method), (a, va), (t, _) in zip(cases, alone, together):
            assert a == t == want(content, sampling, method), content
        assert sum(v["drafted"] for _, v in alone) > 0 and sum(v["accepted"] for _, v in alone) > 0
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(60) == 0
    finally:
        srv.kill()
