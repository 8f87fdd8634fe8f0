"""A KV-cache layer that appends in place: HF's ``DynamicLayer`` with spare columns.

``DynamicLayer.update`` concatenates the new keys and values onto the old ones, so every
forward copies the whole cache: at batch 64 and a few hundred columns that copy costs as much
as the layers' matrix products. :class:`GrowingLayer` keeps ``keys`` / ``values`` as views
``[:, :, :n]`` of buffers with spare columns and writes new columns into them; it reallocates
(to 1.5x the size) only when they are full, so appends cost amortised O(new columns).

Everything else that touches a layer keeps working unchanged: assigning ``keys`` / ``values``
(cropping, selecting rows, joining runners) adopts the assigned tensor, and a crop, which is
a leading slice of the buffer, keeps the buffer and its spare room.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

__all__ = ["GrowingLayer", "growing_cache"]

_MIN_SPARE = 16  # columns reserved beyond what is needed at a reallocation


class GrowingLayer(DynamicLayer):
    """``DynamicLayer`` whose ``update`` writes into preallocated columns (see module doc)."""

    def __init__(self) -> None:
        self._keys: torch.Tensor | None = None
        self._values: torch.Tensor | None = None
        self._kbuf: torch.Tensor | None = None  # [B, H, capacity, D] backing ``keys``, or None
        self._vbuf: torch.Tensor | None = None
        super().__init__()

    # keys / values: plain tensors to every reader; an assignment adopts the tensor, keeping the
    # buffer only when the tensor is a leading-column view of it (a crop).
    @property
    def keys(self) -> torch.Tensor | None:
        return self._keys

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        self._keys = value
        if not _is_prefix_view(value, self._kbuf):
            self._kbuf = None

    @property
    def values(self) -> torch.Tensor | None:
        return self._values

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        self._values = value
        if not _is_prefix_view(value, self._vbuf):
            self._vbuf = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``key_states`` / ``value_states [B, H, T, D]``; the whole cache's keys and
        values ``[B, H, n + T, D]`` (views of the buffers)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._kbuf, self._keys = _append(self._kbuf, self._keys, key_states)
        self._vbuf, self._values = _append(self._vbuf, self._values, value_states)
        return self._keys, self._values


def growing_cache(config) -> DynamicCache:
    """A ``DynamicCache`` for ``config`` whose full-attention layers are :class:`GrowingLayer`
    (sliding-window and other special layers are left as HF builds them)."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def _is_prefix_view(x: torch.Tensor | None, buf: torch.Tensor | None) -> bool:
    """Whether ``x`` is ``buf[:, :, :n]`` for some n (same storage start, rows and strides)."""
    return (x is not None and buf is not None and x.dim() == 4 and x.data_ptr() == buf.data_ptr()
            and x.shape[:2] == buf.shape[:2] and x.shape[3] == buf.shape[3] and x.shape[2] <= buf.shape[2]
            and x.stride() == buf.stride())


def _append(buf: torch.Tensor | None, held: torch.Tensor | None, new: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(buffer, view)`` after writing ``new [B, H, T, D]`` after the ``held`` columns."""
    n = held.shape[2] if held is not None and held.dim() == 4 else 0
    B, H, T, D = new.shape
    if n and held.shape[0] != B:
        raise ValueError(f"cache holds {held.shape[0]} rows, the new states have {B}")
    if buf is None or n + T > buf.shape[2] or buf.shape[0] != B or buf.dtype != new.dtype:
        grown = new.new_empty(B, H, max(n + T + _MIN_SPARE, (3 * (n + T)) // 2), D)
        if n:
            grown[:, :, :n] = held
        buf = grown
    buf[:, :, n:n + T] = new
    return buf, buf[:, :, :n + T]
