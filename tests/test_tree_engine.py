"""Draft trees in the engine (``k="tree"``): texts, the node-budget policy and its calibration.

The law of sampled texts is G-tested in tests/test_engine_law.py (the "tree" cases); here: greedy
and Gumbel texts are target-only's whatever the trees, in mixed batches, and the policy keeps
the prefix of a tree that pays for its pass.
"""

from __future__ import annotations

import pytest
import torch

from verispec.drafters import EagleDrafter, ModelDrafter
from verispec.engine import Request, SpeculativeDecoder
from verispec.engine.costs import PassCosts
from verispec.engine.kpolicy import KRows, check_k
from verispec.sampling import SamplingParams
from verispec.testing import tiny_eagle, tiny_llama

V = 40
CHEAP = PassCosts({w: 1.0 + 0.02 * (w - 1) for w in range(1, 20)}, draft_step=0.02)  # wide passes almost free
STEEP = PassCosts({w: 1.0 + 0.9 * (w - 1) for w in range(1, 20)}, draft_step=0.02)  # each column costs a pass
PROMPTS = ["abcab", "ba", "cabbage and beans", "a"]
GREEDY = SamplingParams(temperature=0.0)
WARM = SamplingParams(temperature=0.9, top_p=0.95)


@pytest.fixture(scope="module")
def target():
    return tiny_llama(vocab_size=V, seed=5, dtype=torch.float64, initializer_range=0.4)


@pytest.mark.parametrize("costs", [CHEAP, STEEP], ids=["cheap", "steep"])
def test_greedy_tree_texts_are_target_only(target, costs) -> None:
    want = SpeculativeDecoder(target, None).generate(PROMPTS, 24, GREEDY).token_ids
    dec = SpeculativeDecoder(target, EagleDrafter(tiny_eagle(target, seed=3)), k="tree", costs=costs)
    res = dec.generate(PROMPTS, 24, GREEDY)
    assert res.token_ids == want
    if costs is CHEAP:  # trees were drafted and verified: passes wider than a chain of max_k
        assert max(res.stats.verify_width_seconds) > 4


def test_gumbel_tree_texts_are_target_only_gumbel_texts(target) -> None:
    seeds = list(range(7, 7 + len(PROMPTS)))
    want = SpeculativeDecoder(target, None, method="gumbel").generate(PROMPTS, 24, WARM, seeds=seeds).token_ids
    dec = SpeculativeDecoder(target, EagleDrafter(tiny_eagle(target, seed=3)), k="tree", costs=CHEAP, method="gumbel")
    assert dec.generate(PROMPTS, 24, WARM, seeds=seeds).token_ids == want


def test_a_mixed_batch_keeps_each_rows_text(target) -> None:
    """Greedy, Gumbel and exact sampled rows in one tree batch: the greedy and Gumbel rows write
    target-only's texts; an exact row's text is its own alone or in the batch."""
    drafter = lambda: EagleDrafter(tiny_eagle(target, seed=3))  # noqa: E731
    reqs = [Request(PROMPTS[0], 20, GREEDY, request_id="g"),
            Request(PROMPTS[1], 20, SamplingParams(temperature=0.9, top_p=0.95, seed=3), method="gumbel", request_id="u"),
            Request(PROMPTS[2], 20, SamplingParams(temperature=0.9, top_p=0.95, seed=4), request_id="x")]
    dec = SpeculativeDecoder(target, drafter(), k="tree", costs=CHEAP)
    together = {o.request_id: o.completion.token_ids for o in dec.run(reqs) if o.completion is not None}
    assert together["g"] == SpeculativeDecoder(target, None).generate([PROMPTS[0]], 20, GREEDY).token_ids[0]
    gumbel = SpeculativeDecoder(target, None, method="gumbel").generate([PROMPTS[1]], 20, reqs[1].sampling)
    assert together["u"] == gumbel.token_ids[0]
    alone = SpeculativeDecoder(target, drafter(), k="tree", costs=CHEAP)
    assert together["x"] == [o.completion.token_ids for o in alone.run([reqs[2]]) if o.completion][0]


def test_tree_rows_with_a_chain_drafter_draft_chains(target) -> None:
    """A drafter that cannot draft trees is asked for chains: "tree" behaves as "auto"."""
    draft = tiny_llama(vocab_size=V, seed=6, dtype=torch.float64, initializer_range=0.4)
    a = SpeculativeDecoder(target, ModelDrafter(draft), k="tree", costs=CHEAP).generate(PROMPTS, 16, GREEDY)
    b = SpeculativeDecoder(target, ModelDrafter(draft), k="auto", costs=CHEAP).generate(PROMPTS, 16, GREEDY)
    assert a.token_ids == b.token_ids and a.stats.target_forwards == b.stats.target_forwards


def test_tree_is_a_k_policy() -> None:
    assert check_k("tree") == "tree"
    with pytest.raises(ValueError, match="'tree'"):
        check_k("trees")


# ----------------------------------------------------------------------------------------------
# The node-budget policy

def _tree(parents: list[list[int]], estimate: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor(parents), torch.tensor(estimate, dtype=torch.float64)


def _policy(B: int, policies: list) -> KRows:
    p = KRows(8)
    p.add(policies)
    return p


def test_cut_tree_keeps_the_prefix_that_maximises_tokens_per_second() -> None:
    """E_W = 1 + the reach of the first W nodes; W maximises E_W / v(W + 1). Estimates near the
    prior strength's pull: the test compares with the same formula computed by hand."""
    parents, est = _tree([[-1, -1, 0, 0, 2, -1]], [[0.9, 0.5, 0.8, 0.3, 0.7, 0.2]])
    for costs in (CHEAP, STEEP):
        p = _policy(1, ["tree"])
        W = int(p.cut_tree(torch.tensor([6]), parents, est, costs)[0])
        a = p.predict_nodes(est)[0]
        reach = []
        for i, par in enumerate(parents[0].tolist()):
            reach.append(float(a[i]) * (reach[par] if par >= 0 else 1.0))
        rate = [(1 + sum(reach[:w])) / costs.table(7)[w + 1].item() for w in range(7)]
        assert W == max(range(7), key=lambda w: rate[w])
    assert int(_policy(1, ["tree"]).cut_tree(torch.tensor([6]), parents, est, CHEAP)[0]) == 6
    assert int(_policy(1, ["tree"]).cut_tree(torch.tensor([6]), parents, est, STEEP)[0]) <= 1


def test_in_a_batch_tree_rows_share_the_pass_others_make_wide() -> None:
    """Rows of fixed K keep their drafts, and the pass they make wide is free for the tree rows;
    tree rows alone in a batch are cut together where the pass stops paying."""
    parents, est = _tree([[-1, 0, 1], [-1, 0, 1]], [[0.1, 0.1, 0.1], [0.1, 0.1, 0.1]])
    assert _policy(2, [3, "tree"]).cut_tree(torch.tensor([3, 3]), parents, est, STEEP).tolist() == [3, 3]
    assert _policy(2, ["tree", "tree"]).cut_tree(torch.tensor([3, 3]), parents, est, STEEP).tolist() == [0, 0]
    sure = torch.full((2, 3), 0.9, dtype=torch.float64)
    assert _policy(2, ["tree", "tree"]).cut_tree(torch.tensor([3, 2]), parents, sure, CHEAP).tolist() == [3, 2]


def test_observe_tree_counts_nodes_under_the_path() -> None:
    """Tested: the root's children and the children of accepted nodes; accepted: the path."""
    from verispec.engine.kpolicy import buckets_of
    parents, est = _tree([[-1, -1, 0, 0, 2, 1]], [[0.95, 0.55, 0.85, 0.35, 0.75, 0.15]])
    p = _policy(1, ["tree"])
    path = torch.tensor([[0, 2, -1, -1, -1, -1]])  # root -> 0 -> 2; 4 (under 2) rejected; 5 under rejected 1
    p.observe_tree(path, parents, torch.tensor([6]), est)
    b = buckets_of(est)[0].tolist()  # one bucket per node here
    assert len(set(b)) == 6
    assert [p.node_tried[0, b[i]].item() for i in range(6)] == [1, 1, 1, 1, 1, 0]
    assert [p.node_passed[0, b[i]].item() for i in range(6)] == [1, 0, 1, 0, 0, 0]


def test_tree_stats_count_depths_and_sibling_ranks() -> None:
    """Per (depth, rank): tested under the root or an accepted node, accepted on the path; the
    chain statistics see the path plus one rejected slot, none when the path ends at a leaf."""
    from verispec.engine.stats import GenerationStats, account, account_tree, tree_depths
    from verispec.verify import Verification

    parents = torch.tensor([[-1, -1, 0, 0, 2, 1], [-1, 0, -1, 1, 0, 0]])
    path = torch.tensor([[0, 2, 4, -1, -1, -1], [2, -1, -1, -1, -1, -1]])  # row 0 ends at leaf 4
    n_acc = torch.tensor([3, 1])
    K = 6
    out = Verification(torch.zeros(2, K + 1, dtype=torch.int64), n_acc, n_acc + 1,
                       torch.arange(K)[None] < n_acc[:, None], torch.tensor([6, 6]), path)
    st = GenerationStats()
    seen = tree_depths(out, parents, torch.tensor([6, 6]))
    assert seen.tolist() == [3, 1]  # row 0: a bonus after leaf 4; row 1: node 2 is a leaf too
    account(st, out, torch.tensor([6, 6]), seen)
    account_tree(st, out, parents, torch.tensor([6, 6]))
    assert st.rejected == 0 and st.accepted == 4 and st.drafted == 12
    # row 0: depth 1 ranks 0, 1 tested (0 accepted); depth 2 under node 0: ranks 0 (acc), 1; depth 3: node 4 (acc)
    # row 1: depth 1: nodes 0 (rank 0), 2 (rank 1, accepted); node 2 has no children
    assert st.tree_tested == {(1, 0): 2, (1, 1): 2, (2, 0): 1, (2, 1): 1, (3, 0): 1}
    assert st.tree_accepted == {(1, 0): 1, (1, 1): 1, (2, 0): 1, (3, 0): 1}


def test_a_tree_generation_reports_acceptance_by_depth_and_rank(target) -> None:
    dec = SpeculativeDecoder(target, EagleDrafter(tiny_eagle(target, seed=3)), k="tree", costs=CHEAP)
    st = dec.generate(PROMPTS, 24, GREEDY).stats
    assert (1, 0) in st.tree_tested and (1, 1) in st.tree_tested
    assert all(st.tree_accepted.get(k, 0) <= n for k, n in st.tree_tested.items())
    assert "tree_acceptance" in st.as_dict()


def test_greedy_trees_take_the_argmax_path_and_emit_what_the_general_path_does(target, monkeypatch, trees_always) -> None:
    from verispec.engine import step as step_mod

    def run():
        dec = SpeculativeDecoder(target, EagleDrafter(tiny_eagle(target, seed=3)), k="tree", costs=CHEAP)
        res = dec.generate(PROMPTS, 20, GREEDY)
        return res.token_ids, res.stats.tree_tested

    fast = run()
    monkeypatch.setattr(step_mod, "_argmax_rows", lambda params, d: torch.zeros(len(params), dtype=torch.bool))
    assert run() == fast


def test_rows_of_other_policies_keep_their_text_beside_tree_rows(target) -> None:
    """A batch drafts trees only when every drafting row is a "tree" row: a seeded sampled row of
    K = 4 or "auto" writes, beside a "tree" row, the text it writes alone."""
    def req(i: int, k) -> Request:
        return Request(PROMPTS[i], 20, SamplingParams(temperature=0.9, seed=52 + i), k=k, request_id=i)

    def run(reqs: list[Request]) -> dict:
        dec = SpeculativeDecoder(target, EagleDrafter(tiny_eagle(target, seed=3)), k="tree", costs=CHEAP)
        return {o.request_id: o.completion.token_ids for o in dec.run(reqs) if o.completion is not None}

    together = run([req(0, 4), req(1, "auto"), req(2, "tree")])
    assert min(len(t) for t in together.values()) >= 16  # long texts: many draws after the first
    assert together[0] == run([req(0, 4)])[0]
    assert together[1] == run([req(1, "auto")])[1]


# ----------------------------------------------------------------------------------------------
# Trees or chains: what each mode has given a row

def _run_modes(p: KRows, tokens: dict[bool, float], passes: int) -> list[bool]:
    """``passes`` passes of one "tree" row that drafts what :meth:`KRows.wants_trees` says and
    gets ``tokens[mode]`` tokens from each, every step taking 10 ms (a 9-column tree pass of 4
    forwards feeding 13 nodes, or a 5-column chain pass of 4 forwards)."""
    wants = []
    for _ in range(passes):
        tree = bool(p.wants_trees()[0])
        wants.append(tree)
        p.observe_mode(tree, torch.tensor([tokens[tree]]), 9 if tree else 5, 4, 13 if tree else 0, CHEAP, 0.01)
    return wants


@pytest.mark.parametrize("trees_win", [False, True])
def test_a_tree_row_warms_up_then_drafts_the_mode_that_gives_more(trees_win) -> None:
    from verispec.engine.kpolicy import MODE_PROBE, MODE_WARMUP

    p = _policy(1, ["tree"])
    p.asked = torch.tensor([8])
    wants = _run_modes(p, {True: 3.0 if trees_win else 2.0, False: 2.2}, 2 * MODE_WARMUP + 3 * MODE_PROBE + 3)
    assert wants[:2 * MODE_WARMUP] == [True] * MODE_WARMUP + [False] * MODE_WARMUP
    after = wants[2 * MODE_WARMUP:]
    other = [i for i, w in enumerate(after) if w != trees_win]  # the tries of the worse mode
    assert 2 <= len(other) <= 3 and all(b - a > MODE_PROBE for a, b in zip(other, other[1:])), after


def test_rows_not_asked_to_draft_or_not_tree_rows_give_no_evidence() -> None:
    p = _policy(3, ["tree", "tree", "auto"])
    p.asked = torch.tensor([4, 0, 4])
    p.observe_mode(True, torch.tensor([3, 3, 3]), 9, 4, 13, CHEAP, 0.01)
    assert p.mode_passes.tolist() == [[0, 1], [0, 0], [0, 0]]
    assert p.mode_tokens[0, 1].item() == 3.0 and p.mode_tokens[1:].abs().sum().item() == 0.0


def test_a_measured_row_counts_the_wall_clock_a_fixed_row_its_table() -> None:
    """A measured row's pass costs the step's seconds (what a tree's drafting really took); a
    fixed (seeded sampled) row's its timing-free table: v(width) and a draft step per node fed."""
    from verispec.engine.costs import CostTables

    measured = PassCosts({w: 1.0 + 0.1 * (w - 1) for w in range(1, 20)}, draft_step=0.05)
    fixed = PassCosts({w: 1.0 + 0.3 * (w - 1) for w in range(1, 20)}, draft_step=0.02)
    p = KRows(8)
    p.add(["tree", "tree"], fixed=[False, True])
    p.asked = torch.tensor([8, 8])
    p.observe_mode(True, torch.tensor([2, 2]), 9, 4, 13, CostTables(measured, fixed), 0.031)
    assert p.mode_cost[:, 1].tolist() == pytest.approx([0.031, fixed.verify_cost(9) + 13 * 0.02])
    p.observe_mode(False, torch.tensor([2, 2]), 5, 4, 0, CostTables(measured, fixed), 0.027)
    assert p.mode_cost[:, 0].tolist() == pytest.approx([0.027, fixed.verify_cost(5) + 4 * 0.02])


def test_the_engine_drafts_trees_then_chains_as_the_warm_up_says(target, monkeypatch) -> None:
    import verispec.engine.kpolicy as kpolicy

    monkeypatch.setattr(kpolicy, "MODE_WARMUP", 2)  # the tiny target ends its answers early
    drafter = EagleDrafter(tiny_eagle(target, seed=3))
    asked = []
    propose = drafter.propose
    monkeypatch.setattr(drafter, "propose", lambda a: (asked.append(a.nodes is not None), propose(a))[1])
    dec = SpeculativeDecoder(target, drafter, k="tree", costs=CHEAP)
    res = dec.generate(["ba"], 40, GREEDY)
    assert res.token_ids == SpeculativeDecoder(target, None).generate(["ba"], 40, GREEDY).token_ids
    assert asked[:4] == [True, True, False, False], asked


def test_measured_rows_start_from_what_earlier_requests_learned_fixed_rows_do_not() -> None:
    """A decoder's memory of the two modes: once both were seen, a new measured row skips the
    warm-up and drafts the better mode (chains here); a fixed row ignores it (its text depends on
    its own history only) and warms up with trees."""
    from verispec.engine.kpolicy import MODE_WARMUP, ModeMemory

    memory = ModeMemory()
    first = KRows(8, memory)
    first.add(["tree"])
    first.asked = torch.tensor([8])
    _run_modes(first, {True: 2.0, False: 2.4}, 2 * MODE_WARMUP + 4)
    assert memory.known() and memory.passes.sum().item() == 2 * MODE_WARMUP + 4
    later = KRows(8, memory)
    later.add(["tree", "tree"], fixed=[False, True])
    assert later.wants_trees().tolist() == [False, True]
    fixed_only = KRows(8, ModeMemory())
    fixed_only.add(["tree"], fixed=[True])
    fixed_only.asked = torch.tensor([8])
    fixed_only.observe_mode(False, torch.tensor([3]), 5, 4, 0, CHEAP, 0.01)
    assert fixed_only.memory.passes.sum().item() == 0  # fixed rows teach the memory nothing
