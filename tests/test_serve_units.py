"""The serve layer's parts in-process: per-row draft caps and the scheduler thread (no HTTP)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from verispec.drafters import ModelDrafter
from verispec.engine import Request, SpeculativeDecoder
from verispec.sampling import SamplingParams
from verispec.serve.drafting import NO_CAP, CappedDrafter, load_cap
from verispec.serve.protocol import APIError, CompletionSpec, parse_request
from verispec.serve.scheduler import Job, Scheduler


def test_load_cap_turns_drafting_down_as_the_batch_grows():
    assert load_cap(1, 0) == load_cap(64, 0) == NO_CAP  # budget 0: never
    assert [load_cap(b, 32) for b in (1, 2, 4, 8, 16, 32, 64)] == [31, 15, 7, 3, 1, 0, 0]


def test_capped_drafter_caps_each_row_and_counts_its_drafts(tiny_target, tiny_draft):
    capped = CappedDrafter(ModelDrafter(tiny_draft))
    dec = SpeculativeDecoder(tiny_target, capped, k=3)
    sp = SamplingParams(temperature=0.9, seed=4)
    state = dec.start([Request("abc", 20, sp, request_id=i) for i in range(3)])
    dec.step(state)  # the first tokens
    capped.caps = torch.tensor([0, 2, NO_CAP])
    dec.step(state)
    assert capped.drafted() == [0, 2, 3]
    capped.caps = None
    dec.step(state)
    assert capped.drafted() is None  # uncapped steps are not counted


def test_zero_cap_is_target_only_text(tiny_target, tiny_draft):
    """A row capped to 0 every step ("draft": "none") gets the text of a decoder without a drafter."""
    sp = SamplingParams(temperature=1.0, seed=8)
    capped = CappedDrafter(ModelDrafter(tiny_draft))
    dec = SpeculativeDecoder(tiny_target, capped, k=3)
    state = dec.start([Request("hello", 24, sp, request_id="off"), Request("hello", 24, sp, request_id="on")])
    done = {}
    for _ in range(100):
        if not len(state):
            break
        capped.caps = torch.tensor([0 if r.request_id == "off" else NO_CAP for r in state.rows])
        for o in dec.step(state):
            if o.completion is not None:
                done[o.request_id] = o.completion.text
    plain = SpeculativeDecoder(tiny_target, None).generate(["hello"], 24, sp).texts[0]
    spec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k=3).generate(["hello"], 24, sp).texts[0]
    assert done["off"] == plain
    assert done["on"] == spec


def _spec(ids, n=8, **kw) -> CompletionSpec:
    return CompletionSpec(False, "m", list(ids), n, SamplingParams(temperature=0), **kw)


class Events:
    def __init__(self) -> None:
        self.got: list[tuple] = []
        self.done = threading.Event()

    def __call__(self, ev: tuple) -> None:
        self.got.append(ev)
        if ev[0] in ("done", "error"):
            self.done.set()


@pytest.fixture()
def sched(tiny_target, tiny_draft):
    s = Scheduler(SpeculativeDecoder(tiny_target, CappedDrafter(ModelDrafter(tiny_draft)), k=3), max_batch=2,
                  max_queue=2)
    s.start()
    assert s.ready.wait(60) and s.failed is None
    try:
        yield s
    finally:
        s.stop()


def test_scheduler_answers_each_job_once_and_refuses_a_full_queue(sched, tiny_target):
    dec = SpeculativeDecoder(tiny_target, None)
    with sched._cond:  # hold the thread so that the queue fills
        events = [Events() for _ in range(3)]
        jobs = [Job(f"j{i}", _spec([5 + i, 6, 7], 10), e) for i, e in enumerate(events)]
        assert [sched.submit(j) for j in jobs] == ["ok", "ok", "full"]
    for e in events[:2]:
        assert e.done.wait(60)
    for i, e in enumerate(events[:2]):
        assert [ev[0] for ev in e.got] == ["done"]
        want = dec.generate([[5 + i, 6, 7]], 10, SamplingParams(temperature=0)).texts[0]
        assert e.got[0][1].text == want
        stats = e.got[0][2]
        assert stats["target_passes"] >= 1 and 0 <= stats["accepted"] <= stats["drafted"]
    assert events[2].got == []


def test_scheduler_cancels_queued_and_running_jobs_and_drains(sched, tiny_target):
    long = SpeculativeDecoder(tiny_target, None).generate([[5, 9], [6, 6]], 400, SamplingParams(temperature=0))
    assert long.finish_reasons == ["length", "length"]
    with sched._cond:
        a, b = Events(), Events()
        # greedy on these prompts runs all 400 tokens (no EOS; checked below)
        assert sched.submit(Job("a", _spec([5, 9], 400), a)) == "ok"
        assert sched.submit(Job("b", _spec([6, 6], 400), b)) == "ok"
        sched.cancel("b")  # still queued
    sched.cancel("a")  # queued or running by now
    for _ in range(600):  # bounded: 60 s
        if sched.metrics.aborted._value.get() == 2:
            break
        time.sleep(0.1)
    assert sched.metrics.aborted._value.get() == 2
    c = Events()
    assert sched.submit(Job("c", _spec([9], 5), c)) == "ok"
    assert c.done.wait(60) and c.got[-1][0] == "done"
    sched.drain(0.0)
    assert sched.submit(Job("d", _spec([9], 5), Events())) == "closed"
    sched.join(60)
    assert not sched._thread.is_alive()
    assert a.got == b.got == []  # cancelled by their clients: nothing more is sent to them


def test_parse_request_refuses_before_the_engine(tiny_target):
    tok = tiny_target.tokenizer
    kw = dict(chat=False, model_name="m", tokenizer=tok, vocab_size=64, context=32, drafter_name="ngram")
    ok = parse_request({"model": "m", "prompt": "abc", "max_tokens": 5, "temperature": 0}, **kw)
    assert ok.prompt_ids == tok("abc")["input_ids"] and ok.max_tokens == 5 and ok.sampling.greedy
    for body, param in [({"prompt": "abc", "max_tokens": 40}, "max_tokens"), ({"prompt": "x" * 40}, "prompt"),
                        ({"prompt": "a", "temperature": 1e-6}, "temperature"), ({"prompt": "a", "draft": "eagle"}, "draft"),
                        ({"prompt": "a", "stream_options": {"include_usage": True}}, "stream_options")]:
        with pytest.raises(APIError) as e:
            parse_request(body, **kw)
        assert e.value.param == param and e.value.status == 400


@pytest.mark.parametrize("args, message", [(["--k", "fast"], "--k"), (["--k", "0"], "--k"),
                                           (["--max-batch", "0"], "--max-batch"), (["--port", "70000"], "--port")])
def test_serve_command_refuses_bad_options(args, message, capsys):
    from verispec.cli import main

    assert main(["serve", "--target", "/nonexistent/model", *args]) == 2
    assert message in capsys.readouterr().err


def test_verify_budget_is_an_explicit_cap_off_by_default():
    """Turning drafting down under load is the engine's K policy's job (tests/test_batch_costs.py);
    ``--verify-budget`` stays as a cap the user asks for, 0 (none) unless given."""
    import argparse

    from verispec.serve.loadgen import _parser
    from verispec.serve.options import add_serve_arguments

    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    assert p.parse_args([]).verify_budget == 0
    assert p.parse_args(["--verify-budget", "32"]).verify_budget == 32
    assert _parser("x").parse_args([]).verify_budget == 0


def test_the_cost_table_is_timed_before_serving(tiny_target, tiny_draft, monkeypatch):
    """A k="auto" server times its cost table before it reports ready, so no request pays for the
    timing (the decoder alone times it when the first "auto" row joins an empty batch)."""
    from verispec.engine import decoder as decoder_module
    from verispec.engine.costs import PassCosts

    calls = []

    def fake(target, drafter, max_width):
        calls.append(time.perf_counter())
        return PassCosts({1: 1.0, 2: 1.05}, draft_step=0.05)

    monkeypatch.setattr(decoder_module, "measure_pass_costs", fake)
    s = Scheduler(SpeculativeDecoder(tiny_target, CappedDrafter(ModelDrafter(tiny_draft)), k="auto"))
    s.start()
    try:
        assert s.ready.wait(60) and s.failed is None
        assert len(calls) == 1  # before any request
        e = Events()
        assert s.submit(Job("a", _spec([5, 6, 7], 6), e)) == "ok"
        assert e.done.wait(60) and [ev[0] for ev in e.got] == ["done"]
        assert len(calls) == 1
    finally:
        s.stop()


def test_an_engine_failure_answers_500_and_the_scheduler_keeps_serving(sched, monkeypatch):
    """A prefill or a step that raises (not a validation error) fails the requests it touched with
    500; the thread survives and the next request is answered."""
    dec = sched.decoder
    real_add, real_step = dec.add, dec.step
    for name, real in (("add", real_add), ("step", real_step)):
        def broken(*args, **kwargs):
            raise RuntimeError(f"{name} broke")
        monkeypatch.setattr(dec, name, broken)
        e = Events()
        assert sched.submit(Job(f"bad-{name}", _spec([5, 6, 7], 6), e)) == "ok"
        assert e.done.wait(60) and e.got[-1][:2] == ("error", 500) and f"{name} broke" in e.got[-1][2]
        monkeypatch.setattr(dec, name, real)
        ok = Events()
        assert sched.submit(Job(f"ok-{name}", _spec([5, 6, 7], 6), ok)) == "ok"
        assert ok.done.wait(60) and [ev[0] for ev in ok.got] == ["done"]
