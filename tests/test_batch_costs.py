"""The cost of a pass of B rows x w tokens, and the K policy under load (issue 31): greedy and
Gumbel rows draft less, down to nothing, as the batch grows; seeded exact rows draft the same at
any batch size; the table of several rows is kept in the costs file and timed again when its
entry is malformed."""

from __future__ import annotations

import json

import pytest
import torch

from verispec.drafters import ModelDrafter
from verispec.engine import Request, SpeculativeDecoder
from verispec.engine.costs import CostTables, PassCosts, measure_pass_costs
from verispec.engine.kpolicy import PROBE_EVERY, KRows
from verispec.sampling import SamplingParams

ONE = {w: 1.0 + 0.03 * (w - 1) for w in range(1, 16)}  # one row: memory-bound
# B rows x w tokens: each wider batch is less memory-bound (steeper in w); 16 rows: compute-bound
STEEP = PassCosts(ONE, draft_step=0.05, rows={
    2: {w: 1.1 * (1 + 0.06 * (w - 1)) for w in (1, 2, 3, 5, 9, 13)},
    4: {w: 1.3 * (1 + 0.15 * (w - 1)) for w in (1, 2, 3, 5, 9)},
    8: {w: 2.0 * (1 + 0.45 * (w - 1)) for w in (1, 2, 3, 5)},
    16: {w: 4.0 * w for w in (1, 2)},
})
SIZES = (1, 2, 4, 8, 16)


@pytest.fixture(autouse=True)
def _quiet_machine(monkeypatch):
    from verispec.engine import costs as costs_module

    monkeypatch.setattr(costs_module.os, "getloadavg", lambda: (0.0, 0.0, 0.0))


def _policy(B: int, fixed: bool, max_k: int = 8) -> KRows:
    """B auto rows whose first drafts passed 70 times in 100 and whose later tokens (after a
    token of confidence 0.8) 80 in 100."""
    k = KRows(max_k)
    k.add(["auto"] * B, fixed=[fixed] * B)
    k.tried[:, 0], k.passed[:, 0] = 100.0, 70.0
    k.tried[:, 9], k.passed[:, 9] = 100.0, 80.0
    return k


def _lengths(k: KRows, costs, conf: float = 0.8) -> torch.Tensor:
    """``[B]`` the draft length each row would draft: ``ask``, then ``more`` after each token."""
    B = len(k.k)
    n = k.ask(torch.full((B,), 20), costs, scoring=False)[0].clone()
    more = k.more(costs)
    going = n > 0
    length = going.long()
    for i in range(k.max_k - 1):
        going &= more(i, torch.full((B,), conf, dtype=torch.float64)) & (length < n)
        length += going.long()
    return length


def test_the_table_of_several_rows_is_interpolated_and_scaled_to_one_row():
    assert STEEP.batch_cost(1, 3) == pytest.approx(ONE[3])
    assert STEEP.batch_cost(8, 5) == pytest.approx(2.0 * 2.8)
    assert STEEP.batch_cost(6, 1) == pytest.approx((1.3 + 2.0) / 2)  # between 4 and 8 rows
    assert STEEP.batch_cost(16, 4) == pytest.approx(16.0)  # beyond the widest timed width: linear in tokens
    assert STEEP.batch_cost(32, 2) == pytest.approx(2 * 8.0)  # beyond 16 rows: proportional to B
    for B in SIZES:
        t = STEEP.table(15, rows=B)
        assert t[1] == pytest.approx(ONE[1])  # one-token pass of one row: the draft step's unit
        assert all(t[w + 1] >= t[w] for w in range(1, 15))
    assert STEEP.table(15, rows=16)[2] == pytest.approx(2.0)  # compute-bound: 2 tokens cost 2 passes
    assert PassCosts.from_json(json.loads(json.dumps(STEEP.to_json()))) == STEEP
    assert PassCosts(ONE).table(9, rows=8).tolist() == PassCosts(ONE).table(9).tolist()  # no rows: B-free
    with pytest.raises(ValueError, match="rows entry"):
        PassCosts.from_json({"verify": {"1": 1.0}, "rows": {"1": {"1": 1.0}}})


def test_greedy_rows_draft_less_as_the_batch_grows_and_nothing_at_16_rows():
    mean = [float(_lengths(_policy(B, fixed=False), STEEP).double().mean()) for B in SIZES]
    assert all(a >= b for a, b in zip(mean, mean[1:])), mean
    assert mean[0] >= 4 and mean[3] < mean[0] and mean[4] == 0, mean
    k = _policy(16, fixed=False)
    k.idle[:] = PROBE_EVERY  # a probe is due, but even a sure token cannot pay for 16 rows
    assert _lengths(k, STEEP).tolist() == [0] * 16


def test_the_measured_rows_of_a_batch_decide_together():
    """The pass is as wide as the longest draft: in a batch, a row whose next token pays for
    itself alone does not draft it when it does not pay for the batch's pass, and a row drafts
    on (for free) when the batch's tokens pay for the wider pass. Alone, each row decides alone."""
    mid = PassCosts({w: 1.0 + 0.1 * (w - 1) for w in range(1, 16)}, draft_step=0.2)
    conf = torch.tensor([0.99, 0.02], dtype=torch.float64)
    alone = [KRows(8) for _ in range(2)]
    for k in alone:
        k.add(["auto"])
    assert [k.more(mid)(0, conf[i:i + 1]).item() for i, k in enumerate(alone)] == [True, False]
    pair = KRows(8)
    pair.add(["auto", "auto"])
    assert pair.more(mid)(0, conf).tolist() == [False, False]  # 3.5 tokens / 1.6 < 3 / 1.3
    sure = torch.tensor([0.99, 0.99], dtype=torch.float64)
    assert pair.more(mid)(0, sure).tolist() == [True, True]
    mixed = KRows(8)
    mixed.add(["auto", "auto"], fixed=[True, False])  # a seeded exact row widens the pass on its own
    assert mixed.more(mid)(0, conf).tolist() == [True, True]
    first = KRows(8)
    first.add(["auto"] * 4)
    first.tried[:2, 0], first.passed[:2, 0] = 100.0, 95.0  # two rows whose first drafts pass, two whose fail
    first.tried[2:, 0], first.passed[2:, 0] = 100.0, 2.0
    room = torch.full((4,), 20)
    assert first.ask(room, mid, scoring=False)[0].tolist() == [8] * 4  # (4 + 1.9) / (1.1 + 0.2) > 4 / 1
    first.tried[:2, 0], first.passed[:2, 0] = 100.0, 40.0
    assert first.ask(room, mid, scoring=False)[0].tolist() == [0] * 4  # (4 + 0.86) / 1.3 < 4


def test_seeded_exact_rows_draft_the_same_at_any_batch_size():
    """Rows flagged ``fixed`` read one row's table whatever the batch (here: the reference
    table, and a pinned table with several rows); their probes come as alone."""
    tables = CostTables(STEEP, PassCosts(ONE, draft_step=0.05))
    for costs in (tables, STEEP):
        alone = _lengths(_policy(1, fixed=True), costs)
        assert alone.item() >= 4
        for B in SIZES[1:]:
            mixed = _policy(B, fixed=False)
            mixed.add(["auto"], fixed=[True])  # one seeded exact row among B greedy ones
            mixed.tried[-1, 0], mixed.passed[-1, 0], mixed.tried[-1, 9], mixed.passed[-1, 9] = 100, 70, 100, 80
            assert _lengths(mixed, costs)[-1] == alone
    k = _policy(16, fixed=True)
    k.tried[:, 0], k.passed[:, 0] = 100.0, 0.0  # first drafts never pass: only probes
    k.idle[:] = PROBE_EVERY
    assert (_lengths(k, STEEP) > 0).all()


def test_seeded_text_and_greedy_drafts_under_load_in_the_engine(tiny_target, tiny_draft):
    """One batch (a seeded sampled request and 7 greedy ones) under two pinned tables with the
    same one-row costs: B-free, and one where 8 rows are compute-bound. Every text is the same
    (the seeded one as alone), and under the second the batch drafts less (only its greedy rows
    can: the seeded row's draft lengths are the same under both)."""
    sp = SamplingParams(temperature=0.9, seed=11)
    flat = PassCosts(ONE, draft_step=0.05)
    steep = PassCosts(ONE, draft_step=0.05, rows={2: {1: 1.0, 2: 1.05}, 8: {w: 8.0 * w for w in (1, 2)}})
    alone = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k="auto", costs=steep).generate(
        ["hello world"], 24, sp).texts[0]
    runs = []
    for costs in (flat, steep):
        dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k="auto", costs=costs)
        greedy = [Request(f"ab {i}", 24, SamplingParams(temperature=0), request_id=f"g{i}") for i in range(7)]
        state = dec.start([Request("hello world", 24, sp, request_id="s")] + greedy)
        texts = {}
        for _ in range(200):
            if not len(state):
                break
            for o in dec.step(state):
                if o.completion is not None:
                    texts[o.request_id] = o.completion.text
        runs.append((texts, state.stats.drafted))
    (flat_texts, flat_drafted), (steep_texts, steep_drafted) = runs
    assert flat_texts == steep_texts and steep_texts["s"] == alone
    assert steep_drafted < 0.5 * flat_drafted, (steep_drafted, flat_drafted)


def test_unseeded_sampled_rows_draft_less_under_load(tiny_target, tiny_draft):
    """A sampled request without a seed promises no text, so it weighs the batch's measured
    costs like a greedy row (an OpenAI client sends no seed by default): under the steep table
    8 such rows draft far less than under the B-free one. Seeded, they would draft alike."""
    flat = PassCosts(ONE, draft_step=0.05)
    steep = PassCosts(ONE, draft_step=0.05, rows={2: {1: 1.0, 2: 1.05}, 8: {w: 8.0 * w for w in (1, 2)}})
    drafted = {}
    for seed in (None, 5):
        for name, costs in (("flat", flat), ("steep", steep)):
            dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k="auto", costs=costs)
            sp = SamplingParams(temperature=0.9, seed=seed)
            state = dec.start([Request(f"ab {i}", 24, sp, request_id=i) for i in range(8)])
            for _ in range(200):
                if not len(state):
                    break
                dec.step(state)
            drafted[seed, name] = state.stats.drafted
    assert drafted[None, "steep"] < 0.5 * drafted[None, "flat"], drafted
    assert drafted[5, "steep"] == drafted[5, "flat"], drafted


def _fake_timings(monkeypatch, calls: list):
    from verispec.engine import costs as costs_module

    monkeypatch.setattr(costs_module, "_CACHE", {})
    monkeypatch.setattr(costs_module, "_time_widths", lambda target, w: calls.append("one") or {1: 1.0, 2: 1.1})
    monkeypatch.setattr(costs_module, "_time_rows", lambda target, w: calls.append("rows") or
                        {B: {1: float(B), 2: 1.5 * B} for B in costs_module._ROWS})
    monkeypatch.setattr(costs_module, "_draft_ratio", lambda target, drafter, busy: (0.1, False))
    monkeypatch.setattr(costs_module, "_draft_ratio_rows", lambda target, drafter, busy: (0.3, False))


def test_the_rows_table_is_kept_and_a_malformed_entry_measured_again(tiny_target, tmp_path, monkeypatch):
    from verispec.engine import costs as costs_module

    path = tmp_path / "costs.json"
    monkeypatch.setenv("VERISPEC_COSTS", str(path))
    calls: list = []
    _fake_timings(monkeypatch, calls)
    first = measure_pass_costs(tiny_target, None, 2)
    assert sorted(first.rows) == list(costs_module._ROWS) and first.rows[8] == {1: 8.0, 2: 12.0}
    (key, entry), = json.loads(path.read_text()).items()
    assert "rows" in key and entry["rows"]["16"] == {"1": 16.0, "2": 24.0}
    monkeypatch.setattr(costs_module, "_CACHE", {})  # a new process reads the file: nothing timed
    calls.clear()
    assert measure_pass_costs(tiny_target, None, 2) == first and calls == []
    for bad in ({"2": "x"}, {"2": {"1": -1.0}}, {"3": {"1": 1.0}}, None):  # malformed, or an entry without rows
        broken = dict(entry)
        if bad is None:
            broken.pop("rows")
        else:
            broken["rows"] = bad
        path.write_text(json.dumps({key: broken}))
        monkeypatch.setattr(costs_module, "_CACHE", {})
        calls.clear()
        again = measure_pass_costs(tiny_target, None, 2)
        assert calls == ["one", "rows"] and again == first, bad
        assert json.loads(path.read_text())[key]["rows"] == entry["rows"]


def test_the_rows_of_a_real_model_are_timed(tiny_target, tmp_path, monkeypatch):
    from verispec.engine import costs as costs_module

    monkeypatch.setenv("VERISPEC_COSTS", str(tmp_path / "costs.json"))
    monkeypatch.setattr(costs_module, "_CACHE", {})
    costs = measure_pass_costs(tiny_target, None, 13)
    assert sorted(costs.rows) == list(costs_module._ROWS)
    for B, widths in costs.rows.items():
        assert {1, 2} <= set(widths) and all(B * w <= costs_module._ROW_TOKENS or w <= 2 for w in widths)
        assert all(t > 0 for t in widths.values())
    assert costs.rows[2].keys() == {1, 2, 3, 5, 9, 13}


def test_one_long_draft_does_not_widen_the_pass_of_a_batch():
    """Three greedy rows, one with an 8-token lookup match (each token 0.6 likely), the others
    with none: a pass of 3 rows x w tokens costs 1 + 0.1 (w - 1) passes of width 1 here, so the
    batch verifies 2 of the 8 tokens (3.96 tokens / 1.2 beats 3.6 / 1.1, 3 / 1 and 4.18 / 1.3); alone the row keeps its length; a seeded exact row's own
    draft is kept and sets the width the others may use for free."""
    costs = PassCosts(ONE, draft_step=0.05, rows={2: {w: 1 + 0.1 * (w - 1) for w in (1, 2)},
                                                  4: {w: 1 + 0.1 * (w - 1) for w in (1, 2)}})
    match = torch.full((3, 8), 0.6, dtype=torch.float64)
    n = torch.tensor([8, 0, 0])
    k = KRows(8)
    k.add(["auto"] * 3)
    cut = k.squeeze(n, match, None, costs)
    assert cut.tolist() == [2, 0, 0]
    alone = KRows(8)
    alone.add(["auto"])
    assert alone.squeeze(n[:1], match[:1], None, costs).tolist() == [8]
    mixed = KRows(8)
    mixed.add(["auto"] * 3, fixed=[False, True, False])
    assert mixed.squeeze(torch.tensor([8, 5, 0]), match, None, costs).tolist() == [5, 5, 0]


def test_only_auto_rows_time_the_cost_table(tiny_target, tiny_draft, monkeypatch):
    """A decoder whose rows all draft a fixed K times no cost table (the fixed-K step reads none);
    the first "auto" row to join an empty batch times it, once per decoder."""
    from verispec.engine import decoder as decoder_mod

    calls = []

    def counted(*a, **kw):
        calls.append(1)
        return measure_pass_costs(*a, **kw)

    monkeypatch.setattr(decoder_mod, "measure_pass_costs", counted)
    greedy = SamplingParams(temperature=0)
    dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k=3)
    fixed = dec.generate("hello world", 8, greedy).texts
    assert calls == []
    assert list(dec.run([Request("hello world", 8, greedy, request_id=0, k="auto")]))
    assert calls == [1]
    assert dec.generate("hello world", 8, greedy).texts == fixed  # K never changes greedy text
    auto = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k="auto")
    assert auto.generate("hello world", 8, greedy).texts == fixed
    assert calls == [1, 1]
