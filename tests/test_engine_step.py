"""The step API: per-request parameters in one batch, requests joining and leaving between
steps, batched streaming, and the drafter registry. Every check compares a request's tokens
with the same request run alone (float64 tiny models: bit-identical when the engine is right).
"""

from __future__ import annotations

import pytest
import torch

from verispec.draft import Draft
from verispec.drafters import (
    DraftAsk,
    DrafterBase,
    HybridDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    make_drafter,
    register,
)
from verispec.drafters import registry as drafter_registry
from verispec.engine import Request, SpeculativeDecoder
from verispec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)
# Rows that differ in everything a request owns: method, temperature, top-k/top-p, seed, stop.
MIXED = [
    Request("hello world hello wor", 16, GREEDY, request_id="greedy"),
    Request("abc abc abc abc", 16, SamplingParams(temperature=0.7, top_p=0.9, seed=5), request_id="exact-0.7"),
    Request("the cat sat on the mat", 16, SamplingParams(temperature=1.0, seed=6), method="gumbel", request_id="gumbel"),
    Request("zz top", 16, SamplingParams(temperature=1.3, top_k=5, seed=7), request_id="exact-1.3-k5"),
    Request("x", 16, SamplingParams(temperature=0.9, min_p=0.05, seed=8), k="heuristic", request_id="heuristic"),
]


def run(dec: SpeculativeDecoder, requests: list[Request]) -> dict:
    """request_id -> generated tokens, stepping the batch to the end."""
    state, done = dec.start(requests), {}
    while len(state):
        for o in dec.step(state):
            if o.finished:
                done[o.request_id] = o.completion.token_ids
    return done


def alone(dec: SpeculativeDecoder, requests: list[Request]) -> dict:
    return {r.request_id: run(dec, [r])[r.request_id] for r in requests}


def drafters(tiny_target, tiny_draft):
    return {"none": None, "model": ModelDrafter(tiny_draft), "ngram": PromptLookupDrafter(),
            "hybrid": HybridDrafter(ModelDrafter(tiny_draft))}


@pytest.mark.parametrize("kind", ["none", "model", "ngram", "hybrid"])
def test_rows_with_different_parameters_share_a_batch_and_get_their_own_tokens(tiny_target, tiny_draft, kind):
    dec = SpeculativeDecoder(tiny_target, drafters(tiny_target, tiny_draft)[kind], k=3)
    assert run(dec, MIXED) == alone(dec, MIXED)


def test_mixed_batch_is_not_the_first_rows_parameters_for_all(tiny_target, tiny_draft):
    """Power: the same rows all with the first row's parameters give other tokens."""
    dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k=3)
    same = [Request(r.prompt, 16, MIXED[1].sampling, request_id=r.request_id) for r in MIXED]
    assert run(dec, same) != run(dec, MIXED)


@pytest.mark.parametrize("kind", ["none", "model", "ngram", "hybrid"])
def test_requests_join_a_running_batch(tiny_target, tiny_draft, kind):
    dec = SpeculativeDecoder(tiny_target, drafters(tiny_target, tiny_draft)[kind], k=3)
    want = alone(dec, MIXED)
    state, done = dec.start(MIXED[:2]), {}
    for i in range(40):
        if i in (2, 5):  # join after some steps, into rows whose caches have drifted apart
            dec.add(state, MIXED[2:4] if i == 2 else MIXED[4:])
        for o in dec.step(state):
            if o.finished:
                done[o.request_id] = o.completion.token_ids
        if not len(state) and i > 5:
            break
    assert done == want


@pytest.mark.parametrize("kind", ["none", "model", "hybrid"])
@pytest.mark.parametrize("max_batch", [1, 2, 3])
def test_continuous_batching_gives_each_request_what_it_gets_alone(tiny_target, tiny_draft, kind, max_batch):
    """run(max_batch=): rows finish at different steps, the last rows move into their places
    and waiting requests join the running cache; every request still gets its own tokens."""
    dec = SpeculativeDecoder(tiny_target, drafters(tiny_target, tiny_draft)[kind], k=3)
    reqs = [Request(r.prompt, 4 + 3 * i, r.sampling, method=r.method, k=r.k, request_id=r.request_id)
            for i, r in enumerate(MIXED)]  # different lengths: rows leave at different steps
    state = dec.start()
    done, most = {}, 0
    for o in dec.run(reqs, max_batch=max_batch, state=state):
        most = max(most, len(state))
        if o.finished:
            done[o.request_id] = o.completion.token_ids
    assert done == alone(dec, reqs)
    assert most <= max_batch


def test_generate_with_max_batch_equals_all_at_once(tiny_target, tiny_draft):
    dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k=3)
    prompts = ["hello world", "abc abc", "the cat", "zz", "x y z", "q"]
    sp = SamplingParams(temperature=0.8, seed=11)
    want = dec.generate(prompts, 10, sp).token_ids
    assert dec.generate(prompts, 10, sp, max_batch=2).token_ids == want
    stream = dec.generate(prompts, 10, sp, max_batch=4, stream=True)
    list(stream)
    assert stream.result.token_ids == want
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_batch"):
            dec.generate(prompts, 10, sp, max_batch=bad)


def test_cancel_drops_a_request_and_leaves_the_others_alone(tiny_target, tiny_draft):
    dec = SpeculativeDecoder(tiny_target, HybridDrafter(ModelDrafter(tiny_draft)), k=3)
    want = alone(dec, MIXED)
    state = dec.start(MIXED)
    done = {o.request_id: o.completion.token_ids for o in dec.step(state) if o.finished}
    victim = state.rows[len(state.rows) // 2].request_id  # one still running, in the middle of the batch
    dec.cancel(state, victim)
    assert victim not in [r.request_id for r in state.rows]
    with pytest.raises(KeyError, match=str(victim)):
        dec.cancel(state, victim)
    while len(state):
        done.update((o.request_id, o.completion.token_ids) for o in dec.step(state) if o.finished)
    assert done == {k: v for k, v in want.items() if k != victim}


def test_a_stale_state_and_bad_requests_are_refused(tiny_target):
    dec = SpeculativeDecoder(tiny_target, PromptLookupDrafter(), k=3)
    old = dec.start([Request("ab", 4, GREEDY)])
    dec.start([Request("cd", 4, GREEDY)])
    with pytest.raises(RuntimeError, match="stale"):
        dec.step(old)
    state = dec.start([Request("ab", 4, GREEDY, request_id=1)])
    with pytest.raises(ValueError, match="already running"):
        dec.add(state, [Request("cd", 4, GREEDY, request_id=1)])
    with pytest.raises(ValueError, match="method"):
        dec.add(state, [Request("cd", 4, GREEDY, method="beam")])
    with pytest.raises(ValueError, match="k must"):
        dec.add(state, [Request("cd", 4, GREEDY, k=0)])
    with pytest.raises(TypeError, match="Request"):
        dec.add(state, ["cd"])
    assert len(state) == 1  # nothing half-added


def test_streaming_a_batch_gives_each_prompt_its_own_text(tiny_target, tiny_draft):
    dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k=3)
    prompts = ["hello world hello wor", "abc abc abc abc", "zz top"]
    stream = dec.generate(prompts, 20, GREEDY, stream=True)
    pieces = {i: "" for i in range(len(prompts))}
    reasons = {}
    for delta in stream:
        pieces[delta.index] += delta.text
        if delta.finish_reason is not None:
            reasons[delta.index] = delta.finish_reason
    result = stream.result
    assert [pieces[i] for i in range(len(prompts))] == result.texts
    assert [reasons[i] for i in range(len(prompts))] == result.finish_reasons
    assert result.texts == dec.generate(prompts, 20, GREEDY).texts


@pytest.mark.parametrize("kind", ["none", "model", "ngram"])
def test_all_greedy_batches_take_the_argmax_path_and_emit_what_the_general_path_does(
        tiny_target, tiny_draft, kind, monkeypatch):
    """A batch whose rows are all greedy is verified from the argmax of the logits alone (no
    ``logits_to_probs``); the tokens equal those of the general path (one-hot p and ``verify``)."""
    from verispec.engine import step as step_mod

    greedy = [Request(t, 16, GREEDY, request_id=str(i)) for i, t in enumerate(["hello world hello wor", "abc abc",
                                                                              "the cat sat on the mat", "x"])]
    dec = SpeculativeDecoder(tiny_target, drafters(tiny_target, tiny_draft)[kind], k=3)
    calls = {"argmax": 0}
    real = step_mod.verify_argmax

    def counted(*a, **kw):
        calls["argmax"] += 1
        return real(*a, **kw)

    monkeypatch.setattr(step_mod, "verify_argmax", counted)
    monkeypatch.setattr(step_mod, "logits_to_probs", lambda *a, **kw: pytest.fail("transformed p for greedy rows"))
    fast = run(dec, greedy)
    assert calls["argmax"] > 0
    monkeypatch.undo()
    monkeypatch.setattr(step_mod, "_argmax_rows", lambda params, d: torch.zeros(len(params), dtype=torch.bool))
    monkeypatch.setattr(step_mod, "verify_argmax", lambda *a, **kw: pytest.fail("fast path when told not to"))
    assert run(dec, greedy) == fast


@pytest.mark.parametrize("kind", ["none", "model", "ngram"])
def test_mixed_batches_transform_only_the_sampled_rows_and_emit_what_the_general_path_does(
        tiny_target, tiny_draft, kind, monkeypatch):
    """Greedy and sampled rows in one batch: the greedy rows are verified from the argmax alone and
    p is built for the sampled rows only; every row's tokens equal the general path's (p for every
    row), so merging the two parts back puts each outcome in its own row."""
    from verispec.engine import step as step_mod

    reqs = [Request("hello world hello wor", 16, GREEDY, request_id="g0"), *MIXED[1:3],
            Request("abc abc", 16, GREEDY, request_id="g1"), MIXED[3],
            Request("the cat sat on the mat", 16, SamplingParams(temperature=0, seed=3), method="gumbel",
                    request_id="g-gumbel")]
    dec = SpeculativeDecoder(tiny_target, drafters(tiny_target, tiny_draft)[kind], k=3)
    real = step_mod.logits_to_probs
    widths = []

    def counted(logits, params):
        widths.append((logits.shape[0], int(params.greedy.sum())))
        return real(logits, params)

    monkeypatch.setattr(step_mod, "logits_to_probs", counted)
    split = run(dec, reqs)
    assert widths and all(g == 0 for _, g in widths)  # no greedy row was transformed
    assert max(b for b, _ in widths) <= 3  # at most the three sampled rows (prefill included)
    monkeypatch.setattr(step_mod, "_argmax_rows", lambda params, d: torch.zeros(len(params), dtype=torch.bool))
    assert run(dec, reqs) == split
    assert split == alone(dec, reqs)


def test_a_step_reports_the_tokens_it_emitted(tiny_target):
    dec = SpeculativeDecoder(tiny_target, PromptLookupDrafter(), k=3)
    state = dec.start([Request("hello hello hello hel", 12, GREEDY, request_id="a")])
    got = []
    while len(state):
        (o,) = dec.step(state)
        assert o.request_id == "a" and 1 <= len(o.token_ids) <= 4
        got += o.token_ids
    assert got == o.completion.token_ids == dec.generate(["hello hello hello hel"], 12, GREEDY).token_ids[0]


# -- the registry: a new drafter is one class and one register() line ----------------------------

class RepeatLastDrafter(DrafterBase):
    """A toy drafter: proposes the row's last token k times (point masses)."""

    name = "repeat"

    def __init__(self) -> None:
        self.contexts: list[list[int]] = []

    def add(self, prompts, features=None):
        self.contexts += [list(p) for p in prompts]

    def keep(self, rows):
        self.contexts = [self.contexts[i] for i in rows.tolist()]

    def propose(self, ask: DraftAsk) -> Draft:
        K = int(ask.k.max()) if len(ask.k) else 0
        last = torch.tensor([c[-1] for c in self.contexts], dtype=torch.int64)
        return Draft(last[:, None].expand(-1, K).clone(), None, ask.k.clone())

    def update(self, emitted, features=None):
        for c, new in zip(self.contexts, emitted):
            c.extend(new)


@pytest.fixture
def registered_toy(monkeypatch):
    monkeypatch.setattr(drafter_registry, "_REGISTERED", dict(drafter_registry._REGISTERED))
    register("repeat", RepeatLastDrafter)


def test_a_registered_drafter_works_everywhere_specs_are_parsed(tiny_target, registered_toy):
    assert isinstance(make_drafter("repeat"), RepeatLastDrafter)
    hybrid = make_drafter("repeat+ngram")
    assert isinstance(hybrid, HybridDrafter) and isinstance(hybrid.model, RepeatLastDrafter)
    prompts = ["aaaa", "hello hello hel"]
    ref = SpeculativeDecoder(tiny_target, None).generate(prompts, 16, GREEDY).token_ids
    for spec in ("repeat", "repeat+ngram"):
        res = SpeculativeDecoder(tiny_target, make_drafter(spec), k=3).generate(prompts, 16, GREEDY)
        assert res.token_ids == ref and res.stats.drafted > 0


def test_bench_parses_specs_through_the_registry(tiny_target, registered_toy):
    from rich.console import Console

    from verispec.bench.command import _load_drafters

    specs = _load_drafters(["repeat", "repeat+ngram", "ngram", "none"], tiny_target, "tiny", Console(quiet=True), [])
    assert [s.label for s in specs] == ["repeat", "hybrid(repeat)", "ngram"]
    assert isinstance(specs[1].drafter, HybridDrafter)


@pytest.mark.parametrize("name", ["", "a+b", "x:y", "none", "default", "hybrid"])
def test_register_refuses_names_specs_cannot_carry(name):
    with pytest.raises(ValueError, match="drafter name"):
        register(name, RepeatLastDrafter)


def test_argmax_tokens_take_the_lowest_id_on_ties_and_refuse_broken_logits():
    """The all-greedy path's argmax: as ``logits_to_probs`` would take it (first maximum, ids past
    the engine's V ignored), and NaN / +inf / an all -inf row refused as there."""
    from verispec.engine.step import _argmax_tokens

    logits = torch.tensor([[[0.0, 2.0, 2.0, 9.0], [1.0, 1.0, 1.0, 1.0]]])  # [1, 2, 4]
    assert _argmax_tokens(logits, 3).tolist() == [[1, 0]]  # id 3 lies past V = 3
    for bad in (float("nan"), float("inf")):
        broken = logits.clone()
        broken[0, 1, 2] = bad
        with pytest.raises(ValueError, match="NaN or \\+inf"):
            _argmax_tokens(broken, 3)
    with pytest.raises(ValueError, match="entirely -inf"):
        _argmax_tokens(torch.full((1, 1, 4), float("-inf")), 4)
