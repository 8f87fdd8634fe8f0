"""``verispec certify``: the quick grid passes and prints its table, every mutant is caught, and a
broken verifier (in verify.py itself) makes the command exit non-zero."""

from __future__ import annotations

import contextlib
import importlib
import io

import pytest
import torch

from verispec import certify
from verispec.certify import CertCase
from verispec.cli import main

V = importlib.import_module("verispec.verify.chain")


@pytest.fixture(scope="module")
def quick_run():
    """One ``verispec certify --quick --mutants`` run (~30 s) shared by the tests of this module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "220")  # rich: keep each table row on one line
        # capsys is function-scoped, so a module fixture captures by hand
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["certify", "--quick", "--mutants"])
    return rc, out.getvalue(), err.getvalue()


def test_quick_certify_exits_zero(quick_run):
    rc, out, _ = quick_run
    assert rc == 0, out


def test_quick_certify_prints_the_table(quick_run):
    _, out, _ = quick_run
    assert "verispec certify --quick" in out
    for word in ("mode", "edge case", "max TV", "probes", "pathwise", "result"):
        assert word in out
    rows = [line for line in out.splitlines() if "exact" in line or "gumbel" in line]
    for method, edge in {(c.method, c.edge) for c in certify.default_grid(quick=True)}:
        assert any(method in r and f" {edge} " in r and "pass" in r for r in rows), (method, edge)
    assert "FAIL" not in out
    assert f"all {len(certify.default_grid(quick=True))} cases passed" in out


def test_every_mutant_is_caught_and_shown(quick_run):
    _, out, _ = quick_run
    for m in certify.MUTANTS:
        line = next(r for r in out.splitlines() if f" {m.name} " in r)
        assert "SURVIVED" not in line and (" V=" in line), line
    assert f"{len(certify.MUTANTS)} of {len(certify.MUTANTS)} mutants caught" in out


def test_trees_and_block_are_certified_and_their_mutants_caught(quick_run):
    _, out, _ = quick_run
    assert f"all {len(certify.tree_grid(quick=True))} tree cases passed" in out
    for mode in certify.TREE_MODES:
        assert any(line.lstrip("│ ").startswith(mode + " ") and "pass" in line for line in out.splitlines()), mode
    for m in certify.TREE_MUTANTS:
        line = next(r for r in out.splitlines() if f" {m.name} " in r)
        assert "SURVIVED" not in line and " V=" in line, line
    assert f"{len(certify.TREE_MUTANTS)} of {len(certify.TREE_MUTANTS)} tree mutants caught" in out


def _tiny_grid(quick: bool) -> list[CertCase]:
    return [CertCase("exact", "random", 3, 2, 3), CertCase("exact", "onehot_q", 3, 2, 3),
            CertCase("gumbel", "random", 2, 1, 3)]


def _tiny_tree_grid(quick: bool) -> list[certify.TreeCase]:
    return [certify.TreeCase("iid", 2, ("fan3", "fork")), certify.TreeCase("gumbel", 2, ("pair", "chain3")),
            certify.TreeCase("block", 2, (), "random", 2)]


def test_tiny_grid_passes(monkeypatch, capsys):
    monkeypatch.setattr(certify, "default_grid", _tiny_grid)
    monkeypatch.setattr(certify, "tree_grid", _tiny_tree_grid)
    assert main(["certify"]) == 0
    out = capsys.readouterr().out
    assert "all 3 cases passed" in out and "all 3 tree cases passed" in out


def test_a_wrong_verify_py_exits_nonzero(monkeypatch, capsys):
    """The reviewer's test: verify.py replaced by "accept every draft, emit the argmax" (exact and
    greedy paths) must fail certification: the certifier runs verify.py, not its own copy."""
    monkeypatch.setattr(certify, "default_grid", _tiny_grid)
    monkeypatch.setattr(certify, "tree_grid", _tiny_tree_grid)

    def argmax_all(p, q, d, drafted, num_draft, *rest):
        x = V._rows_at(p, torch.arange(p.shape[0]), num_draft).argmax(-1)
        return V._assemble(d, num_draft.clone(), x, num_draft)

    monkeypatch.setattr(V, "_verify_exact", argmax_all)
    monkeypatch.setattr(V, "_verify_greedy", argmax_all)
    rc = main(["certify"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAIL" in out and "2 failed" in out.replace("\n", " ")


def test_broken_gumbel_verifier_exits_nonzero(monkeypatch, capsys):
    """A Gumbel verifier that forgets the noise (the target's token is the argmax of p) fails. (The
    noise of the wrong position would still sample the target's law: no test of a verifier.)"""
    monkeypatch.setattr(certify, "default_grid", _tiny_grid)
    monkeypatch.setattr(certify, "tree_grid", _tiny_tree_grid)
    monkeypatch.setattr(V, "_target_token", lambda p_i, seeds, positions, draws: p_i.argmax(-1))
    assert main(["certify"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_no_command_prints_help_and_returns_2(capsys):
    assert main([]) == 2
    assert "certify" in capsys.readouterr().out
