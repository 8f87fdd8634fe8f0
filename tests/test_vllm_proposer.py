"""verispec's prompt lookup as a vLLM proposer (verispec.integrations.vllm), fed with buffers
shaped as vLLM's model runner passes them (no vLLM import): the token buffer
``[max_num_reqs, max_model_len]`` int32, the lengths ``[max_num_reqs]`` int32 (rows past the
batch hold stale values), and the tokens each request emitted this step."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verispec.drafters import DraftAsk, PromptLookupDrafter
from verispec.engine.costs import PassCosts
from verispec.engine.kpolicy import KRows
from verispec.integrations import vllm as plug

K = 5
MAX_REQS, MAX_LEN = 8, 512
# A pass gets dearer with width: the cut keeps some copies and drops others.
COSTS = PassCosts({1: 1.0, 2: 1.12, 3: 1.3, 4: 1.5, 5: 1.75, 6: 2.05})


def config(k: int = K, max_len: int = MAX_LEN):
    return SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=k),
                           model_config=SimpleNamespace(max_model_len=max_len))


class Buffers:
    """The runner's input batch: rows of tokens and lengths, as vLLM keeps them."""

    def __init__(self) -> None:
        self.tokens = np.full((MAX_REQS, MAX_LEN), -7, dtype=np.int32)  # stale garbage past each row
        self.lengths = np.full(MAX_REQS, 99, dtype=np.int32)

    def load(self, rows: list[list[int]]) -> None:
        for b, ctx in enumerate(rows):
            self.tokens[b, : len(ctx)] = ctx
            self.lengths[b] = len(ctx)


def truth_sequence(seed: int, n: int = 260) -> list[int]:
    """Tokens with repeated spans and noise: lookups hit, miss, and run long or short."""
    rng = random.Random(seed)
    spans = [[rng.randrange(2, 40) for _ in range(rng.randrange(3, 12))] for _ in range(6)]
    out: list[int] = []
    while len(out) < n:
        out += rng.choice(spans) if rng.random() < 0.7 else [rng.randrange(2, 9) for _ in range(rng.randrange(1, 5))]
    return out[:n]


def emit(draft: list[int], truth: list[int], n: int) -> list[int]:
    """What a greedy target whose text is ``truth`` emits after a context of ``n`` tokens."""
    acc = 0
    while acc < len(draft) and n + acc < len(truth) and draft[acc] == truth[n + acc]:
        acc += 1
    return truth[n: n + acc + 1]


class Reference:
    """verispec's own engine path for one row: PromptLookupDrafter, then KRows.cut (k="auto")."""

    def __init__(self, ctx: list[int], costs: PassCosts = COSTS) -> None:
        self.lookup = PromptLookupDrafter()
        self.lookup.add([ctx])
        self.costs = costs

    def draft(self, room: int = K) -> list[int]:
        d = self.lookup.propose(DraftAsk.of([room], 1, k_cap=[room]))
        policy = KRows(K)
        policy.add(["auto"])
        n = policy.cut(d.num_draft, d.accept_prob, self.costs)[0] if int(d.num_draft.max()) else d.num_draft
        return d.tokens[0, : int(n[0])].tolist()

    def update(self, emitted: list[int]) -> None:
        self.lookup.update([emitted])


def test_drafts_equal_verispecs_lookup_with_the_cost_cut():
    truth = truth_sequence(1)
    P = 30
    prop = plug.VerispecLookupProposer(config(), costs=COSTS)
    ref = Reference(truth[: P + 1])
    buf = Buffers()
    n, sampled = P + 1, [truth[P]]  # the prefill emitted the first token
    lengths = []
    while n + K + 1 < len(truth):
        buf.load([truth[:n]])
        got = prop.propose([sampled], buf.lengths, buf.tokens, req_ids=["a"])
        want = ref.draft()
        assert got == [want], f"at {n}"
        lengths.append(len(want))
        sampled = emit(want, truth, n)
        ref.update(sampled)
        n += len(sampled)
    # the scenario exercises the cut: empty, partial and full drafts
    assert 0 in lengths and K in lengths and any(0 < x < K for x in lengths)
    # and the calibration: the request's counts are the reference's (the next call scores the last draft)
    buf.load([truth[:n]])
    prop.propose([sampled], buf.lengths, buf.tokens, req_ids=["a"])
    st = prop.states["a"]
    assert torch.equal(st.tried, ref.lookup.tried[0]) and torch.equal(st.passed, ref.lookup.passed[0])
    assert st.tried.sum() > 20


def test_requests_join_leave_move_rows_and_come_back_after_preemption():
    """As vLLM runs them: a step verifies the drafts proposed at the last call for each request
    that was in it, the proposer is called with what each emitted; a joining request's prefill
    emits one token; a preempted one loses its scheduled drafts and, resumed, emits one token."""
    truths = {r: truth_sequence(s) for r, s in (("a", 2), ("b", 3), ("c", 4))}
    P = 24
    prop = plug.VerispecLookupProposer(config(), costs=COSTS)
    refs: dict[str, Reference] = {}
    pos: dict[str, int] = {}
    last: dict[str, list[int]] = {}
    buf = Buffers()
    # which requests run each step, in row order (vLLM condenses rows as requests leave)
    schedule = [["a"]] * 6 + [["a", "b"]] * 6 + [["b", "a", "c"]] * 6 + [["c", "b"]] * 5 + [["a", "c", "b"]] * 6
    prev: list[str] = []
    left_with = None
    for step, rows in enumerate(schedule):
        sampled = []
        for r in rows:
            t = truths[r]
            if r not in refs:  # joins: its prefill emits one token
                pos[r], new = P + 1, [t[P]]
                refs[r] = Reference(t[: P + 1])
            elif r in prev:  # its drafts were verified
                new = emit(last[r], t, pos[r])
                refs[r].update(new)
                pos[r] += len(new)
            else:  # back from preemption: the drafts made before it left were never verified
                assert torch.equal(prop.parked[r].tried, left_with)  # its calibration waited for it
                refs[r].lookup._pending[0] = None
                new = [t[pos[r]]]
                refs[r].update(new)
                pos[r] += 1
            sampled.append(new)
        buf.load([truths[r][: pos[r]] for r in rows])
        got = prop.propose(sampled, buf.lengths, buf.tokens, req_ids=rows)
        for r, d in zip(rows, got):
            assert d == refs[r].draft(), f"step {step} request {r}"
            last[r] = d
        if "a" in prev and "a" not in rows:
            left_with = prop.parked["a"].tried.clone()
            assert left_with.sum() > 0
        prev = rows
    assert left_with is not None and set(prop.states) == {"a", "b", "c"} and not prop.parked
    for r in truths:
        assert torch.equal(prop.states[r].tried, refs[r].lookup.tried[0]), r
        assert torch.equal(prop.states[r].passed, refs[r].lookup.passed[0]), r


def test_preempted_drafts_are_not_scored_and_a_reused_id_starts_afresh():
    truth = truth_sequence(5)
    prop = plug.VerispecLookupProposer(config(), costs=COSTS)
    buf = Buffers()
    n, sampled = 41, [truth[40]]
    for _ in range(8):
        buf.load([truth[:n]])
        d = prop.propose([sampled], buf.lengths, buf.tokens, req_ids=["r"])[0]
        sampled = emit(d, truth, n)
        n += len(sampled)
    tried = prop.states["r"].tried.clone()
    assert tried.sum() > 0
    # preempted: another request runs, then "r" comes back (recomputed: one new token emitted)
    buf.load([truth_sequence(6)[:30]])
    prop.propose([[7]], buf.lengths, buf.tokens, req_ids=["other"])
    assert "r" in prop.parked and prop.parked["r"].pending is None
    buf.load([truth[: n + 1]])
    prop.propose([[truth[n]]], buf.lengths, buf.tokens, req_ids=["r"])
    assert torch.equal(prop.states["r"].tried, tried)  # nothing scored against tokens that do not follow it
    # the id "r" reused by a request with other tokens: fresh counts
    other = [50 + (i % 7) for i in range(40)]
    buf.load([other])
    prop.propose([[other[-1]]], buf.lengths, buf.tokens, req_ids=["r"])
    assert prop.states["r"].tried.sum() == 0


def test_empty_drafts_where_nothing_pays():
    truth = truth_sequence(7)
    dear = PassCosts({1: 1.0, 2: 2.5, 3: 4.0, 4: 5.5, 5: 7.0, 6: 8.5})  # a wider pass never pays
    prop = plug.VerispecLookupProposer(config(), costs=dear)
    cheap = plug.VerispecLookupProposer(config(), costs=PassCosts({1: 1.0, 6: 1.0}))
    buf = Buffers()
    n, total_cheap = 60, 0
    for _ in range(10):
        buf.load([truth[:n]])
        assert prop.propose([[truth[n - 1]]], buf.lengths, buf.tokens, req_ids=["x"]) == [[]]
        total_cheap += len(cheap.propose([[truth[n - 1]]], buf.lengths, buf.tokens, req_ids=["x"])[0])
        n += 3
    assert total_cheap > 0  # the same contexts do have matches
    assert prop.stats["found"] > 0 and prop.stats["drafted"] == 0
    # no match at all, a row still prefilling (nothing emitted) and a row at max_model_len: no draft
    buf.load([[1, 2, 3, 4], truth[:60], truth[:60]])
    short = plug.VerispecLookupProposer(config(max_len=60), costs=PassCosts({1: 1.0, 6: 1.0}))
    out = short.propose([[4], [], [truth[59]]], buf.lengths, buf.tokens, req_ids=["p", "q", "s"])
    assert out == [[], [], []]
    # a draft never runs past max_model_len
    roomy = plug.VerispecLookupProposer(config(max_len=63), costs=PassCosts({1: 1.0, 6: 1.0}))
    got = roomy.propose([[truth[59]]], buf.lengths[1:], buf.tokens[1:], req_ids=["q"])[0]
    assert len(got) <= 2


def test_request_ids_come_from_the_runner_that_built_it():
    class FakeRunner:  # vLLM's GPUModelRunner, as far as the proposer sees it
        def __init__(self) -> None:
            self.drafter = plug.VerispecLookupProposer(config(), costs=COSTS)
            self.input_batch = SimpleNamespace(req_ids=[])

        def execute_model(self):  # noqa: D401 - only its presence matters
            return None

        def propose_draft_token_ids(self, sampled, lengths, tokens):
            return self.drafter.propose(sampled, lengths, tokens, slot_mappings=None)

    runner = FakeRunner()
    truth = truth_sequence(8)
    buf = Buffers()
    buf.load([truth[:50], truth[:80]])
    runner.input_batch.req_ids = ["req-1", "req-2", None]
    out = runner.propose_draft_token_ids([[truth[49]], [truth[79]]], buf.lengths, buf.tokens)
    assert len(out) == 2 and set(runner.drafter.states) == {"req-1", "req-2"}
    assert out[1] == Reference(truth[:80]).draft()
    lone = plug.VerispecLookupProposer(config(), costs=COSTS)  # built outside any runner
    with pytest.raises(RuntimeError, match="req_ids"):
        lone.propose([[truth[49]]], buf.lengths, buf.tokens)


def _clocked_run(step_seconds, steps: int = 60) -> tuple[plug.VerispecLookupProposer, list[int]]:
    """One request on a loop (lookup always matches long, every copy right), vLLM steps timed by
    ``step_seconds(tokens fed)``; returns the proposer and the tokens fed per step."""
    now = [0.0]
    prop = plug.VerispecLookupProposer(config(), clock=lambda: now[0])
    truth = [3, 4, 5, 6, 7, 8, 9, 10, 11, 12] * 40
    buf = Buffers()
    n, sampled, fed = 30, [truth[29]], []
    for _ in range(steps):
        buf.load([truth[:n]])
        d = prop.propose([sampled], buf.lengths, buf.tokens, req_ids=["z"])[0]
        fed.append(1 + len(d))
        now[0] += step_seconds(1 + len(d))
        sampled = emit(d, truth, n)
        n += len(sampled)
    return prop, fed


def test_the_step_clock_prices_widths_from_vllm_steps():
    # a pass of w tokens costs w^2 x 10 ms: once measured, no draft pays
    prop, fed = _clocked_run(lambda w: 0.010 * w * w)
    c = prop.clock.to_json()
    assert c["1"] == pytest.approx(0.010) and c["2"] == pytest.approx(0.040)
    assert fed[: plug.MIN_SAMPLES + 1] == [1] * (plug.MIN_SAMPLES + 1)  # the first steps measure a plain step
    assert max(fed) > 2  # before it was measured, a wide pass was priced by the reference model and drafted
    assert fed[-10:] == [1] * 10
    assert prop.stats["explored"] > 0
    # flat costs (a memory-bound pass): the full draft pays, and stays
    prop, fed = _clocked_run(lambda w: 0.010)
    assert fed[-10:] == [K + 1] * 10
    # the measured curve of a batch of B rows: the others at one token each
    assert prop.clock.curve(1, K + 1).verify_cost(1) == pytest.approx(0.010)
    # steps where a request joined or left are not timed
    before = {t: len(s) for t, s in prop.clock.samples.items()}
    buf = Buffers()
    buf.load([[5, 6, 7] * 20, [8, 9] * 20])
    prop.propose([[7], [9]], buf.lengths, buf.tokens, req_ids=["z", "new"])
    prop.propose([[7]], buf.lengths, buf.tokens, req_ids=["z"])
    assert {t: len(s) for t, s in prop.clock.samples.items()} == before


def test_bad_config_names_the_setting():
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        plug.VerispecLookupProposer(config(k=0))
    with pytest.raises(ValueError, match="VERISPEC_VLLM_COSTS"):
        os.environ[plug.COSTS_ENV] = "/nonexistent/costs.json"
        try:
            plug.VerispecLookupProposer(config())
        finally:
            del os.environ[plug.COSTS_ENV]


def test_import_needs_nothing_outside_vllms_pins():
    """vLLM's environment installs verispec with --no-deps: the plug-in must import without
    verispec's CLI, server, plotting, certification and GGUF dependencies."""
    blocked = ["rich", "fastapi", "uvicorn", "matplotlib", "scipy", "gguf", "prometheus_client", "vllm"]
    code = ("import sys\n"
            f"for m in {blocked!r}: sys.modules[m] = None\n"
            "import verispec.integrations.vllm as p\n"
            "print(p.PROPOSER)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "verispec.integrations.vllm.VerispecLookupProposer"
