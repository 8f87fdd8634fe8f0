"""KVRunner: tree passes, committing a path, rows leaving and joining a batch.

Every check compares against a fresh runner fed the same tokens as plain chains (the form the
runner computed before trees and continuous batching existed), at float64.
"""

from __future__ import annotations

import pytest
import torch

from verispec.kv import KVRunner, left_pad


def chain_logits(model, context: list[int], path: list[int]) -> torch.Tensor:
    """Logits ``[len(path), V]`` of ``path`` fed after ``context`` to a fresh one-row runner."""
    r = KVRunner(model, 1)
    r.forward(torch.tensor([context]))
    return r.forward(torch.tensor([path]))[0]


# A tree over 6 new columns: 0 <- root; 1, 2 <- 0; 3 <- 1; 4 <- root; 5 <- 4
PARENTS = [-1, 0, 0, 1, -1, 4]
TOKENS = [7, 8, 9, 10, 11, 12]


def paths(parents: list[int]) -> list[list[int]]:
    """Per column, its root-to-column path of column indices."""
    out = []
    for t, p in enumerate(parents):
        out.append((out[p] if p >= 0 else []) + [t])
    return out


def test_a_tree_pass_gives_every_node_the_logits_of_its_own_chain(tiny_target) -> None:
    model = tiny_target.model
    contexts = [[5, 6, 7, 8], [9, 10]]
    r = KVRunner(model, 2)
    feed, live = left_pad(contexts)
    r.forward(feed, live)
    tokens = torch.tensor([TOKENS, TOKENS[::-1]])
    parents = torch.tensor([PARENTS, PARENTS])
    logits = r.forward(tokens, parents=parents)  # [2, 6, V]
    for b, ctx in enumerate(contexts):
        for t, path in enumerate(paths(PARENTS)):
            want = chain_logits(model, ctx, tokens[b, path].tolist())[-1]
            torch.testing.assert_close(logits[b, t], want, rtol=0, atol=1e-12)


def test_a_chain_given_as_parents_equals_the_plain_chain_pass(tiny_target) -> None:
    model = tiny_target.model
    a, b = KVRunner(model, 1), KVRunner(model, 1)
    for r in (a, b):
        r.forward(torch.tensor([[3, 4, 5]]))
    x = a.forward(torch.tensor([[6, 7, 8]]))
    y = b.forward(torch.tensor([[6, 7, 8]]), parents=torch.tensor([[-1, 0, 1]]))
    torch.testing.assert_close(x, y, rtol=0, atol=1e-12)
    assert torch.equal(a.lengths, b.lengths) and torch.equal(a.col_pos, b.col_pos)


def test_commit_keeps_one_path_and_the_next_pass_sees_only_it(tiny_target) -> None:
    model = tiny_target.model
    r = KVRunner(model, 1)
    r.forward(torch.tensor([[5, 6, 7]]))
    r.forward(torch.tensor([TOKENS]), parents=torch.tensor([PARENTS]))
    kept = torch.zeros(1, 6, dtype=torch.bool)
    kept[0, [0, 1, 3]] = True  # the path 0 -> 1 -> 3
    r.commit(kept)
    assert r.lengths.tolist() == [6]
    got = r.forward(torch.tensor([[20, 21]]))[0]
    want = chain_logits(model, [5, 6, 7], [TOKENS[0], TOKENS[1], TOKENS[3], 20, 21])[-2:]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_a_tree_needs_topological_parents(tiny_target) -> None:
    r = KVRunner(tiny_target.model, 1)
    with pytest.raises(ValueError, match="earlier column"):
        r.forward(torch.tensor([[1, 2]]), parents=torch.tensor([[1, -1]]))


def test_rows_leave_and_join_without_changing_any_rows_logits(tiny_target) -> None:
    """select drops rows (and columns no row uses); extend appends rows prefilled on their own."""
    model = tiny_target.model
    ctx = {"a": [5, 6, 7, 8, 9, 10, 11], "b": [12, 13], "c": [14, 15, 16]}
    r = KVRunner(model, 2)
    feed, live = left_pad([ctx["a"], ctx["b"]])
    r.forward(feed, live)
    r.select(torch.tensor([1]))  # "a" leaves: b's left padding holes go with it
    assert r.num_columns == 2
    new = KVRunner(model, 1)
    new.forward(torch.tensor([ctx["c"]]))
    r.extend(new)  # rows: b, c
    got = r.forward(torch.tensor([[30, 31], [32, 33]]))
    torch.testing.assert_close(got[0], chain_logits(model, ctx["b"], [30, 31]), rtol=0, atol=1e-12)
    torch.testing.assert_close(got[1], chain_logits(model, ctx["c"], [32, 33]), rtol=0, atol=1e-12)


def test_extend_into_an_empty_runner_and_select_of_no_rows(tiny_target) -> None:
    model = tiny_target.model
    r = KVRunner(model, 0)
    new = KVRunner(model, 1)
    new.forward(torch.tensor([[5, 6, 7]]))
    r.extend(new)
    torch.testing.assert_close(r.forward(torch.tensor([[8]]))[0], chain_logits(model, [5, 6, 7], [8]),
                               rtol=0, atol=1e-12)
    r.select(torch.zeros(0, dtype=torch.int64))
    assert r.num_columns == 0 and len(r.lengths) == 0


def test_prefill_joins_rows_of_any_lengths_without_padding_them_together(tiny_target):
    """Rows of equal length share a pass, others get their own; the joined runner continues each
    row exactly as a runner of that row alone, in the order given, and each row's logits after
    its last token are that runner's (NaN for an empty row, which has none)."""
    from verispec.kv import prefill

    model = tiny_target.model
    rows = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14], [], [15]]
    runner, logits, hidden = prefill(model, rows, return_hidden=True)
    assert runner.lengths.tolist() == [4, 2, 4, 0, 1]
    assert [h.shape[0] for h in hidden] == [4, 2, 4, 0, 1]
    assert logits.shape == (5, model.config.vocab_size) and bool(logits[3].isnan().all())
    got = runner.forward(torch.tensor([[30], [31], [32], [33], [34]]))[:, -1]
    for b, ctx in enumerate(rows):
        alone = KVRunner(model, 1)
        if ctx:
            torch.testing.assert_close(logits[b], alone.forward(torch.tensor([ctx]))[0, -1], rtol=0, atol=1e-12)
        torch.testing.assert_close(got[b], alone.forward(torch.tensor([[30 + b]]))[0, -1], rtol=0, atol=1e-12)


def test_extend_with_runners_rolled_back_to_nothing(tiny_target):
    """A runner whose columns were all cropped away (initialised layers, no column) joins cleanly."""
    model = tiny_target.model
    empty = KVRunner(model, 1)
    empty.forward(torch.tensor([[5, 6]]))
    empty.truncate(torch.tensor([0]))  # layers initialised, no column left
    assert empty.num_columns == 0
    r = KVRunner(model, 0)
    r.extend(empty, KVRunner(model, 1))
    got = r.forward(torch.tensor([[7], [8]]))[:, -1]
    for b, tok in enumerate((7, 8)):
        torch.testing.assert_close(got[b], KVRunner(model, 1).forward(torch.tensor([[tok]]))[0, -1], rtol=0, atol=1e-12)


def test_joined_rows_sit_in_the_newest_columns_and_the_oldest_leave_with_their_rows(tiny_target) -> None:
    """Continuous batching: a narrower row that joins takes the cache's last columns (holes
    first), so when the oldest row leaves its columns are cropped off the front without a copy,
    and every row still gets the logits it has alone."""
    from verispec.kv.layer import GrowingLayer

    model = tiny_target.model
    r = KVRunner(model, 1)
    old = [5, 6, 7, 8, 9, 10, 11, 12]
    r.forward(torch.tensor([old]))
    for t in (20, 21):
        r.forward(torch.tensor([[t]]))
    old += [20, 21]
    new = KVRunner(model, 1)
    new.forward(torch.tensor([[13, 14, 15]]))
    r.extend(new)
    assert r.num_columns == 10
    assert r.col_pos[1].tolist() == [-1] * 7 + [0, 1, 2]  # right-aligned behind its holes
    r.forward(torch.tensor([[22], [16]]))
    old, young = old + [22], [13, 14, 15, 16]
    layer = r.cache.layers[0]
    assert isinstance(layer, GrowingLayer)
    buf = layer._kbuf.data_ptr()
    r.select(torch.tensor([1]))  # the oldest row leaves: its 7 columns before the young row's go
    assert r.num_columns == 4 and r.col_pos.tolist() == [[0, 1, 2, 3]]
    assert layer._kbuf.data_ptr() == buf, "cropping the front copied the cache"
    got = r.forward(torch.tensor([[17]]))[0]
    torch.testing.assert_close(got, chain_logits(model, young, [17]), rtol=0, atol=1e-12)
    assert layer._kbuf.data_ptr() == buf


def test_a_tree_grown_a_depth_per_call_gives_every_node_the_logits_of_its_own_chain(tiny_target) -> None:
    """``visible``: depth 2 fed after depth 1 is cached; each node sees its own ancestors only (a
    tree drafter grows its tree this way). Without the mask a node would see its parent's siblings."""
    model = tiny_target.model
    context = [5, 6, 7, 8]
    r = KVRunner(model, 1)
    r.forward(torch.tensor([context]))
    L = r.col_pos.shape[1]
    depth1 = torch.tensor([[7, 8, 9]])  # three children of the root
    r.forward(depth1, parents=torch.full_like(depth1, -1), visible=torch.ones(1, 3, L, dtype=torch.bool))
    depth2 = torch.tensor([[10, 11, 12]])  # under depth-1 nodes 0, 0 and 2
    under = [0, 0, 2]
    visible = torch.ones(1, 3, L + 3, dtype=torch.bool)
    visible[0, :, L:] = False
    for t, p in enumerate(under):
        visible[0, t, L + p] = True
    got = r.forward(depth2, parents=torch.full_like(depth2, -1), visible=visible)[0]
    for t, p in enumerate(under):
        want = chain_logits(model, context, [int(depth1[0, p]), int(depth2[0, t])])[-1]
        torch.testing.assert_close(got[t], want, rtol=0, atol=1e-12)
    assert r.col_pos[0, L + 3:].tolist() == [len(context) + 1] * 3  # depth 2's position
