"""``scripts/phase_times.py`` (where a pass's time goes): it wraps functions by name and skips
names an older checkout lacks, so this checkout must still have every name it lists, or a
renamed phase would silently drop out of its table."""

from __future__ import annotations

import pytest


def test_every_phase_the_script_times_exists_here(load_script) -> None:
    script = load_script("phase_times")
    missing = [f"{getattr(owner, '__name__', owner)}.{name}" for owner, name in script.WRAPPED
               if not callable(getattr(owner, name, None))]
    assert not missing, f"scripts/phase_times.py times names this checkout lacks: {missing}"


def test_a_timed_function_still_returns_and_is_counted(load_script) -> None:
    script = load_script("phase_times")

    class Owner:
        @staticmethod
        def work(x: int) -> int:
            return x + 1

    script._timed(Owner, "work")
    assert Owner.work(2) == 3 and Owner.work(5) == 6
    key = next(k for k in script.CALLS if k.endswith("Owner.work"))
    assert script.CALLS[key] == 2 and script.TOTAL[key] > 0
    script._timed(Owner, "absent")  # an older checkout's missing name: skipped, nothing raised
    assert not hasattr(Owner, "absent")


def test_bad_arguments_are_named(monkeypatch, tmp_path, capsys, load_script) -> None:
    script = load_script("phase_times")
    for argv, said in ((["--prompts", str(tmp_path / "none.jsonl")], "--prompts"),
                       (["--prompts", "x", "--limit", "0"], "--limit")):
        monkeypatch.setattr("sys.argv", ["phase_times.py", *argv])
        with pytest.raises(SystemExit, match=said):
            script.main()
