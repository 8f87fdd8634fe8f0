"""Training features read from disk batch by batch: training memory that does not grow with the data.

:meth:`FeatureSet.load <verispec.distill.eagle_train.FeatureSet.load>` holds every sequence's
features (and taps) in memory, padded to the longest sequence: 734k answer positions with two
taps needed 21.8 GB of a 23 GB machine. A training step reads only its batch, so
:class:`FeaturesOnDisk` keeps the small per-position tensors (ids, weights, generated flags) in
memory, as they are needed to choose a vocab map and count positions, and reads the batch's
features and taps from the memory-mapped shards (safetensors slices read only the rows asked
for; the page cache keeps what fits and gives it back under pressure).

``subset(idx)`` returns exactly what ``FeatureSet.load(paths).subset(idx)`` returns (the same
dtypes, zero padding to the same width), so a training run draws the same batches and computes
the same weights either way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import safe_open

from .eagle_train import FeatureSet

__all__ = ["FeaturesOnDisk"]

_SMALL = ("input_ids", "weight", "generated")  # [N, T] per position: held in memory
_LARGE = ("features", "taps")  # [N, T, H] and [N, T, n, H]: read per batch


class FeaturesOnDisk:
    """Answer shards with features, read lazily: ``input_ids``, ``weight``, ``generated``
    ``[N, T]`` in memory (zero-padded to the longest shard as :class:`FeatureSet`), ``features``
    and ``taps`` read for the rows of each :meth:`subset`. ``taps``: read the shards' taps when
    every shard has the same ones (``tap_layers``), else none."""

    def __init__(self, paths: Sequence[Path], taps: bool = True) -> None:
        if not paths:
            raise ValueError("no feature shards given")
        self._files = [safe_open(str(p), "pt") for p in paths]
        layers = {tuple(json.loads((f.metadata() or {}).get("taps", "[]"))) for f in self._files}
        self.tap_layers: tuple[int, ...] = layers.pop() if taps and len(layers) == 1 else ()
        shapes = [f.get_slice("input_ids").get_shape() for f in self._files]
        N, self._T = sum(n for n, _ in shapes), max(t for _, t in shapes)
        self._shard = torch.cat([torch.full((n,), i) for i, (n, _) in enumerate(shapes)])  # [N] shard of each row
        self._row = torch.cat([torch.arange(n) for n, _ in shapes])  # [N] row within its shard
        small = {k: [f.get_tensor(k) for f in self._files] for k in _SMALL}
        for k, parts in small.items():
            out = parts[0].new_zeros((N, self._T))
            row = 0
            for part in parts:
                out[row:row + len(part), :part.shape[1]] = part
                row += len(part)
            setattr(self, k, out)
        self._keys = _LARGE if self.tap_layers else _LARGE[:1]

    def __len__(self) -> int:
        return len(self._shard)

    def subset(self, idx: torch.Tensor) -> FeatureSet:
        """Rows ``idx [B]`` as an in-memory :class:`FeatureSet` padded to the full width ``T``."""
        large = {}
        for k in self._keys:
            rows = []
            # one slice read per row: a batch is a handful of rows scattered over the shards
            for s, r in zip(self._shard[idx].tolist(), self._row[idx].tolist()):
                x = self._files[s].get_slice(k)[r:r + 1]  # [1, t, ...] only this row's bytes
                pad = x.new_zeros((1, self._T, *x.shape[2:]))
                pad[:, :x.shape[1]] = x
                rows.append(pad)
            large[k] = torch.cat(rows)
        return FeatureSet(self.input_ids[idx], large["features"], self.weight[idx], self.generated[idx],
                          large.get("taps"), self.tap_layers)
