"""An EAGLE drafter's new rows: their prompts go through the head on their own when they join, so the
rows already running never feed a pass as wide as a new prompt (at 8 rows that cost more than
speculation gained), and a row's drafts are the same whether it joined a running batch or ran alone."""

from __future__ import annotations

import pytest
import torch

from verispec import SamplingParams, SpeculativeDecoder
from verispec.drafters import EagleDrafter
from verispec.engine import Request
from verispec.models.kernels import InvariantKernelsUnavailable, invariant_kernels
from verispec.testing import tiny_eagle, tiny_llama

LONG = "the quick brown fox jumps over the lazy dog " * 3


@pytest.fixture()
def target():  # type: ignore[no-untyped-def]
    lm = tiny_llama(seed=2, dtype=torch.float32, hidden=64, heads=4, kv_heads=2)
    try:
        invariant_kernels(lm.model)
    except InvariantKernelsUnavailable as e:
        pytest.skip(str(e))
    return lm


def _widths(drafter: EagleDrafter) -> list[int]:
    """Record the width (tokens per row) of every pass the drafter's head runs from now on."""
    seen: list[int] = []
    forward = drafter.runner.forward

    def spy(tokens, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(tokens.shape[1])
        return forward(tokens, *args, **kwargs)
    drafter.runner.forward = spy  # type: ignore[method-assign]
    return seen


def test_a_joining_prompt_never_widens_the_running_rows_pass(target) -> None:  # type: ignore[no-untyped-def]
    """After a long prompt joins two running rows, every pass of the head that carries the running
    rows is at most K + 1 tokens wide; the prompt went through a runner of its own."""
    drafter = EagleDrafter(tiny_eagle(target, seed=3))
    dec = SpeculativeDecoder(target, drafter, k=4)
    greedy = SamplingParams(temperature=0)
    state = dec.start([Request("ab ab", 40, greedy, request_id="a"), Request("xyz", 40, greedy, request_id="b")])
    for _ in range(3):
        dec.step(state)
    n_prompt = len(target.tokenizer(LONG, add_special_tokens=False)["input_ids"])
    assert n_prompt > 20
    seen = _widths(drafter)
    dec.add(state, [Request(LONG, 20, greedy, request_id="c")])
    joined = drafter.runner  # the runner after the join (extend keeps the object)
    for _ in range(3):
        dec.step(state)
    assert seen and max(seen) <= 4 + 1, seen
    assert joined is drafter.runner


def test_a_row_drafts_the_same_joining_a_batch_or_alone(target) -> None:  # type: ignore[no-untyped-def]
    """A seeded sampled request's tokens (which depend on its drafts' q) are the same when it joins
    two running requests as when it runs alone."""
    me = SamplingParams(temperature=0.9, seed=5)

    def run(join: bool) -> list[int]:
        dec = SpeculativeDecoder(target, EagleDrafter(tiny_eagle(target, seed=3)), k=3)
        reqs = [Request("ab ab", 30, SamplingParams(temperature=0.7, seed=1), request_id="a"),
                Request("xyz", 30, SamplingParams(temperature=0), request_id="b")] if join else []
        state = dec.start(reqs)
        for _ in range(2 if join else 0):
            dec.step(state)
        dec.add(state, [Request(LONG, 24, me, request_id="me")])
        out: list[int] = []
        while len(state):
            for o in dec.step(state):
                if o.request_id == "me" and o.finished:
                    out = list(o.completion.token_ids)
        return out
    alone, joined = run(False), run(True)
    assert alone and alone == joined
