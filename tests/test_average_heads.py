"""``verispec distill average``: the mean of several EAGLE heads' weights, refused for heads of
other shapes or maps, written whole or not at all."""

from __future__ import annotations

import json

import pytest
import torch

from verispec.distill.average import average_heads, main, run_record
from verispec.drafters.eagle_head import load_eagle_head, save_eagle_head
from verispec.testing import tiny_eagle, tiny_llama


@pytest.fixture(scope="module")
def target():
    return tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)


def _save(target, path, seed: int, vocab_map=None, meta=None):
    files = tiny_eagle(target, seed=seed, vocab_map=torch.arange(0, 64, 2) if vocab_map is None else vocab_map)
    save_eagle_head(files.head, path, vocab_map=files.vocab_map, meta=meta)
    return load_eagle_head(path)


def test_every_weight_is_the_mean_and_a_head_with_itself_is_itself(tmp_path, target) -> None:
    a, b, c = (_save(target, tmp_path / n, seed) for n, seed in (("a", 1), ("b", 2), ("c", 3)))
    mean = average_heads([a, b, c]).state_dict()
    sa, sb, sc = (h.head.state_dict() for h in (a, b, c))
    saved = [k for k in sa if not k.startswith("body.embed_tokens")]
    assert saved and any(not torch.equal(sa[k], sb[k]) for k in saved)
    for k in saved:
        torch.testing.assert_close(mean[k], (sa[k] + sb[k] + sc[k]) / 3, rtol=0, atol=1e-7)
    same = average_heads([a, a]).state_dict()
    assert all(torch.equal(same[k], sa[k]) for k in saved)


def test_heads_of_another_shape_or_map_are_refused(tmp_path, target) -> None:
    a = _save(target, tmp_path / "a", 1)
    other_map = _save(target, tmp_path / "m", 2, vocab_map=torch.arange(1, 64, 2))
    with pytest.raises(ValueError, match="head 2 has another vocab map"):
        average_heads([a, other_map])
    deep = tiny_eagle(target, seed=1, vocab_map=torch.arange(0, 64, 2), layers=2)
    save_eagle_head(deep.head, tmp_path / "deep", vocab_map=deep.vocab_map)
    with pytest.raises(ValueError, match="head 2 has another shape"):
        average_heads([a, load_eagle_head(tmp_path / "deep")])
    with pytest.raises(ValueError, match="two or more"):
        average_heads([a])


def test_the_command_writes_a_head_that_loads_with_its_history(tmp_path, target, capsys) -> None:
    for name, seed in (("a", 1), ("b", 2)):
        _save(target, tmp_path / name, seed, meta={"target": "tiny", "train": {"seed": seed}})
    _save(target, tmp_path / "start", 0, meta={"target": "tiny", "train": {"seed": 0}, "earlier_runs": [{"run": 1}]})
    out = tmp_path / "mean"
    assert main(["--head", str(tmp_path / "a"), "--head", str(tmp_path / "b"), "--history", str(tmp_path / "start"),
                 "--out", str(out)]) == 0
    assert "the mean of 2 heads" in capsys.readouterr().out
    got = load_eagle_head(out)
    want = average_heads([load_eagle_head(tmp_path / "a"), load_eagle_head(tmp_path / "b")]).state_dict()
    g = got.head.state_dict()
    assert all(torch.equal(g[k], want[k].half().float()) for k in g if not k.startswith("body.embed_tokens"))
    assert torch.equal(got.vocab_map, torch.arange(0, 64, 2))
    meta = json.loads((out / "eagle_config.json").read_text())
    assert [r["train"] for r in meta["average_of"]] == [{"seed": 1}, {"seed": 2}]
    assert meta["earlier_runs"] == [{"run": 1}, {"seed": 0}] and meta["target"] == "tiny"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary folder left


def test_a_head_made_without_training_keeps_its_record_in_the_history(tmp_path, target) -> None:
    """The shipped head can be a mean with a grown map (no ``train`` record): a mean made from it
    keeps the heads it was the mean of and its map's growth, in ``average_of`` and in the history."""
    made = {"average_of": [{"head": "x", "train": {"seed": 5}}, {"head": "y", "train": {"seed": 6}}],
            "grown_map": {"from": 16, "to": 32, "archives": ["a.safetensors"]}}
    _save(target, tmp_path / "start", 0, meta={"target": "tiny", "earlier_runs": [{"seed": 0}], **made})
    _save(target, tmp_path / "b", 2, meta={"target": "tiny", "train": {"seed": 2}})
    out = tmp_path / "mean"
    assert main(["--head", str(tmp_path / "start"), "--head", str(tmp_path / "b"), "--history", str(tmp_path / "start"),
                 "--out", str(out)]) == 0
    meta = json.loads((out / "eagle_config.json").read_text())
    assert [r["train"] for r in meta["average_of"]] == [made, {"seed": 2}]
    assert meta["earlier_runs"] == [{"seed": 0}, made]
    assert run_record({"target": "tiny", "config": {}}) is None


def test_bad_arguments_are_named_and_nothing_is_written(tmp_path, target, capsys) -> None:
    _save(target, tmp_path / "a", 1)
    _save(target, tmp_path / "m", 2, vocab_map=torch.arange(1, 64, 2))
    cases = [
        (["--head", str(tmp_path / "a"), "--out", str(tmp_path / "o")], "two or more heads"),
        (["--head", str(tmp_path / "a"), "--head", str(tmp_path / "nope"), "--out", str(tmp_path / "o")],
         "--head '" + str(tmp_path / "nope")),
        (["--head", str(tmp_path / "a"), "--head", str(tmp_path / "m"), "--out", str(tmp_path / "o")],
         "another vocab map"),
        (["--head", str(tmp_path / "a"), "--head", str(tmp_path / "a"), "--out", str(tmp_path / "a")], "exists"),
        (["--head", str(tmp_path / "a"), "--head", str(tmp_path / "a"), "--out", str(tmp_path / "x" / "o")],
         "does not exist"),
        (["--head", str(tmp_path / "a"), "--head", str(tmp_path / "a"), "--history", str(tmp_path / "nope"),
          "--out", str(tmp_path / "o")], "--history"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err, argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "m"]


def test_a_write_that_fails_leaves_no_folder(tmp_path, target, monkeypatch, capsys) -> None:
    import verispec.drafters.eagle_head as eagle_head

    _save(target, tmp_path / "a", 1)

    def broken(head, path, **kw):
        (path / "eagle.safetensors").write_bytes(b"half")
        raise FileNotFoundError("the folder went away")

    monkeypatch.setattr(eagle_head, "save_eagle_head", broken)
    assert main(["--head", str(tmp_path / "a"), "--head", str(tmp_path / "a"), "--out", str(tmp_path / "o")]) == 2
    assert "verispec distill average: error: the folder went away" in capsys.readouterr().err  # one line, no traceback
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]
