"""``verispec distill grow-map``: a head's vocab map grown with the answers' most used ids, its
weights untouched, refused when it would shrink, written whole or not at all."""

from __future__ import annotations

import json

import pytest
import torch

from verispec.distill.archive import AnswerArchive, write_archive
from verispec.distill.grow_map import answer_counts, grow_map, main
from verispec.drafters.eagle_head import load_eagle_head, save_eagle_head
from verispec.testing import tiny_eagle, tiny_llama


def _archive(answers: list[list[int]], prompt: list[int] = (50, 51, 52)) -> AnswerArchive:
    return AnswerArchive([list(prompt) + a for a in answers], [len(prompt)] * len(answers),
                         [f"r{i}" for i in range(len(answers))], ["qa"] * len(answers), "float32")


def test_counts_read_answers_only_and_the_map_keeps_its_ids_and_adds_the_most_used() -> None:
    arc = _archive([[7, 7, 9, 4], [7, 9, 11]])
    counts = answer_counts([arc])
    assert counts[7] == 3 and counts[9] == 2 and counts[4] == 1 and counts[11] == 1
    assert counts[50:].sum() == 0  # the prompt's ids are not answers
    old = torch.tensor([0, 2, 4])
    assert grow_map(old, [arc], 5).tolist() == [0, 2, 4, 7, 9]  # 4 is in already: 7 then 9, not 11
    assert grow_map(old, [arc], 6).tolist() == [0, 2, 4, 7, 9, 11]
    assert grow_map(old, [arc], 60).tolist() == [0, 2, 4, 7, 9, 11]  # never an id no answer used
    assert grow_map(old, [arc], 3).tolist() == [0, 2, 4]
    two = grow_map(old, [arc, _archive([[11, 11, 11]])], 5)  # counts add over archives: 11 (4) before 9 (2)
    assert two.tolist() == [0, 2, 4, 7, 11]
    with pytest.raises(ValueError, match="a map only grows"):
        grow_map(old, [arc], 2)


def test_the_command_writes_the_same_weights_with_the_grown_map(tmp_path, capsys) -> None:
    target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    files = tiny_eagle(target, seed=1, vocab_map=torch.arange(0, 64, 2))
    save_eagle_head(files.head, tmp_path / "h", vocab_map=files.vocab_map,
                    meta={"target": "tiny", "train": {"seed": 1}})
    write_archive(_archive([[3, 3, 5, 2], [5, 3, 61]]), tmp_path / "a.safetensors")
    assert main(["--head", str(tmp_path / "h"), "--archive", str(tmp_path / "a.safetensors"), "--size", "34",
                 "--out", str(tmp_path / "g")]) == 0
    assert "vocab map 32 -> 34 ids" in capsys.readouterr().out
    old, new = load_eagle_head(tmp_path / "h"), load_eagle_head(tmp_path / "g")
    assert new.vocab_map.tolist() == sorted([*range(0, 64, 2), 3, 5])
    a, b = old.head.state_dict(), new.head.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    meta = json.loads((tmp_path / "g" / "eagle_config.json").read_text())
    assert meta["train"] == {"seed": 1} and meta["grown_map"] == {"from": 32, "to": 34, "archives": ["a.safetensors"]}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_bad_arguments_are_named_and_nothing_is_written(tmp_path, capsys) -> None:
    target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    files = tiny_eagle(target, seed=1, vocab_map=torch.arange(0, 64, 2))
    save_eagle_head(files.head, tmp_path / "h", vocab_map=files.vocab_map)
    write_archive(_archive([[3, 5]]), tmp_path / "a.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a file")
    h, a, o = str(tmp_path / "h"), str(tmp_path / "a.safetensors"), str(tmp_path / "o")
    cases = [
        (["--head", str(tmp_path / "nope"), "--archive", a, "--size", "40", "--out", o], "--head '"),
        (["--head", h, "--archive", str(tmp_path / "junk.safetensors"), "--size", "40", "--out", o], "--archive: "),
        (["--head", h, "--archive", a, "--size", "8", "--out", o], "--size: size 8 is smaller than the head's map"),
        (["--head", h, "--archive", a, "--size", "40", "--out", h], "exists"),
        (["--head", h, "--archive", a, "--size", "40", "--out", str(tmp_path / "no" / "o")], "does not exist"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.safetensors", "h", "junk.safetensors"]


def test_a_write_that_fails_leaves_no_folder(tmp_path, monkeypatch, capsys) -> None:
    import verispec.drafters.eagle_head as eagle_head

    target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    files = tiny_eagle(target, seed=1, vocab_map=torch.arange(0, 64, 2))
    save_eagle_head(files.head, tmp_path / "h", vocab_map=files.vocab_map)
    write_archive(_archive([[3, 5]]), tmp_path / "a.safetensors")

    def broken(head, path, **kw):
        (path / "eagle.safetensors").write_bytes(b"half")
        raise FileNotFoundError("the folder went away")

    monkeypatch.setattr(eagle_head, "save_eagle_head", broken)
    argv = ["--head", str(tmp_path / "h"), "--archive", str(tmp_path / "a.safetensors"), "--size", "34",
            "--out", str(tmp_path / "g")]
    assert main(argv) == 2
    assert "verispec distill grow-map: error: the folder went away" in capsys.readouterr().err  # one line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.safetensors", "h"]
