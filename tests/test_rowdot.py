"""Tests for the compiled ``rowdot`` linear (verispec.models.rowdot) and its place among the
measured CPU kernels (verispec.models.kernels).

The kernel is built once per machine (~20-30 s) into verispec's cache directory and then only
loaded; where it cannot be built (no compiler or ninja, not x86-64) its tests skip.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from verispec.models import extension, kernels, rowdot
from verispec.testing import tiny_llama

TOL = {"atol": 1e-4, "rtol": 1e-4}  # float32 rounding of dot products of a few hundred terms
SHAPES = [(576, 576), (577, 7), (1536, 192), (15, 5), (33, 64)]  # (K, N): K and N tails included


@pytest.fixture(scope="module")
def rd():  # type: ignore[no-untyped-def]
    fn = rowdot.load_rowdot()
    if fn is None:
        pytest.skip(f"the rowdot extension cannot be built here ({rowdot._failed or 'VERISPEC_NO_EXTENSIONS'})")
    return fn


def _data(m: int, k: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n, generator=g)


@pytest.mark.parametrize("k,n", SHAPES)
@pytest.mark.parametrize("bias", [False, True])
def test_rowdot_matches_f_linear(rd, k: int, n: int, bias: bool) -> None:  # type: ignore[no-untyped-def]
    """For 1..16 rows, with and without bias, rowdot equals ``F.linear`` to float32 rounding."""
    for m in range(1, 17):
        x, w, b = _data(m, k, n, seed=m)
        b = b if bias else None
        y = rd(x, w, b)
        assert y.shape == (m, n) and y.dtype == torch.float32 and y.is_contiguous()
        torch.testing.assert_close(y, F.linear(x, w, b), **TOL)


def test_the_agreement_check_catches_wrong_kernels(rd) -> None:  # type: ignore[no-untyped-def]
    """The tolerance above is tight enough to fail a kernel that drops the tail of K (K=577: one
    term), the last weight row, or the bias, or that reads the weight transposed."""
    x, w, b = _data(5, 577, 7)
    want = F.linear(x, w, b)
    wrong = {
        "drops the K tail": F.linear(x[:, :576], w[:, :576], b),
        "drops the last weight row": torch.cat([F.linear(x, w[:6], b[:6]), torch.zeros(5, 1)], 1),
        "drops the bias": F.linear(x, w),
    }
    for name, y in wrong.items():
        assert not torch.allclose(y, want, **TOL), name
    xs, ws = _data(7, 7, 7)[:2]
    assert not torch.allclose(rd(xs, ws.t().contiguous()), F.linear(xs, ws), **TOL)  # transposed weight
    torch.testing.assert_close(rd(x, w, b), want, **TOL)


def test_rowdot_is_batch_invariant(rd) -> None:  # type: ignore[no-untyped-def]
    """Row i of an M-row call is, bit for bit, the one-row call on row i (any M, K tail or not)."""
    for k, n in [(576, 576), (577, 7)]:
        x, w, b = _data(16, k, n)
        for m in (9, 16, 7):
            y = rd(x[:m], w, b)
            for i in range(m):
                assert torch.equal(y[i], rd(x[i:i + 1], w, b)[0]), (k, n, m, i)


def test_rowdot_inputs(rd) -> None:  # type: ignore[no-untyped-def]
    """A non-contiguous x is read correctly; no rows give an empty result; float64 is refused."""
    x, w, b = _data(6, 128, 24)
    xt = torch.randn(128, 6).t()  # [6, 128], not contiguous
    assert not xt.is_contiguous()
    torch.testing.assert_close(rd(xt, w, b), F.linear(xt, w, b), **TOL)
    torch.testing.assert_close(rd(x[:, ::2], w[:, :64], b), F.linear(x[:, ::2], w[:, :64], b), **TOL)
    assert rd(x[:0], w, b).shape == (0, 24)
    with pytest.raises(RuntimeError, match="float32"):
        rd(x.double(), w.double(), None)


def test_build_name_pins_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build for another CPU (other flags) has another name, so it is never loaded here."""
    name = rowdot._build_name()
    monkeypatch.setattr(extension, "_cpu_flags", lambda: "fpu sse2")
    assert rowdot._build_name() != name and rowdot._build_name().startswith("verispec_rowdot_")


def test_no_extensions_env_and_a_failed_build_fall_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``VERISPEC_NO_EXTENSIONS=1``, or a build that fails (warned once, with the reason), gives
    None; the measured choice then neither times nor installs rowdot, and the model runs."""
    monkeypatch.setenv("VERISPEC_NO_EXTENSIONS", "1")
    assert rowdot.load_rowdot() is None
    monkeypatch.delenv("VERISPEC_NO_EXTENSIONS")

    def broken() -> None:
        raise RuntimeError("Error building extension 'x'\nc++: not found")
    monkeypatch.setattr(rowdot, "_loaded", None)
    monkeypatch.setattr(rowdot, "_failed", None)
    monkeypatch.setattr(rowdot, "_build", broken)
    with pytest.warns(RuntimeWarning, match="rowdot CPU kernel is not available.*c\\+\\+: not found"):
        assert rowdot.load_rowdot() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        assert rowdot.load_rowdot() is None

    monkeypatch.setenv("VERISPEC_KERNELS", str(tmp_path / "k.json"))
    seen: list[list] = []

    def timer(calls, repeats=3, rivals=None):  # type: ignore[no-untyped-def]
        seen.append(list(calls))
        return {key: 1.0 if key[1] == "rowdot" else 2.0 for key in calls}
    monkeypatch.setattr(kernels.timing, "time_calls", timer)
    lm, ref = tiny_llama(seed=3, dtype=torch.float32), tiny_llama(seed=3, dtype=torch.float32)
    kernels.apply_cpu_kernels(lm.model, attention=False)
    assert seen and all(key[1] != "rowdot" for key in seen[0])
    assert not any("rowdot" in getattr(m, "kernel_rows", ()) for m in lm.model.modules())
    ids = torch.randint(4, 64, (1, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(lm.model(ids).logits, ref.model(ids).logits, **TOL)


def test_measured_rowdot_runs_every_linear(rd, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                           tmp_path: Path) -> None:
    """Where timing says rowdot is fastest, every float32 linear (and the head) runs it for 1..16
    rows (the head 1..32) and F.linear beyond; logits equal the plain model's to float32
    rounding; the report says so. A plan stored before rowdot was a candidate (its key lists the
    candidates) is not reused: the shapes are timed again."""
    path = tmp_path / "k.json"
    monkeypatch.setenv("VERISPEC_KERNELS", str(path))
    seen: list[list] = []

    def timer(calls, repeats=3, rivals=None):  # type: ignore[no-untyped-def]
        seen.append(list(calls))
        return {key: 1.0 if key[1] == "rowdot" else 2.0 for key in calls}
    monkeypatch.setattr(kernels.timing, "time_calls", timer)

    monkeypatch.setenv("VERISPEC_NO_EXTENSIONS", "1")  # an older plan, without rowdot
    kernels.apply_cpu_kernels(tiny_llama(seed=3, dtype=torch.float32).model, attention=False)
    old_keys = set(json.loads(path.read_text())["entries"])
    assert all("rowdot" not in key for key in old_keys) and len(seen) == 1
    monkeypatch.delenv("VERISPEC_NO_EXTENSIONS")

    calls: list[int] = []
    monkeypatch.setattr(rowdot, "_loaded", lambda x, w, b=None: calls.append(x.shape[0]) or rd(x, w, b))
    lm, ref = tiny_llama(seed=3, dtype=torch.float32), tiny_llama(seed=3, dtype=torch.float32)
    assert kernels.apply_cpu_kernels(lm.model, attention=False) == ("fast_lm_head", "fast_small_linears")
    assert len(seen) == 2 and {key[1] for key in seen[1]} >= {"plain", "rowdot"}  # timed again
    new_keys = set(json.loads(path.read_text())["entries"]) - old_keys
    assert len(new_keys) == 5 and all(key.endswith(f",rowdot {rowdot.ROWDOT_VERSION}]") for key in new_keys)

    report = kernels.kernel_report(lm)
    assert all(v["rowdot_rows"] == list(range(1, 17)) and v["packed_rows"] == [] for v in report["linears"].values())
    assert report["head"]["rows"] == {"rowdot": list(range(1, 33))} and report["head"]["beyond"] in ("plain", "mm_t")
    ids = torch.randint(4, 64, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for t in (1, 5, 9, 16):
            calls.clear()
            torch.testing.assert_close(lm.model(ids[:, :t]).logits, ref.model(ids[:, :t]).logits, **TOL)
            assert calls == [t] * (2 * 7 + 1)  # q, k, v, o, gate, up, down per layer, and the head
        calls.clear()
        torch.testing.assert_close(lm.model(ids).logits, ref.model(ids).logits, **TOL)
        assert calls == []  # 40 rows: F.linear (the head: its unpacked kernel)
