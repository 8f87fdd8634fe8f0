"""How good a fresh draft is: its step cost relative to the target's (c), and its acceptance
with the engine on the built-in workloads."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ..models import CausalLM


__all__ = ["measure_acceptance", "measure_cost"]


def _target_step_times(target, ids: list[int], steps: int) -> list[float]:
    """Seconds per one-token greedy target step through ``KVRunner``, after a prefill of ``ids``."""
    from ..kv import KVRunner

    r = KVRunner(target.model, 1)
    r.forward(torch.tensor([ids]))
    tok, ts = torch.tensor([[ids[-1]]]), []
    for _ in range(steps):
        t0 = time.perf_counter()
        tok = r.forward(tok)[:, -1].argmax(-1, keepdim=True)
        ts.append(time.perf_counter() - t0)
    return ts


def _draft_step_times(target, draft, ids: list[int], steps: int) -> list[float]:
    """Seconds per draft token, proposing 4 at a time ``steps // 4`` times, every token accepted."""
    from ..drafters import DraftAsk, ModelDrafter, stand_in_features
    from ..sampling import SamplingParams

    d = draft if hasattr(draft, "propose") else ModelDrafter(draft)
    d.bind(target)
    features = None
    if d.reads_target_features:
        H = target.model.config.hidden_size
        features = [stand_in_features(d, len(ids) - 1, H, dtype=target.model.dtype)]
    d.start([ids], features)
    ask = DraftAsk.of([4], target.vocab_size, SamplingParams(temperature=0.0))
    ts = []
    for _ in range(steps // 4):
        t0 = time.perf_counter()
        out = d.propose(ask)
        ts.append((time.perf_counter() - t0) / 4)
        toks = out.tokens[0].tolist()  # pretend everything was accepted (+ no bonus)
        if features is not None:  # stand-in features: the cost does not depend on their values
            d.update([toks], features=[stand_in_features(d, len(toks), H, dtype=target.model.dtype)])
        else:
            d.update([toks])
    return ts


def measure_cost(target: CausalLM, draft, prompt: str = "def fibonacci(n):\n    ", steps: int = 48, repeats: int = 3
                 ) -> dict[str, float]:
    """c = draft step time / target step time, one-token steps through verispec's ``KVRunner``
    (``draft``: a drafter, or a model applied with its vocab map as ``ModelDrafter`` does).

    Medians over ``repeats`` interleaved rounds of ``steps`` steps each; returns
    ``target_step_s`` and ``draft_step_s`` (seconds) and ``c``.
    """
    ids = target.tokenizer(prompt)["input_ids"]
    tt, td = [], []
    for _ in range(repeats):
        tt += _target_step_times(target, ids, steps)
        td += _draft_step_times(target, draft, ids, steps)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"target_step_s": med(tt), "draft_step_s": med(td), "c": med(td) / med(tt)}


def measure_acceptance(target: CausalLM, drafter, *, workloads: str = "code,chat,grounded", limit: int = 2,
                       max_new_tokens: int = 48, k: int = 4) -> dict[str, dict[str, float]]:
    """alpha (per tested token), draft acceptance and tau of ``drafter`` with the engine (greedy,
    fixed ``k``) on the first ``limit`` prompts of each built-in workload, one batch each of
    ``max_new_tokens`` new tokens; also the drafted and emitted token counts."""
    from ..engine import SpeculativeDecoder
    from ..sampling import SamplingParams
    from ..workloads import load_workload

    out = {}
    dec = SpeculativeDecoder(target, drafter, k=k)
    for name in workloads.split(","):
        prompts = load_workload(name)[:limit]
        room = getattr(target.model.config, "max_position_embeddings", 1 << 30) - max_new_tokens
        ids = [dec.encode([p.text], chat=p.chat)[0][-room:] for p in prompts]  # (tiny test models: short context)
        st = dec.generate(ids, max_new_tokens, SamplingParams(temperature=0.0)).stats
        out[name] = {"alpha": st.alpha, "draft_acceptance": st.draft_acceptance, "tau": st.tau, "drafted": st.drafted,
                     "emitted": st.emitted}
    return out
