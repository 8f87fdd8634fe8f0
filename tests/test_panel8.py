"""The compiled int8 panel kernel (verispec.models.panel8): the dequantized linear to float32
rounding, and a row's output the same bits whatever the other rows of the call."""

from __future__ import annotations

import pytest
import torch

from verispec.models.panel8 import load_panel8, quantize_rows


@pytest.fixture(scope="module")
def kernel():
    k = load_panel8()
    if k is None:
        pytest.skip("the panel8 kernel cannot be built here (no compiler or ninja, or not x86-64)")
    return k


def test_quantize_rows_keeps_each_row_within_half_a_step():
    w = torch.randn(50, 40, generator=torch.Generator().manual_seed(1))
    q, s = quantize_rows(w)
    assert q.dtype == torch.int8 and s.shape == (50,)
    assert int(q.abs().max()) == 127  # each row's largest entry takes the full range
    assert ((q.float() * s[:, None] - w).abs() <= s[:, None] / 2 + 1e-7).all()


@pytest.mark.parametrize("n, k", [(70, 37), (64, 576), (1000, 96), (3, 5)])
def test_the_kernel_is_the_linear_of_the_dequantized_weights(kernel, n, k):
    g = torch.Generator().manual_seed(n + k)
    w, b = torch.randn(n, k, generator=g), torch.randn(n, generator=g)
    q, s = quantize_rows(w)
    packed = kernel.pack(q)
    for m in (1, 2, 3, 4, 5, 9):
        x = torch.randn(m, k, generator=g)
        want = x.double() @ (q.double() * s.double()[:, None]).T + b.double()
        got = kernel.linear(x, packed, s, n, b)
        assert got.shape == (m, n) and got.dtype == torch.float32
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
        no_bias = kernel.linear(x, packed, s, n).double()
        torch.testing.assert_close(no_bias, want - b.double(), rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    # the check can fail: a scale per row read as one per column, or the rows of Q shifted, is far off
    x = torch.randn(3, k, generator=g)
    wrong = kernel.linear(x, kernel.pack(q.roll(1, 0)), s, n, b)
    assert (wrong - kernel.linear(x, packed, s, n, b)).abs().max() > 1e-2


def test_a_row_is_the_same_bits_in_any_call(kernel):
    g = torch.Generator().manual_seed(3)
    n, k = 200, 576
    q, s = quantize_rows(torch.randn(n, k, generator=g))
    packed = kernel.pack(q)
    x = torch.randn(11, k, generator=g)
    alone = torch.cat([kernel.linear(x[i:i + 1], packed, s, n) for i in range(11)])
    for m in range(1, 12):  # every chunking of the rows: full chunks of 4 and the rest
        assert torch.equal(kernel.linear(x[:m], packed, s, n), alone[:m])
    assert torch.equal(kernel.linear(x.flip(0), packed, s, n), alone.flip(0))


def test_bad_input_is_named(kernel):
    q, s = quantize_rows(torch.randn(8, 16))
    packed = kernel.pack(q)
    with pytest.raises(RuntimeError, match="panel8.linear"):
        kernel.linear(torch.randn(2, 15), packed, s, 8)
    with pytest.raises(RuntimeError, match="panel8.linear"):
        kernel.linear(torch.randn(2, 16), packed, s[:4], 8)
    with pytest.raises(RuntimeError, match="panel8.pack"):
        kernel.pack(torch.zeros(4, 4))
