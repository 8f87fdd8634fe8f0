"""Training features read from the shards batch by batch (``FeaturesOnDisk``): every batch is the
in-memory set's, so training computes the same weights, and memory holds only the small tensors."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from verispec.distill.eagle_train import FeatureSet, train_eagle
from verispec.distill.features_on_disk import FeaturesOnDisk
from verispec.testing import tiny_eagle, tiny_llama


def _shards(tmp_path, lengths=((2, 5), (3, 9), (1, 4)), taps=(1,), H=16, seed=3):
    """Shards of different lengths with features and taps (written apart from the loaders)."""
    g = torch.Generator().manual_seed(seed)
    paths = []
    for i, (n, t) in enumerate(lengths):
        gen = torch.zeros(n, t, dtype=torch.uint8)
        gen[:, 2:] = 1
        d = {"input_ids": torch.randint(4, 64, (n, t), generator=g, dtype=torch.int32),
             "features": torch.randn(n, t, H, generator=g).half(),
             "weight": torch.ones(n, t, dtype=torch.uint8), "generated": gen}
        if taps:
            d["taps"] = torch.randn(n, t, len(taps), H, generator=g).half()
        p = tmp_path / f"s{i}.safetensors"
        save_file(d, str(p), metadata={"taps": str(list(taps))})
        paths.append(p)
    return paths


def test_every_subset_is_the_in_memory_sets(tmp_path) -> None:
    """Rows from every shard, repeated and in any order: the same tensors, dtypes, padding and
    tap layers as ``FeatureSet.load(...).subset``."""
    paths = _shards(tmp_path)
    mem, disk = FeatureSet.load(paths), FeaturesOnDisk(paths)
    assert len(disk) == len(mem) == 6 and disk.tap_layers == mem.tap_layers == (1,)
    held = {k for k, v in vars(disk).items() if isinstance(v, torch.Tensor)}
    assert held == {"input_ids", "weight", "generated", "_shard", "_row"}, held  # features and taps stay on disk
    for k in ("input_ids", "weight", "generated"):
        assert torch.equal(getattr(disk, k), getattr(mem, k)), k
    for idx in ([5, 0, 3], [2, 2, 4, 1], [0, 1, 2, 3, 4, 5]):
        a, b = mem.subset(torch.tensor(idx)), disk.subset(torch.tensor(idx))
        for k in ("input_ids", "features", "weight", "generated", "taps"):
            x, y = getattr(a, k), getattr(b, k)
            assert x.dtype == y.dtype and torch.equal(x, y), (idx, k)
        assert b.tap_layers == (1,)


def test_without_taps_asked_or_held_none_are_read(tmp_path) -> None:
    assert FeaturesOnDisk(_shards(tmp_path), taps=False).subset(torch.tensor([0])).taps is None
    (tmp_path / "plain").mkdir()
    assert FeaturesOnDisk(_shards(tmp_path / "plain", taps=())).subset(torch.tensor([1])).taps is None
    with pytest.raises(ValueError, match="no feature shards given"):
        FeaturesOnDisk([])


def test_training_from_disk_computes_the_in_memory_weights(tmp_path) -> None:
    """Same seed, same batches: the trained weights are equal to the bit (a reader that shifted
    rows or padded otherwise would train on other data)."""
    target = tiny_llama(vocab_size=64, seed=0, dtype=torch.float32)
    H = target.model.config.hidden_size
    paths = _shards(tmp_path, lengths=((3, 12), (4, 7), (2, 10)), H=H)
    init = tiny_eagle(target, seed=3).head
    vmap = torch.arange(64)
    heads = []
    for name, data in (("mem", FeatureSet.load(paths)), ("disk", FeaturesOnDisk(paths))):
        torch.manual_seed(0)
        head, _ = train_eagle(target.model, data, FeatureSet.load(paths), vmap, tmp_path / name, steps=4, batch_size=2,
                              lr=1e-2, init_from=init, taps=(1,), answers_only=True, eval_every=100,
                              ckpt_every=100, log=lambda *_: None)
        heads.append(head.state_dict())
    moved = sum(float((heads[0][k] - v).abs().sum()) for k, v in init.state_dict().items() if k in heads[0])
    assert moved > 0
    for k, v in heads[0].items():
        assert torch.equal(v, heads[1][k]), k
