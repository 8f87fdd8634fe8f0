"""``scripts/int8_throughput.py`` (BENCHMARKS.md, "int8 draft weights streamed like the target's"):
it runs on small shapes and prints a row per shape and row count, and names bad arguments."""

from __future__ import annotations

import pytest

from verispec.models.panel8 import load_panel8


def test_it_times_every_shape_and_row_count(capsys, load_script) -> None:
    if load_panel8() is None:
        pytest.skip("the panel8 kernel cannot be built here")
    load_script("int8_throughput").main(["--shapes", "64x32,70x7", "--rows", "1,3", "--repeats", "2"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 + 4 and "panel8 ms" in lines[0]
    assert [line.split()[:2] for line in lines[1:]] == [["64x32", "1"], ["64x32", "3"], ["70x7", "1"], ["70x7", "3"]]
    assert float(lines[1].split()[2]) > 0  # panel8's time
    assert lines[3].split()[4] == "nan"  # torch's kernel does not read a width of 7: not timed


@pytest.mark.parametrize("argv, named", [(["--shapes", "64"], "--shapes"), (["--shapes", "0x5"], "--shapes"),
                                         (["--rows", "a"], "--rows"), (["--rows", "0"], "--rows"),
                                         (["--repeats", "0"], "--repeats")])
def test_bad_arguments_are_named(argv, named, load_script) -> None:
    with pytest.raises(SystemExit, match=named):
        load_script("int8_throughput").main(argv)
