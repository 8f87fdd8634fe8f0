"""A KV-cache layer that appends in place: HF's ``DynamicLayer`` with spare columns.

``DynamicLayer.update`` concatenates the new keys and values onto the old ones, so every
forward copies the whole cache: at batch 64 and a few hundred columns that copy costs as much
as the layers' matrix products. :class:`GrowingLayer` keeps ``keys`` / ``values`` as column
windows ``[:, :, s:s + n]`` of buffers with spare columns and writes new columns into them; it
reallocates (to 1.5x the size, the window moved to column 0) only when they are full, so appends
cost amortised O(new columns).

Everything else that touches a layer keeps working unchanged: assigning ``keys`` / ``values``
(cropping, selecting rows, joining runners) adopts the assigned tensor, and a crop at either end,
a column window of the buffer, keeps the buffer and its spare room.
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
    # buffer only when the tensor is a column window of it (a crop at either end).
    @property
    def keys(self) -> torch.Tensor | None:
        return self._keys

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        self._keys = value
        if _window(value, self._kbuf) is None:
            self._kbuf = None

    @property
    def values(self) -> torch.Tensor | None:
        return self._values

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        self._values = value
        if _window(value, self._vbuf) is None:
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

    @torch.inference_mode()
    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep rows ``rows [n]`` (int64, in that order). Rows that stay where they are are not
        copied: dropping a few rows by moving the last ones into their places (what the engine
        does) copies only the moved rows."""
        if self._keys is None or self._keys.dim() != 4:
            return
        self._kbuf, self._keys = _select(self._kbuf, self._keys, rows)
        self._vbuf, self._values = _select(self._vbuf, self._values, rows)

    @torch.inference_mode()
    def add_rows(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Append rows ``keys`` / ``values [b, H, n', D]`` after the held ones. Narrower new rows
        sit in the newest columns (their hole columns first), so that the oldest columns die with
        the oldest rows and the runner crops them off the front (a view: no copy); narrower held
        rows get hole columns at the end. Holes hold zeros or stale finite values (the runner's
        mask never reads them)."""
        self._kbuf, self._keys = _add_rows(self._kbuf, self._keys, keys)
        self._vbuf, self._values = _add_rows(self._vbuf, self._values, values)


def growing_cache(config) -> DynamicCache:
    """A ``DynamicCache`` for ``config`` whose full-attention layers are :class:`GrowingLayer`
    (sliding-window and other special layers are left as HF builds them)."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def _window(x: torch.Tensor | None, buf: torch.Tensor | None) -> int | None:
    """The first column ``s`` if ``x`` is ``buf[:b, :, s:s + n]`` for some b, n (same strides), else None."""
    if x is None or buf is None or x.dim() != 4 or x.stride() != buf.stride() or x.shape[0] > buf.shape[0] \
            or x.shape[1] != buf.shape[1] or x.shape[3] != buf.shape[3]:
        return None
    offset, step = x.data_ptr() - buf.data_ptr(), buf.stride(2) * buf.element_size()
    if offset < 0 or offset % step:
        return None
    s = offset // step  # a view that starts at another row or head lands past the columns: refused
    return s if s + x.shape[2] <= buf.shape[2] else None


def _grown(held: torch.Tensor | None, like: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """A zeroed buffer with room for ``rows`` x ``cols`` (plus spare), holding ``held`` from column 0."""
    B, H, _, D = like.shape
    buf = like.new_zeros(max(rows, (5 * rows) // 4), H, max(cols + _MIN_SPARE, (3 * cols) // 2), D)
    if held is not None and held.dim() == 4 and held.shape[2]:
        buf[: held.shape[0], :, : held.shape[2]] = held
    return buf


def _append(buf: torch.Tensor | None, held: torch.Tensor | None, new: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(buffer, view)`` after writing ``new [B, H, T, D]`` after the ``held`` columns."""
    n = held.shape[2] if held is not None and held.dim() == 4 else 0
    B, H, T, D = new.shape
    if n and held.shape[0] != B:
        raise ValueError(f"cache holds {held.shape[0]} rows, the new states have {B}")
    s = _window(held, buf) if n else 0
    if buf is None or s is None or s + n + T > buf.shape[2] or B > buf.shape[0] or buf.dtype != new.dtype:
        buf, s = _grown(held, new, B, n + T), 0
    buf[:B, :, s + n:s + n + T] = new
    return buf, buf[:B, :, s:s + n + T]


def _select(buf: torch.Tensor | None, held: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
    """``(buffer, view)`` keeping rows ``rows`` of ``held``; in place when no moved row's source
    is another moved row's destination."""
    rows = rows.to(held.device)
    n = len(rows)
    s = _window(held, buf)
    if s is None or not n:
        return None, held[rows]
    moved = (rows != torch.arange(n, device=rows.device)).nonzero().squeeze(1)
    src = rows[moved]
    if bool(torch.isin(src, moved).any()):  # a general permutation: copy
        return None, held[rows]
    L = held.shape[2]
    if len(moved):
        buf[moved, :, s:s + L] = buf[src, :, s:s + L]
    return buf, buf[:n, :, s:s + L]


def _add_rows(buf: torch.Tensor | None, held: torch.Tensor | None, new: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(buffer, view)`` with the rows ``new [b, H, n', D]`` after ``held``'s, in the last n'
    columns (see :meth:`GrowingLayer.add_rows`)."""
    B = held.shape[0] if held is not None and held.dim() == 4 else 0
    n = held.shape[2] if B else 0
    b, _, m, _ = new.shape
    W = max(n, m)
    s = _window(held, buf) if B else 0
    if buf is None or s is None or B + b > buf.shape[0] or s + W > buf.shape[2] or buf.dtype != new.dtype:
        buf, s = _grown(held if B else None, new, B + b, W), 0
    if m:
        buf[B:B + b, :, s + W - m:s + W] = new
    return buf, buf[:B + b, :, s:s + W]
