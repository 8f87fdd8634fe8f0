"""GrowingLayer: in-place appends give the same cache (and logits) as HF's concatenating layer,
and they really are in place."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

from verispec.kv.layer import GrowingLayer
from verispec.kv import KVRunner


def _states(B: int, T: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, 2, T, 4, generator=g), torch.randn(B, 2, T, 4, generator=g)


def test_appends_crops_and_row_selects_match_the_concatenating_layer() -> None:
    grow, plain = GrowingLayer(), DynamicLayer()
    ops = [("add", 5), ("add", 1), ("crop", 2), ("add", 3), ("add", 1), ("select", None), ("add", 2),
           ("crop", 1), ("crop", 3), ("add", 40), ("add", 1)]
    B = 3
    for i, (op, n) in enumerate(ops):
        if op == "add":
            k, v = _states(B, n, seed=i)
            got, want = grow.update(k, v), plain.update(k, v)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        elif op == "crop":
            grow.crop(-n)
            plain.crop(-n)
        else:
            rows = torch.tensor([2, 0])
            grow.keys, grow.values = grow.keys[rows], grow.values[rows]
            plain.keys, plain.values = plain.keys[rows], plain.values[rows]
            B = 2
        assert torch.equal(grow.keys, plain.keys) and torch.equal(grow.values, plain.values)
        assert grow.get_seq_length() == plain.get_seq_length()


def test_appends_write_into_one_buffer_until_it_is_full() -> None:
    layer = GrowingLayer()
    layer.update(*_states(2, 8, seed=0))
    start = layer.keys.data_ptr()
    for i in range(4):  # 8 + 4 columns fit the first buffer (8 + 16 spare)
        layer.update(*_states(2, 1, seed=i + 1))
        assert layer.keys.data_ptr() == start, "an append within capacity copied the cache"
    layer.crop(-3)  # a crop keeps the buffer and its room
    layer.update(*_states(2, 1, seed=9))
    assert layer.keys.data_ptr() == start
    layer.update(*_states(2, 64, seed=10))  # past capacity: one reallocation, contents kept
    assert layer.keys.shape[2] == 8 + 4 - 3 + 1 + 64


def test_a_reset_layer_starts_afresh() -> None:
    layer = GrowingLayer()
    layer.update(*_states(2, 3, seed=0))
    layer.keys = layer.values = None
    layer.is_initialized = False
    k, v = _states(4, 2, seed=1)
    got_k, got_v = layer.update(k, v)
    assert torch.equal(got_k, k) and torch.equal(got_v, v)


def test_a_runner_on_growing_layers_gives_the_logits_of_a_fresh_prefill(tiny_target) -> None:
    """Steps with rollbacks (crops), a row leaving and rows joining, against one pass per row."""
    model = tiny_target.model
    r = KVRunner(model, 2)
    assert all(isinstance(layer, GrowingLayer) for layer in r.cache.layers)
    seqs = [[5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]
    r.forward(torch.tensor(seqs))
    r.forward(torch.tensor([[20, 21, 22], [23, 24, 25]]))
    r.commit(torch.tensor([[True, False, False], [True, True, False]]))  # a rejected tail: crop
    seqs = [seqs[0] + [20], seqs[1] + [23, 24]]
    other = KVRunner(model, 1)
    other.forward(torch.tensor([[30, 31, 32]]))
    r.select(torch.tensor([1]))
    r.extend(other)
    seqs = [seqs[1], [30, 31, 32]]
    got = r.forward(torch.tensor([[40], [41]]))[:, -1]
    for b, s in enumerate(seqs):
        fresh = KVRunner(model, 1).forward(torch.tensor([s + [[40], [41]][b]]))[0, -1]
        torch.testing.assert_close(got[b], fresh)


def test_dropping_rows_moves_only_the_last_rows_into_their_places() -> None:
    grow, plain = GrowingLayer(), DynamicLayer()
    k, v = _states(5, 6, seed=0)
    grow.update(k, v)
    plain.update(k, v)
    start = grow.keys.data_ptr()
    rows = torch.tensor([0, 4, 2, 3])  # row 1 leaves, row 4 takes its place (engine.step.fill_holes)
    grow.select_rows(rows)
    plain.keys, plain.values = plain.keys[rows], plain.values[rows]
    assert grow.keys.data_ptr() == start, "dropping one row copied the cache"
    assert torch.equal(grow.keys, plain.keys) and torch.equal(grow.values, plain.values)
    grow.select_rows(torch.tensor([3, 2, 1, 0]))  # a general permutation is still right (by copy)
    assert torch.equal(grow.keys, plain.keys[[3, 2, 1, 0]])


def test_added_rows_go_into_spare_rows_and_the_newest_columns() -> None:
    grow = GrowingLayer()
    k, v = _states(4, 6, seed=0)
    grow.update(k, v)
    grow.select_rows(torch.tensor([0, 1]))  # two rows free
    start = grow.keys.data_ptr()
    nk, nv = _states(2, 3, seed=1)
    grow.add_rows(nk, nv)
    assert grow.keys.data_ptr() == start, "adding rows into free rows copied the cache"
    assert grow.keys.shape == (4, 2, 6, 4)
    assert torch.equal(grow.keys[:2], k[:2]) and torch.equal(grow.keys[2:, :, 3:], nk)  # right-aligned
    assert torch.isfinite(grow.keys).all()  # hole columns hold finite values (masked, never NaN)
    wide_k, wide_v = _states(1, 9, seed=2)  # a row wider than the cache widens it
    grow.add_rows(wide_k, wide_v)
    assert grow.keys.shape == (5, 2, 9, 4) and torch.equal(grow.keys[4], wide_k[0])
    assert torch.equal(grow.keys[:2, :, :6], k[:2]) and torch.isfinite(grow.keys).all()


def test_fill_holes_keeps_rows_in_place_and_moves_the_last_ones() -> None:
    from verispec.engine.step import fill_holes

    assert fill_holes([0, 2, 3, 5], 6) == [0, 5, 2, 3]
    assert fill_holes([0, 1, 2], 3) == [0, 1, 2]
    assert fill_holes([], 4) == []
    assert sorted(fill_holes([1, 3, 4, 6, 7], 8)) == [1, 3, 4, 6, 7]


def test_a_crop_of_the_front_keeps_the_buffer_and_appends_stay_in_place() -> None:
    """A window ``[:, :, s:]`` of the buffer is adopted as it is: no copy at the crop, none at the
    next appends, the same contents as the concatenating layer."""
    grow, plain = GrowingLayer(), DynamicLayer()
    k, v = _states(2, 10, seed=0)
    grow.update(k, v)
    plain.update(k, v)
    buf = grow._kbuf.data_ptr()
    grow.keys, grow.values = grow.keys[:, :, 4:], grow.values[:, :, 4:]
    plain.keys, plain.values = plain.keys[:, :, 4:], plain.values[:, :, 4:]
    for i in range(3):
        k, v = _states(2, 1, seed=i + 1)
        got = grow.update(k, v)
        want = plain.update(k, v)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        assert grow._kbuf.data_ptr() == buf, "an append after a front crop copied the cache"
    grow.select_rows(torch.tensor([1]))  # rows move within the window
    assert torch.equal(grow.keys, plain.keys[[1]]) and grow._kbuf.data_ptr() == buf
    k, v = _states(1, 40, seed=9)  # past capacity: the window moves to column 0 of a new buffer
    got = grow.update(k, v)
    assert torch.equal(got[0], torch.cat([plain.keys[[1]], k], dim=2))
    assert grow._kbuf.data_ptr() != buf


def test_a_view_of_another_row_or_head_is_not_taken_for_a_column_window() -> None:
    from verispec.kv.layer import _window

    buf = torch.zeros(3, 2, 8, 4)
    assert _window(buf[:2, :, 3:7], buf) == 3
    assert _window(buf[1:, :, :4], buf) is None  # starts at row 1
    assert _window(buf[:, 1:, :4], buf) is None  # starts at head 1
    assert _window(buf[:2, :, 3:7].clone(), buf) is None
