"""``verispec distill average``: the mean of several EAGLE heads' weights, refused for heads of
other shapes or maps, written whole or not at all, with a history that grows by one record a round."""

from __future__ import annotations

import json

import pytest
import torch

from verispec.distill.average import average_heads, expand_history, main, run_record
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
    # the start's record is the last earlier run: written once, referred to from average_of
    assert [r["train"] for r in meta["average_of"]] == [{"same_as": "earlier_runs[1]"}, {"seed": 2}]
    assert meta["earlier_runs"] == [{"seed": 0}, made]
    assert expand_history(meta["average_of"], meta["earlier_runs"])[0]["train"] == made
    assert run_record({"target": "tiny", "config": {}}) is None


def test_rounds_of_means_grow_the_history_by_one_record_and_expand_to_the_nested_records(tmp_path, target) -> None:
    """The shipped head is a mean of its start and the start trained again, round after round. Each
    round's file holds what made every earlier round; written nested (a mean's record holds its
    start's whole record) it would grow by all of them each round, written with references by one
    record. Expanded, the references give back the nested records exactly."""
    def trained(k: int) -> dict:
        return {"seed": k, "init_from": f"start{k - 1}", "curve": [round(0.5 + k / 7 + i / 1000, 4) for i in range(60)]}

    nested = {0: trained(0)}  # what the old rule wrote: round k's record, its start's inside it
    _save(target, tmp_path / "start0", 0, meta={"target": "tiny", "train": nested[0]})
    sizes = []
    for k in range(1, 7):
        _save(target, tmp_path / f"t{k}", k, meta={"target": "tiny", "train": trained(k)})
        start = str(tmp_path / f"start{k - 1}")
        assert main(["--head", start, "--head", str(tmp_path / f"t{k}"), "--history", start,
                     "--out", str(tmp_path / f"start{k}")]) == 0
        text = (tmp_path / f"start{k}" / "eagle_config.json").read_text()
        meta = json.loads(text)
        nested[k] = {"average_of": [{"head": start, "train": nested[k - 1]}, {"head": str(tmp_path / f"t{k}"),
                                                                                  "train": trained(k)}]}
        runs = meta["earlier_runs"]
        assert [expand_history(r, runs[:i]) for i, r in enumerate(runs)] == [nested[i] for i in range(k)]
        assert expand_history(meta["average_of"], runs) == nested[k]["average_of"]
        sizes.append(len(text))
    one = len(json.dumps(trained(1), indent=2))
    steps = [b - a for a, b in zip(sizes, sizes[1:])]
    assert max(steps) < 1.6 * one + 600, (sizes, one)  # nested, round 6 alone would add five records
    assert len(json.dumps(nested[6], indent=2)) > 4 * sizes[-1] / 3


def test_a_history_that_refers_past_its_runs_is_named(tmp_path, target, capsys) -> None:
    _save(target, tmp_path / "a", 1, meta={"target": "tiny", "train": {"seed": 1}})
    _save(target, tmp_path / "bad", 2, meta={"target": "tiny", "earlier_runs": [{"same_as": "earlier_runs[0]"}],
                                                "average_of": [{"head": "x", "train": {"seed": 3}}]})
    with pytest.raises(SystemExit):
        main(["--head", str(tmp_path / "a"), "--head", str(tmp_path / "a"), "--history", str(tmp_path / "bad"),
              "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert "--history '" + str(tmp_path / "bad") in err and "earlier_runs[0]" in err
    assert not (tmp_path / "o").exists()


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
