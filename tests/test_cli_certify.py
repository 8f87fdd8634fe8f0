"""``verispec certify``: the quick grid passes and prints its table; a broken rule exits non-zero."""

from __future__ import annotations

import contextlib
import io

import pytest

from verispec import certify
from verispec.certify import CertCase
from verispec.cli import main


@pytest.fixture(scope="module")
def quick_run():
    """One ``verispec certify --quick`` run (~20 s) shared by the tests of this module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "200")  # rich: keep each table row on one line
        # capsys is function-scoped, so a module fixture captures by hand
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["certify", "--quick"])
    return rc, out.getvalue(), err.getvalue()


def test_quick_certify_exits_zero(quick_run):
    rc, out, _ = quick_run
    assert rc == 0, out


def test_quick_certify_prints_the_table(quick_run):
    _, out, _ = quick_run
    assert "verispec certify --quick" in out
    for word in ("mode", "edge case", "max TV", "pathwise", "result"):
        assert word in out
    rows = [line for line in out.splitlines() if "exact" in line or "gumbel" in line]
    for method, edge in {(c.method, c.edge) for c in certify.default_grid(quick=True)}:
        assert any(method in r and edge in r and "pass" in r for r in rows), (method, edge)
    assert "FAIL" not in out
    assert f"all {len(certify.default_grid(quick=True))} cases passed" in out


def _tiny_grid(quick: bool) -> list[CertCase]:
    return [CertCase("exact", "random", 3, 2, 3), CertCase("exact", "onehot_q", 3, 2, 3),
            CertCase("gumbel", "random", 2, 1, 3)]


def test_tiny_grid_passes(monkeypatch, capsys):
    monkeypatch.setattr(certify, "default_grid", _tiny_grid)
    assert main(["certify"]) == 0
    assert "all 3 cases passed" in capsys.readouterr().out


def test_broken_rule_exits_nonzero(monkeypatch, capsys):
    """A wrong accept rule (min(1, q/p)) must make the command fail, not just print a number."""
    monkeypatch.setattr(certify, "default_grid", _tiny_grid)
    monkeypatch.setattr(certify, "accept_probability", lambda p_d, q_d: min(1.0, q_d / p_d) if p_d > 0 else 1.0)
    rc = main(["certify"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAIL" in out and "2 failed" in out.replace("\n", " ")


def test_broken_gumbel_verifier_exits_nonzero(monkeypatch, capsys):
    """The pathwise check reaches the real verify: a verifier using the wrong noise fails."""
    monkeypatch.setattr(certify, "default_grid", _tiny_grid)
    real = certify.verify
    monkeypatch.setattr(certify, "verify", lambda p, q, d, *, positions, **kw: real(p, q, d, positions=positions + 1, **kw))
    assert main(["certify"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_no_command_prints_help_and_returns_2(capsys):
    assert main([]) == 2
    assert "certify" in capsys.readouterr().out
