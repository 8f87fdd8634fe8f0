"""A HuggingFace causal LM with a batched KV cache whose rows advance independently.

Speculative decoding accepts a different number of tokens in each row, so rows of one batch
drift apart. Instead of re-padding, every cache column carries, per row, the absolute
position of the token stored there, or -1 for a *hole* (left padding, a rejected draft, a
placeholder). Each forward appends columns; the attention mask lets a query see the columns
of its own row that are real and not after it (plus itself, so no query row is ever fully
masked and padding never produces NaN). Rolling back a row only turns its columns into
holes; columns that are holes in every row are cropped off either end of the cache. With one
row there are never holes, the mask is plain causal and HF takes its fast path.

Attention reads every column of every row, holes included, so the layout keeps holes few: a
row that joins narrower than the cache sits in its newest columns (its holes first), so the
oldest columns belong to the oldest rows and leave with them (a crop of the front, a view),
rather than staying alive under every new row's prompt.

Positions are explicit (``position_ids``), so a row's RoPE positions are exactly those it
would have alone: a row alone and the same row in a batch see the same keys and positions.

A pass may feed a *tree* per row (``parents``): each new token sits at position
``length + depth`` and sees the row's real columns plus its ancestors among the new ones
(a 4-D mask; a chain needs none). :meth:`commit` then keeps one path and turns the other
new columns into holes. Rows join (:meth:`extend`) and leave (:meth:`select`) between passes,
which is what continuous batching needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from transformers import PreTrainedModel

from .layer import GrowingLayer, growing_cache

__all__ = ["KVRunner", "Prefill", "left_pad", "prefill", "tapped_states"]


def tapped_states(hidden_states: Sequence[torch.Tensor], taps: Sequence[int]) -> torch.Tensor:
    """The residual stream after decoder layers ``taps`` (1-based, before the last) from a HF
    model's ``hidden_states`` (entry l is layer l's output; the last entry is the normed final
    state): ``[B, T, n, H]``."""
    return torch.stack([hidden_states[t] for t in taps], dim=-2)


def left_pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged token rows -> ``feed [B, W]`` int64 (left-padded with 0) and ``live [B, W]`` bool,
    W = the longest row: the input :meth:`KVRunner.forward` takes."""
    width = max((len(r) for r in rows), default=0)
    feed = torch.zeros(len(rows), width, dtype=torch.int64)
    live = torch.zeros(len(rows), width, dtype=torch.bool)
    for b, r in enumerate(rows):  # a few tokens per row (a whole prompt at prefill)
        if r:
            feed[b, width - len(r):] = torch.tensor(r)
            live[b, width - len(r):] = True
    return feed, live


class KVRunner:
    """Owns one model's KV cache for a batch of ``batch_size`` rows.

    Attributes:
        lengths: ``[B]`` int64, real tokens held per row (= position of the row's next token).
    """

    def __init__(self, model: PreTrainedModel, batch_size: int) -> None:
        self.model = model
        self.cache = growing_cache(model.config)  # appends in place: no copy of the cache per pass
        device = model.device
        self.col_pos = torch.empty(batch_size, 0, dtype=torch.int64, device=device)  # [B, L], -1 = hole
        self.lengths = torch.zeros(batch_size, dtype=torch.int64, device=device)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, live: torch.Tensor | None = None, logits_to_keep: int = 0,
                *, parents: torch.Tensor | None = None, visible: torch.Tensor | None = None,
                return_hidden: bool = False, hidden_taps: Sequence[int] = (),
                **model_kwargs) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Append ``tokens [B, T]`` to every row and return logits ``[B, T', V]``.

        Args:
            tokens: ``[B, T]`` token ids.
            live: ``[B, T]`` bool, False for placeholder columns (ragged inputs are
                left-padded with placeholders); default all True. Live columns of a row get
                consecutive positions after the row's current length.
            logits_to_keep: if > 0, only the last ``logits_to_keep`` columns' logits.
            parents: ``[B, T]`` int64, a tree per row: new column t hangs under new column
                ``parents[b, t] < t``, or under the row's cached context when ``-1``. Column t
                then sits at position ``length + depth(t) - 1`` and attends to the context and
                its ancestors only. ``None`` is a chain (the common case; no mask is built for
                it). Not combined with ``live``.
            visible: ``[B, T, L]`` bool over the L columns already cached: which of them each new
                column may see, on top of the usual rule (real, not after it). A tree drafter grows
                its tree a depth per call: the columns of earlier depths are cached, and each new
                node must see its own ancestors among them only.
            return_hidden: also return the final hidden states ``[B, T, H]`` (what the output
                head reads), as ``(logits, hidden)``. Models may define ``forward_hidden``
                (see :mod:`verispec.drafters.eagle_head`); HF models run ``base_model`` then the head.
            hidden_taps: with ``return_hidden`` on a HF model, the hidden states returned are
                ``[B, T, 1 + n, H]``: the final ones, then the residual stream after these
                decoder layers (:func:`tapped_states`; what an EAGLE head with taps reads).
            model_kwargs: extra inputs for the model (an EAGLE head's ``features``).
        """
        B, T = tokens.shape
        if parents is not None and live is not None:
            raise ValueError("forward takes live (ragged chains) or parents (trees), not both")
        tree = None if parents is None else _ancestors(parents.to(tokens.device))  # [B, T, T]
        if live is None:
            live = torch.ones(B, T, dtype=torch.bool, device=tokens.device)
        if tree is None:
            offsets = torch.cumsum(live, dim=1) - live.long()  # [B, T] live columns before each
        else:
            offsets = tree.sum(-1) - 1  # [B, T] depth - 1: the ancestors before each column
        positions = self.lengths[:, None] + offsets  # [B, T]
        new_pos = torch.where(live, positions, -1)
        col_pos = torch.cat([self.col_pos, new_pos], dim=1)  # [B, L+T]
        mask = None
        if tree is not None or visible is not None or not bool((col_pos >= 0).all()):
            mask = self._mask(col_pos, T, tree, visible)
        kw = dict(attention_mask=mask, position_ids=positions, cache=self.cache, use_cache=True, **model_kwargs)
        forward_hidden = getattr(self.model, "forward_hidden", None)
        if forward_hidden is not None:
            logits, hidden = forward_hidden(tokens, logits_to_keep=logits_to_keep, **kw)
            result: torch.Tensor | tuple[torch.Tensor, torch.Tensor] = (logits, hidden) if return_hidden else logits
        elif return_hidden:
            out = self.model.base_model(input_ids=tokens, output_hidden_states=bool(hidden_taps), **kw)
            hidden = out.last_hidden_state  # [B, T, H]
            keep = hidden if logits_to_keep == 0 else hidden[:, -logits_to_keep:]
            if hidden_taps:
                hidden = torch.cat([hidden[:, :, None], tapped_states(out.hidden_states, hidden_taps)], dim=2)
            result = (self.model.get_output_embeddings()(keep), hidden)
        else:
            result = self.model(input_ids=tokens, logits_to_keep=logits_to_keep, **kw).logits
        self.col_pos = col_pos
        self.lengths = self.lengths + (live.sum(1) if tree is None else offsets.amax(1) + 1)
        return result

    def _mask(self, col_pos: torch.Tensor, T: int, tree: torch.Tensor | None = None,
              visible: torch.Tensor | None = None) -> torch.Tensor:
        """Additive 4D mask ``[B, 1, T, L+T]``: real, causal (by column) columns of the row, plus
        self; among the T new columns, only ancestors when ``tree [B, T, T]`` is given; among the L
        cached ones, only those ``visible [B, T, L]`` allows when given."""
        L_total = col_pos.shape[1]
        L = L_total - T
        cols = torch.arange(L_total, device=col_pos.device)
        q_cols = torch.arange(L, L_total, device=col_pos.device)
        causal = cols[None, :] <= q_cols[:, None]  # [T, L+T]
        allowed = (col_pos[:, None, :] >= 0) & causal[None]  # [B, T, L+T]
        if tree is not None:
            allowed[:, :, L:] &= tree
        if visible is not None:
            allowed[:, :, :L] &= visible.to(allowed.device)
        allowed |= cols[None, None, :] == q_cols[None, :, None]  # a query always sees itself
        dtype = self.model.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=col_pos.device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[:, None]

    def truncate(self, new_lengths: torch.Tensor) -> None:
        """Roll row b back to its first ``new_lengths[b]`` real tokens (never forward)."""
        self.col_pos = torch.where(self.col_pos < new_lengths[:, None], self.col_pos, -1)
        self.lengths = torch.minimum(self.lengths, new_lengths)
        self._crop_ends()

    def commit(self, kept: torch.Tensor) -> None:
        """Keep, of the last pass's ``T`` new columns, those where ``kept [B, T]`` (a root-to-node
        path of that pass's tree, or a prefix of a chain); the others become holes."""
        T = kept.shape[1]
        L = self.col_pos.shape[1] - T
        new = torch.where(kept.to(self.col_pos.device), self.col_pos[:, L:], -1)
        self.col_pos = torch.cat([self.col_pos[:, :L], new], dim=1)
        self.lengths = self.col_pos.amax(1, keepdim=False).clamp_min(-1) + 1 if L + T else self.lengths
        self._crop_ends()

    def _crop_ends(self) -> None:
        """Crop columns that are holes in every row off both ends of the cache (views: no copy)."""
        real = (self.col_pos >= 0).any(0)  # [L]
        if not bool(real.any()):
            first, keep = 0, 0
        else:
            used = real.nonzero()
            first, keep = int(used.min()), int(used.max()) + 1
        drop = self.col_pos.shape[1] - keep
        if drop > 0:
            self.cache.crop(-drop)  # transformers 5.24: a negative count removes that many
        if first > 0:  # the oldest columns, once the rows that held them have left
            for layer in self.cache.layers:
                if _held(layer.keys) is not None:
                    layer.keys, layer.values = layer.keys[:, :, first:], layer.values[:, :, first:]
        self.col_pos = self.col_pos[:, first:keep]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only the rows ``rows`` (int64 ``[n]``, in that order): finished and cancelled rows
        leave the batch. Columns that are then holes in every row are cropped off either end (a
        view); once they are a quarter of the columns between, the rows and columns that stay are
        copied out in one go instead. Before that, in-place layers only move rows in their buffers."""
        rows = rows.to(self.col_pos.device)
        self.col_pos, self.lengths = self.col_pos[rows], self.lengths[rows]
        cols = (self.col_pos >= 0).any(0).nonzero().squeeze(1)  # [L'] columns some row still uses
        span = int(cols.max() - cols.min()) + 1 if len(cols) else 0  # what is left after cropping the ends
        if not self._in_place() or 4 * len(cols) < 3 * span or not len(cols):
            self._keep(rows, cols)  # one copy of the rows and columns that stay
            return
        for layer in self.cache.layers:  # few dead columns: move rows within the buffers
            layer.select_rows(rows)
        self._crop_ends()

    def _keep(self, rows: torch.Tensor, cols: torch.Tensor) -> None:
        """Copy the cache's rows ``rows`` (``col_pos`` has them already) and columns ``cols [L']``
        into fresh tensors."""
        for layer in self.cache.layers:
            if _held(layer.keys) is not None and len(cols):
                layer.keys, layer.values = layer.keys[rows][:, :, cols], layer.values[rows][:, :, cols]
            else:
                _empty(layer)
        self.col_pos = self.col_pos[:, cols]

    def extend(self, *others: KVRunner) -> None:
        """Append the rows of ``others`` (runners over the same model, e.g. new requests prefilled
        on their own) after this one's, in one copy per layer (none when this runner is empty and
        there is one other: it takes that cache). Narrower rows get hole columns before their own
        (right-aligned: every row's newest token in the last column, so the oldest columns die
        with the oldest rows and are cropped off the front). ``others`` are
        consumed: their caches may now be this runner's, so they are not to be used again."""
        runners = (self, *others)
        if any(len(r.cache.layers) != len(self.cache.layers) for r in others):
            raise ValueError("extend: the runners' caches have different layers (another model?)")
        if not len(self.lengths) and len(others) == 1 and others[0].model is self.model:
            self._adopt(others[0])  # an empty runner takes the other's cache as it is: no copy
            return
        if self._in_place() and self.num_columns and others:
            self._add_rows(others)
            return
        W = max(r.num_columns for r in runners)
        for i, a in enumerate(self.cache.layers):
            layers = [r.cache.layers[i] for r in runners]
            for name in ("keys", "values"):
                held = [_held(getattr(layer, name)) for layer in layers]
                ref = next((x for x in held if x is not None), None)
                if ref is None:
                    _empty(a)  # no column anywhere: the next pass starts the layer afresh
                    continue
                setattr(a, name, torch.cat([_pad_front(x, W, len(r.lengths), ref) for x, r in zip(held, runners)]))
            if ref is not None and not a.is_initialized:  # a held nothing: it now holds the others' columns
                a.device, a.is_initialized = ref.device, True
        device = self.col_pos.device
        hole = torch.full((1, 1), -1, dtype=torch.int64, device=device)
        self.col_pos = torch.cat([torch.cat([hole.expand(len(r.lengths), W - r.num_columns), r.col_pos.to(device)], 1)
                                  for r in runners])
        self.lengths = torch.cat([r.lengths.to(device) for r in runners])

    def _adopt(self, other: KVRunner) -> None:
        """Hold ``other``'s rows by taking its cache and column positions (``other`` is not used again)."""
        self.cache, self.col_pos, self.lengths = other.cache, other.col_pos, other.lengths

    def _in_place(self) -> bool:
        """Whether every layer can select and add rows inside its buffers."""
        return all(isinstance(layer, GrowingLayer) for layer in self.cache.layers)

    def _add_rows(self, others: tuple[KVRunner, ...]) -> None:
        """:meth:`extend` without copying this runner's rows: the others are joined on their own
        (a copy of the new rows only), then written into this cache's spare rows, in its newest
        columns when narrower (when wider, this runner's rows get hole columns at the end)."""
        joined = KVRunner(self.model, 0)
        joined.extend(*others)
        for a, o in zip(self.cache.layers, joined.cache.layers):
            k, v = _held(o.keys), _held(o.values)
            if k is None:  # the new rows hold no column yet
                k = v = a.keys.new_zeros(len(joined.lengths), a.keys.shape[1], 0, a.keys.shape[3])
            a.add_rows(k, v)
        W = max(self.num_columns, joined.num_columns)
        device = self.col_pos.device
        hole = torch.full((1, 1), -1, dtype=torch.int64, device=device)
        mine = torch.cat([self.col_pos, hole.expand(len(self.lengths), W - self.num_columns)], 1)
        new = torch.cat([hole.expand(len(joined.lengths), W - joined.num_columns), joined.col_pos.to(device)], 1)
        self.col_pos = torch.cat([mine, new])
        self.lengths = torch.cat([self.lengths, joined.lengths.to(device)])

    @property
    def num_columns(self) -> int:
        """Cache columns held (real tokens plus holes)."""
        return self.col_pos.shape[1]


class Prefill(NamedTuple):
    """What :func:`prefill` returns: the runner, each row's logits after its last token
    ``[n, V]`` (NaN for an empty row), and its final hidden states ``[len(row), H]`` when asked."""

    runner: KVRunner
    logits: torch.Tensor
    hidden: list[torch.Tensor] | None


def prefill(model: PreTrainedModel, rows: list[list[int]], *, return_hidden: bool = False,
            hidden_taps: Sequence[int] = (), features: list[torch.Tensor] | None = None) -> Prefill:
    """A runner holding ``rows`` (token lists of any lengths, in this order), with each row's
    next-token logits (what the pass over its last token predicts) and, if ``return_hidden``,
    its final hidden states (``[len, H]``; with ``hidden_taps``, ``[len, 1 + n, H]``: see
    :meth:`KVRunner.forward`). ``features``: per row ``[len(row), H]`` fed beside its tokens (an
    EAGLE head's input).

    Rows of equal length go through the model together; rows of different lengths are never
    padded into one pass (a padded pass costs the longest row's length for every row and needs a
    mask), their runners are joined afterwards (:meth:`KVRunner.extend`).
    """
    device = model.device
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(len(r), []).append(i)
    runners, order = [], []
    hidden: list[torch.Tensor | None] = [None] * len(rows)
    logits: list[torch.Tensor | None] = [None] * len(rows)
    for n, idx in groups.items():
        runner = KVRunner(model, len(idx))
        if n:
            extra = {} if features is None else {"features": torch.stack([features[i] for i in idx]).to(device)}
            out = runner.forward(torch.tensor([rows[i] for i in idx], device=device), logits_to_keep=1,
                                 return_hidden=return_hidden, hidden_taps=hidden_taps, **extra)
            last = out[0] if return_hidden else out  # [b, 1, V]
            for j, i in enumerate(idx):
                hidden[i] = out[1][j] if return_hidden else None
                logits[i] = last[j, -1]
        runners.append(runner)
        order += idx
    if len(runners) == 1:  # one length (one prompt, say): the group's runner is the result, rows in order
        joined = runners[0]
    else:
        joined = KVRunner(model, 0)
        joined.extend(*runners)
        where = {row: pos for pos, row in enumerate(order)}
        joined.select(torch.tensor([where[i] for i in range(len(rows))], dtype=torch.int64))
    V = next((x.shape[-1] for x in logits if x is not None), model.config.vocab_size)
    dtype = next((x.dtype for x in logits if x is not None), model.dtype)
    nan = torch.full((V,), float("nan"), dtype=dtype, device=device)
    stacked = torch.stack([x if x is not None else nan for x in logits]) if rows else nan.new_zeros(0, V)
    if not return_hidden:
        return Prefill(joined, stacked, None)
    shape = (len(hidden_taps) + 1, model.config.hidden_size) if hidden_taps else (model.config.hidden_size,)
    return Prefill(joined, stacked, [h if h is not None else torch.zeros(0, *shape, device=device) for h in hidden])


def _empty(layer) -> None:
    """Reset a cache layer that holds no column (whatever its batch size was)."""
    layer.keys = layer.values = None
    layer.is_initialized = False


def _held(x: torch.Tensor | None) -> torch.Tensor | None:
    """A cache layer's ``[B, heads, L, head_dim]`` tensor, or None while it holds no column."""
    return x if x is not None and x.dim() == 4 and x.shape[2] > 0 else None


def _ancestors(parents: torch.Tensor) -> torch.Tensor:
    """``[B, T, T]`` bool, ``[b, t, s]`` = column s is column t or one of its ancestors."""
    B, T = parents.shape
    if bool((parents >= torch.arange(T, device=parents.device)).any()) or bool((parents < -1).any()):
        raise ValueError("parents must point to an earlier column or be -1 (topological order)")
    anc = torch.eye(T, dtype=torch.bool, device=parents.device).expand(B, T, T).clone()
    rows = torch.arange(B, device=parents.device)
    for t in range(T):  # a parent's ancestors are complete before its children's
        par = parents[:, t]
        has = par >= 0
        anc[rows[has], t] |= anc[rows[has], par[has]]
    return anc


def _pad_front(x: torch.Tensor | None, W: int, B: int, ref: torch.Tensor) -> torch.Tensor:
    """``x [B, H, L, D]`` behind ``W - L`` zero (hole) columns: ``[B, H, W, D]``; ``None`` (no
    column yet) becomes ``B`` rows of zeros shaped like ``ref``."""
    if x is None:
        return ref.new_zeros(B, ref.shape[1], W, ref.shape[3])
    return torch.cat([x.new_zeros(B, x.shape[1], W - x.shape[2], x.shape[3]), x], dim=2)
