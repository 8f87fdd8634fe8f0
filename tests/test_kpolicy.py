"""The "auto" draft-length policy: calibrated per request, never paying for drafts that cannot
pay, and deciding only from the past (the text of a seeded request does not depend on load)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from verispec.drafters import HybridDrafter, ModelDrafter, PromptLookupDrafter
from verispec.engine import SpeculativeDecoder
from verispec.engine.costs import CostTables, PassCosts, measure_pass_costs
from verispec.engine.kpolicy import BUCKETS, PROBE_EVERY, KRows, buckets_of
from verispec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)
FLAT = PassCosts({w: 1.0 for w in range(1, 16)}, draft_step=0.01)  # wide passes free, drafts cheap
DEAR = PassCosts({w: 1.0 + 0.1 * (w - 1) for w in range(1, 16)}, draft_step=0.5)  # drafts cost half a pass
CPU = PassCosts({w: 1.0 + 0.02 * (w - 1) for w in range(1, 16)}, draft_step=0.06)  # as measured on a 2-core CPU


@pytest.fixture(autouse=True)
def _quiet_machine(monkeypatch):
    """A cost table timed on a busy machine is timed again later; these tests must not depend on
    what else the test run has going on (one test below makes the machine look busy)."""
    from verispec.engine import costs as costs_module

    monkeypatch.setattr(costs_module.os, "getloadavg", lambda: (0.0, 0.0, 0.0))


def rows(n: int, policy="auto", max_k: int = 8) -> KRows:
    k = KRows(max_k)
    k.add([policy] * n)
    return k


def test_buckets_and_the_prior_read_confidence_as_acceptance():
    assert buckets_of(torch.tensor([0.0, 0.05, 0.1, 0.95, 1.0, math.nan])).tolist() == [1, 1, 2, 10, 10, 0]
    k = rows(1)
    assert k.predict(torch.tensor([10])).item() == pytest.approx(0.95)
    assert k.predict(torch.tensor([0])).item() == pytest.approx(0.5)


def test_observe_calibrates_each_bucket_from_what_the_target_accepted():
    k = rows(2)
    conf = torch.tensor([[0.95, 0.95, 0.95], [0.15, 0.15, 0.15]], dtype=torch.float64)
    for _ in range(100):  # row 0: its tokens after a 0.95 token fail; row 1: after a 0.15 token pass
        evidence = k.observe(torch.tensor([1, 3]), torch.tensor([3, 3]), conf)
    assert k.predict(torch.tensor([10, 10]))[0] < 0.1  # row 0 learned that bucket 10 fails
    assert k.predict(torch.tensor([2, 2]))[1] > 0.9  # row 1 learned that bucket 2 passes
    assert k.predict(torch.tensor([10, 10]))[1] == pytest.approx(0.95)  # rows keep their own counts
    assert evidence.shape == (3, BUCKETS + 1) and evidence[0].sum() == 2 + 3  # tested: 2 in row 0, 3 in row 1


def test_more_stops_when_the_next_token_cannot_pay():
    k = rows(2)
    mid = PassCosts({w: 1.0 + 0.1 * (w - 1) for w in range(1, 16)}, draft_step=0.2)
    # one row alone (in a batch the measured rows decide together: tests/test_batch_costs.py)
    go = [rows(1).more(mid)(0, torch.tensor([x], dtype=torch.float64)).item() for x in (0.99, 0.02)]
    assert go == [True, False]  # after a near-certain token the next is worth a step; after a 2% one not
    assert k.more(DEAR)(0, torch.tensor([0.99, 0.02], dtype=torch.float64)).tolist() == [False, False]
    assert rows(2, policy=3).more(DEAR)(0, torch.tensor([0.0, 0.0])).tolist() == [True, True]  # fixed K drafts on


def test_the_first_token_decides_whether_to_draft_at_all_and_probes_come_back():
    k = rows(1)
    k.tried[0, 0], k.passed[0, 0] = 50.0, 1.0  # first tokens of this request almost never pass
    room = torch.tensor([20])
    assert k.ask(room, DEAR, scoring=False)[0].item() == 0  # draft nothing
    assert k.ask(room, FLAT, scoring=False)[0].item() == 8  # free drafts: still worth it
    for _ in range(PROBE_EVERY):
        k.observe(torch.tensor([0]), torch.tensor([0]), None)  # empty steps
    assert k.ask(room, DEAR, scoring=False)[0].item() == 8  # a probe


def test_a_dozen_rejected_first_drafts_do_not_lock_a_request_out():
    """Costs as measured on a 2-core CPU (a 2-token pass 2% dearer than a 1-token pass, a draft
    step 6% of a pass: break-even at a first-draft acceptance of 0.08). A request whose first 12
    first drafts were all rejected still drafts (its estimate leans on the prior, not on a dozen
    unlucky starts); after 60 it stops, as it should."""
    room = torch.tensor([20])
    k = rows(1)
    for _ in range(12):
        k.observe(torch.tensor([0]), torch.tensor([4]), torch.full((1, 4), 0.5, dtype=torch.float64))
    assert k.ask(room, CPU, scoring=False)[0].item() == 8
    for _ in range(48):
        k.observe(torch.tensor([0]), torch.tensor([4]), torch.full((1, 4), 0.5, dtype=torch.float64))
    assert k.ask(room, CPU, scoring=False)[0].item() == 0


def test_auto_drafts_nothing_where_drafts_cannot_pay_and_outputs_stay_exact(tiny_target, tiny_draft):
    prompts = ["hello world hello wor", "zz top"]
    ref = SpeculativeDecoder(tiny_target, None).generate(prompts, 24, GREEDY).token_ids
    cheap = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k="auto", costs=FLAT).generate(prompts, 24, GREEDY)
    dear = PassCosts({w: 1.0 + 0.5 * (w - 1) for w in range(1, 16)}, draft_step=2.0)  # a draft costs 2 passes
    none = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k="auto", costs=dear).generate(prompts, 24, GREEDY)
    assert cheap.token_ids == none.token_ids == ref
    assert cheap.stats.drafted > none.stats.drafted
    lengths = none.stats.draft_lengths
    assert lengths[0] >= 0.8 * sum(lengths)  # mostly empty drafts: only probes
    assert sum(lengths[1:]) >= 1  # ... but it does probe


def test_each_row_reads_its_own_cost_table():
    """In one batch, rows flagged ``fixed`` (sampled "exact") read the fixed table and the others
    the measured one: here drafting is free for the measured table and dear for the fixed one."""
    k = KRows(8)
    k.add(["auto"] * 4, fixed=[False, True, False, True])
    room = torch.tensor([20] * 4)
    tables = CostTables(measured=FLAT, fixed=DEAR)
    k.tried[:, 0], k.passed[:, 0] = 50.0, 5.0  # first drafts rarely pass: only free drafts pay
    assert k.ask(room, tables, scoring=False)[0].tolist() == [8, 0, 8, 0]
    assert k.more(tables)(0, torch.full((4,), 0.5, dtype=torch.float64)).tolist() == [True, False, True, False]
    n, cut = k.cut(torch.tensor([4] * 4), torch.full((4, 4), 0.3, dtype=torch.float64), tables)
    assert n.tolist() == [4, 1, 4, 1] and cut.all()  # dear: the first copied token pays (1.3 / 1.1), no more
    k.keep(torch.tensor([1, 2]))
    assert k.fixed.tolist() == [True, False]
    assert k.ask(room[:2], tables, scoring=False)[0].tolist() == [0, 8]
    assert k.ask(room[:2], FLAT, scoring=False)[0].tolist() == [8, 8]  # one table: every row reads it


def test_sampled_exact_rows_read_the_reference_table_and_pinned_costs_serve_every_row(tiny_target, tiny_draft):
    """By default a sampled "exact" row's draft lengths come from the timing-free reference
    table, whatever the measured one says; greedy and Gumbel rows read the measured table. A
    pinned table (an object or a file) serves every row."""
    from verispec.engine.costs import CostTables, reference_costs

    dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k="auto")
    tables = dec.cost_tables
    assert tables.fixed == reference_costs(tiny_target, dec.drafter, dec.max_k + 2) and tables.measured is dec.costs
    sampled = dec.requests(["ab", "cd"], 4, SamplingParams(temperature=0.8, seed=1))
    greedy, gumbel = dec.requests(["gh", "ij"], 4, SamplingParams(temperature=0.8, seed=2))
    greedy.sampling, greedy.request_id = GREEDY, "g"
    gumbel.method, gumbel.request_id = "gumbel", "u"
    state = dec.start(sampled + [greedy])
    dec.add(state, [gumbel])
    assert state.policy.fixed.tolist() == [True, True, False, False]
    pinned = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k="auto", costs=DEAR)
    assert pinned.cost_tables == CostTables(DEAR, DEAR)


def test_reference_costs_are_bytes_read_and_involve_no_timing(tiny_target, tiny_draft, monkeypatch):
    """v(w) = 1 + 0.05 (w - 1); a draft step = draft bytes / target bytes + 0.02 (0 for prompt
    lookup): computed with every clock broken."""
    from verispec.engine import costs as costs_module

    def no_clock():
        raise AssertionError("the reference table read a clock")

    monkeypatch.setattr(costs_module.time, "perf_counter", no_clock)
    ref = costs_module.reference_costs(tiny_target, ModelDrafter(tiny_draft), 6)
    assert ref.verify == {w: 1 + 0.05 * (w - 1) for w in range(1, 7)}
    linear = sum(m.weight.numel() for m in tiny_draft.model.modules() if isinstance(m, torch.nn.Linear))
    target = sum(m.weight.numel() for m in tiny_target.model.modules() if isinstance(m, torch.nn.Linear))
    assert ref.draft_step == pytest.approx(linear / target + 0.02)
    assert costs_module.reference_costs(tiny_target, PromptLookupDrafter(), 6).draft_step == 0.0
    assert costs_module.reference_costs(tiny_target, HybridDrafter(ModelDrafter(tiny_draft)), 6) == ref


def test_a_pinned_costs_file_is_read_and_a_malformed_one_named(tiny_target, tiny_draft, tmp_path):
    from verispec.engine.costs import load_costs

    good = tmp_path / "costs.json"
    good.write_text(json.dumps(CPU.to_json()))
    assert load_costs(good) == CPU
    dec = SpeculativeDecoder(tiny_target, ModelDrafter(tiny_draft), k="auto", costs=str(good))
    assert dec.cost_tables.fixed == dec.cost_tables.measured == CPU
    bad = tmp_path / "bad.json"
    for text, why in [("not json", "not JSON"), ("[1]", "expected"), ('{"verify": {"x": 1}}', "not a width"),
                      ('{"verify": {"1": -1}}', "finite cost > 0"),
                      ('{"verify": {"1": 1}, "draft_step": "a"}', "draft_step")]:
        bad.write_text(text)
        with pytest.raises(ValueError, match=f"--costs.*{why}"):
            load_costs(bad, "--costs")
    with pytest.raises(ValueError, match="costs: cannot read"):
        SpeculativeDecoder(tiny_target, None, costs=str(tmp_path / "missing.json"))
    with pytest.raises(TypeError, match="costs must be"):
        SpeculativeDecoder(tiny_target, None, costs=3)


def test_generate_and_bench_name_a_malformed_costs_file(tmp_path, capsys):
    """``verispec generate --costs FILE`` and ``verispec bench --costs FILE``: a bad file is a
    one-line error naming --costs (read before any model loads)."""
    from verispec.cli import main

    bad = tmp_path / "bad.json"
    bad.write_text('{"verify": {}}')
    assert main(["generate", "hi", "--costs", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "--costs" in err and "expected" in err and '"verify"' in err, err
    assert main(["bench", "--costs", str(bad)]) == 2  # bench reads it before loading anything
    err = capsys.readouterr().err
    assert "--costs" in err and "expected" in err and '"verify"' in err, err


def test_widths_timed_busy_are_never_kept_as_quiet(tiny_target, tiny_draft, tmp_path, monkeypatch):
    """The in-memory cache of timed widths remembers whether the machine was busy: a new key
    (another drafter) on a quiet machine times the widths again instead of storing the busy
    ones as quiet. (No clock is read: the timing function is replaced.)"""
    from verispec.engine import costs as costs_module

    monkeypatch.setenv("VERISPEC_COSTS", str(tmp_path / "costs.json"))
    monkeypatch.setattr(costs_module, "_CACHE", {})
    cores = costs_module.os.cpu_count() or 1
    timings = iter([{1: 5.0, 2: 6.0}, {1: 1.0, 2: 1.1}])  # busy, then quiet
    monkeypatch.setattr(costs_module, "_time_widths", lambda target, w: next(timings))
    monkeypatch.setattr(costs_module, "_draft_ratio", lambda target, drafter, busy: (0.0, False))
    monkeypatch.setattr(costs_module.os, "getloadavg", lambda: (cores + 2.0, 1.0, 1.0))
    assert measure_pass_costs(tiny_target, None, 2).verify == {1: 5.0, 2: 6.0}
    monkeypatch.setattr(costs_module.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    quiet = measure_pass_costs(tiny_target, PromptLookupDrafter(), 2)  # another key, same widths
    assert quiet.verify == {1: 1.0, 2: 1.1}
    entries = json.loads((tmp_path / "costs.json").read_text())
    assert sorted((e["busy"], e["verify"]["1"]) for e in entries.values()) == [(False, 1.0), (True, 5.0)]


def test_costs_are_measured_once_and_monotone(tiny_target, tiny_draft):
    costs = measure_pass_costs(tiny_target, ModelDrafter(tiny_draft), 6)
    assert set(costs.verify) == set(range(1, 7)) and costs.draft_step > 0
    assert all(costs.verify_cost(w + 1) >= costs.verify_cost(w) for w in range(1, 10))
    assert measure_pass_costs(tiny_target, PromptLookupDrafter(), 6).draft_step == 0.0
    dip = PassCosts({1: 2.0, 4: 1.0, 8: 3.0})
    assert dip.verify_cost(4) == 2.0 and dip.verify_cost(6) == 2.0 and dip.verify_cost(8) == 3.0


def test_each_timed_draft_step_follows_a_target_pass(tiny_target, tiny_draft, tmp_path, monkeypatch):
    """Draft steps are timed as decoding meets them, after a target pass has gone through the
    CPU's caches, not back to back (where a draft model's weights stay cached)."""
    from verispec.engine import costs as costs_module

    monkeypatch.setenv("VERISPEC_COSTS", str(tmp_path / "costs.json"))
    events = []
    real_forward = costs_module.KVRunner.forward

    def forward(self, *a, **kw):
        events.append("target")
        return real_forward(self, *a, **kw)

    drafter = ModelDrafter(tiny_draft)
    real_propose = drafter.propose
    monkeypatch.setattr(costs_module.KVRunner, "forward", forward)
    monkeypatch.setattr(drafter, "propose", lambda ask: events.append("draft") or real_propose(ask))
    measure_pass_costs(tiny_target, drafter, 3)
    drafts = [i for i, e in enumerate(events) if e == "draft"]
    assert len(drafts) == 2 * (costs_module._DRAFT_REPEATS + 1)  # one row, then _DRAFT_ROWS rows
    assert all(events[i - 1] == "target" for i in drafts)


def test_the_draft_step_is_timed_against_the_pass_before_it(tiny_target, tiny_draft, tmp_path, monkeypatch):
    """A slow spell of the machine (here most proposals, each with the pass before it, run 4x
    slower) leaves the measured c = draft step / v(1) at its true ratio: each draft step is
    divided by the target pass timed just before it, not taken in seconds."""
    import time as real_time

    from verispec.engine import costs as costs_module

    monkeypatch.setenv("VERISPEC_COSTS", str(tmp_path / "costs.json"))
    drafter = ModelDrafter(tiny_draft)
    costs_module._STEP_CACHE.pop(drafter, None)
    calls = {"n": 0}
    real_forward, real_propose = costs_module.KVRunner.forward, drafter.propose

    def slow() -> float:  # a slow spell over 7 of the 11 timed proposals (call 0 is the warm-up)
        return 4.0 if 2 <= calls["n"] <= 8 else 1.0

    def forward(self, ids, *a, **kw):
        if ids.shape[1] == 1 and kw.get("logits_to_keep") == 1:
            real_time.sleep(0.02 * slow())  # a one-token pass: 20 ms, or 80 in a slow spell
        return real_forward(self, ids, *a, **kw)

    def propose(ask):  # the draft model runs once; then only the sleeps take time
        d = calls.setdefault("draft", real_propose(ask))
        real_time.sleep(0.002 * slow() * max(1, d.forwards))  # 2 ms a drafted token, 8 when slow
        calls["n"] += 1
        return d

    monkeypatch.setattr(costs_module.KVRunner, "forward", forward)
    monkeypatch.setattr(drafter, "propose", propose)
    monkeypatch.setattr(costs_module, "_CACHE", {})  # widths timed here: v(1) about 20 ms, no slow spell
    monkeypatch.setattr(costs_module, "_draft_ratio_rows", lambda target, drafter, busy: (0.0, False))  # one row here
    costs = measure_pass_costs(tiny_target, drafter, 3)
    c = costs.draft_step / costs.verify[1]
    assert 0.06 < c < 0.2, c  # 2 / 20 = 0.1 (oversleeping on a busy machine adds a little); in seconds: 0.4


def test_the_cost_table_is_kept_per_model_drafter_and_machine(tiny_target, tiny_draft, tmp_path, monkeypatch):
    """A second process (fresh objects, in-memory cache cleared) reads the table the first wrote."""
    from verispec.engine import costs as costs_module

    monkeypatch.setenv("VERISPEC_COSTS", str(tmp_path / "costs.json"))
    first = measure_pass_costs(tiny_target, ModelDrafter(tiny_draft), 5)
    monkeypatch.setattr(costs_module, "_CACHE", {})
    again = measure_pass_costs(tiny_target, ModelDrafter(tiny_draft), 5)
    assert again == first and (tmp_path / "costs.json").exists()
    lookup = measure_pass_costs(tiny_target, PromptLookupDrafter(), 5)  # another drafter: its own entry
    assert lookup.draft_step == 0.0 and set(lookup.verify) == set(first.verify)
    (tmp_path / "costs.json").write_text("not json")  # unreadable: measured again, not an error
    assert measure_pass_costs(tiny_target, PromptLookupDrafter(), 5).draft_step == 0.0
    import json

    data = json.loads((tmp_path / "costs.json").read_text())
    (tmp_path / "costs.json").write_text(json.dumps({k: {"verify": "x"} for k in data}))  # malformed entries
    assert measure_pass_costs(tiny_target, PromptLookupDrafter(), 5).verify.keys() == set(range(1, 6))


def test_a_table_timed_on_a_busy_machine_is_timed_again_once_quiet(tiny_target, tiny_draft, tmp_path, monkeypatch):
    """Timed while other work runs, a table is kept marked busy: every process shares it while the
    machine stays busy (one table, one text per seed), and the first to find the machine quiet
    times it again; a quiet table is never replaced by a busy one."""
    import json

    from verispec.engine import costs as costs_module

    monkeypatch.setenv("VERISPEC_COSTS", str(tmp_path / "costs.json"))
    cores = costs_module.os.cpu_count() or 1
    timings = iter([{1: 5.0, 2: 6.0}, {1: 1.0, 2: 1.1}])  # busy, then quiet (seconds per width)
    monkeypatch.setattr(costs_module, "_time_widths", lambda target, w: next(timings))

    def measure(load: float) -> PassCosts:
        monkeypatch.setattr(costs_module.os, "getloadavg", lambda: (load, 1.0, 1.0))
        monkeypatch.setattr(costs_module, "_CACHE", {})  # a new process
        return measure_pass_costs(tiny_target, ModelDrafter(tiny_draft), 2)

    busy = measure(cores + 2.0)
    assert busy.verify == {1: 5.0, 2: 6.0}
    assert [e["busy"] for e in json.loads((tmp_path / "costs.json").read_text()).values()] == [True]
    assert measure(cores + 2.0) == busy  # still busy: the kept table, not a new one
    quiet = measure(cores - 1.0)
    assert quiet.verify == {1: 1.0, 2: 1.1}
    assert [e["busy"] for e in json.loads((tmp_path / "costs.json").read_text()).values()] == [False]
    assert measure(cores + 2.0) == quiet  # busy again: the quiet table stays


def test_costs_measured_under_other_kernels_are_not_reused(tiny_target, tiny_draft, tmp_path, monkeypatch):
    """The costs file's key holds a digest of the target's kernel plan: a plan measured again
    (here: another kernel for one-row passes) measures the costs again."""
    from verispec.engine import costs as costs_module

    monkeypatch.setenv("VERISPEC_COSTS", str(tmp_path / "costs.json"))
    first = costs_module._kernels_digest(tiny_target, None)
    assert costs_module._kernels_digest(tiny_target, None) == first
    lin = next(m for m in tiny_target.model.modules() if isinstance(m, torch.nn.Linear))
    monkeypatch.setattr(lin, "kernel_rows", ("packed",) + ("plain",) * 15, raising=False)
    monkeypatch.setattr(lin, "kernel_beyond", "plain", raising=False)
    assert costs_module._kernels_digest(tiny_target, None) != first


def test_rejected_copies_do_not_count_against_the_model_drafts_first_token():
    """A hybrid row whose copied chains (no confidence: NaN) keep failing at their first token
    still drafts model tokens: only the model's own first tokens calibrate bucket 0."""
    k = rows(1)
    copies = torch.full((1, 4), math.nan, dtype=torch.float64)
    for _ in range(100):
        evidence = k.observe(torch.tensor([0]), torch.tensor([4]), copies)
    assert evidence[0].sum() == 0  # nothing tested that the policy calibrates
    assert k.predict(torch.tensor([0])).item() == pytest.approx(0.5)
    assert k.ask(torch.tensor([20]), CPU, scoring=True)[0].item() == 8
    k.observe(torch.tensor([0]), torch.tensor([4]), torch.full((1, 4), 0.5, dtype=torch.float64))
    assert k.tried[0, 0] == 1 and k.passed[0, 0] == 0  # a model draft's first token does count


def test_retimed_tables_are_timed_once_in_the_process_whatever_the_file_holds(tiny_target, tiny_draft, tmp_path,
                                                                              monkeypatch):
    """``retime_costs()`` (what ``verispec bench`` does): a table kept in the file is timed again
    once, served for the rest of the process and written over the file's; a busy timing serves the
    process but never replaces a quiet table; ``retime_costs(False)`` reads the file again."""
    import json

    from verispec.engine import costs as costs_module

    monkeypatch.setenv("VERISPEC_COSTS", str(tmp_path / "costs.json"))
    cores = costs_module.os.cpu_count() or 1
    load = [cores - 1.0]
    monkeypatch.setattr(costs_module.os, "getloadavg", lambda: (load[0], 1.0, 1.0))
    timings = iter([{1: 5.0, 2: 6.0}, {1: 1.0, 2: 1.1}, {1: 3.0, 2: 3.3}])
    timed = []
    monkeypatch.setattr(costs_module, "_time_widths", lambda target, w: timed.append(w) or next(timings))
    monkeypatch.setattr(costs_module, "_CACHE", {})

    def measure() -> PassCosts:
        return measure_pass_costs(tiny_target, ModelDrafter(tiny_draft), 2)

    def kept() -> dict:
        return {k: v["verify"] for k, v in json.loads((tmp_path / "costs.json").read_text()).items()}

    try:
        assert measure().verify == {1: 5.0, 2: 6.0}  # the file's table, timed by an earlier process
        assert measure().verify == {1: 5.0, 2: 6.0} and len(timed) == 1
        costs_module.retime_costs()
        writes = []
        write = costs_module._write_costs
        monkeypatch.setattr(costs_module, "_write_costs", lambda *a: writes.append(a) or write(*a))
        assert measure().verify == {1: 1.0, 2: 1.1} and len(timed) == 2  # afresh, though the file had one
        assert measure().verify == {1: 1.0, 2: 1.1} and len(timed) == 2  # once per process
        assert len(writes) == 1  # served from the process's own table, not timed and written again
        assert list(kept().values()) == [{"1": 1.0, "2": 1.1}]
        load[0] = cores + 2.0
        costs_module.retime_costs()  # a new run on a busy machine
        assert measure().verify == {1: 3.0, 2: 3.3} and measure().verify == {1: 3.0, 2: 3.3}
        assert list(kept().values()) == [{"1": 1.0, "2": 1.1}]  # the quiet table stays in the file
    finally:
        costs_module.retime_costs(False)
    assert measure().verify == {1: 1.0, 2: 1.1} and len(timed) == 3  # the file again
