"""How a command ends on bad input: exit code 2 and the error's own words on one line."""

from __future__ import annotations

from verispec.exits import run_command


def _raise(e: Exception):
    def call():
        raise e
    return call


def test_a_user_error_is_one_unbroken_line_with_its_brackets(capsys) -> None:
    path = "/tmp/" + "deep/" * 40 + "bad.jsonl:2"  # wider than any console
    msg = f"{path}: not an instruction object [/bold] (shape [B, K])"
    assert run_command("demo", _raise(ValueError(msg))) == 2
    err = capsys.readouterr().err.rstrip("\n")
    assert err == f"verispec demo: error: {msg}"  # no newline inside a path, markup-like text kept


def test_ctrl_c_is_130_and_a_return_value_passes_through(capsys) -> None:
    assert run_command("demo", _raise(KeyboardInterrupt())) == 130
    assert "interrupted" in capsys.readouterr().err
    assert run_command("demo", lambda: 3) == 3
    assert run_command("demo", lambda: None) == 0
