"""A HuggingFace causal LM with a batched KV cache whose rows advance independently.

Speculative decoding accepts a different number of tokens in each row, so rows of one batch
drift apart. Instead of re-padding, every cache column carries, per row, the absolute
position of the token stored there, or -1 for a *hole* (left padding, a rejected draft, a
placeholder). Each forward appends columns; the attention mask lets a query see the columns
of its own row that are real and not after it (plus itself, so no query row is ever fully
masked and padding never produces NaN). Rolling back a row only turns its columns into
holes; columns that are holes in every row are cropped off the end of the cache. With one
row there are never holes, the mask is plain causal and HF takes its fast path.

Positions are explicit (``position_ids``), so a row's RoPE positions are exactly those it
would have alone: a row alone and the same row in a batch see the same keys and positions.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

__all__ = ["KVRunner", "left_pad"]


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
        self.cache = DynamicCache(config=model.config)
        device = model.device
        self.col_pos = torch.empty(batch_size, 0, dtype=torch.int64, device=device)  # [B, L], -1 = hole
        self.lengths = torch.zeros(batch_size, dtype=torch.int64, device=device)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, live: torch.Tensor | None = None, logits_to_keep: int = 0,
                *, return_hidden: bool = False, **model_kwargs
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Append ``tokens [B, T]`` to every row and return logits ``[B, T', V]``.

        Args:
            tokens: ``[B, T]`` token ids.
            live: ``[B, T]`` bool, False for placeholder columns (ragged inputs are
                left-padded with placeholders); default all True. Live columns of a row get
                consecutive positions after the row's current length.
            logits_to_keep: if > 0, only the last ``logits_to_keep`` columns' logits.
            return_hidden: also return the final hidden states ``[B, T, H]`` (what the output
                head reads), as ``(logits, hidden)``. Models may define ``forward_hidden``
                (see :mod:`verispec.eagle`); HF models run ``base_model`` then the head.
            model_kwargs: extra inputs for the model (an EAGLE head's ``features``).
        """
        B, T = tokens.shape
        if live is None:
            live = torch.ones(B, T, dtype=torch.bool, device=tokens.device)
        offsets = torch.cumsum(live, dim=1) - live.long()  # [B, T] live columns before each
        positions = self.lengths[:, None] + offsets  # [B, T]
        new_pos = torch.where(live, positions, -1)
        col_pos = torch.cat([self.col_pos, new_pos], dim=1)  # [B, L+T]
        mask = None if bool((col_pos >= 0).all()) else self._mask(col_pos, T)
        kw = dict(attention_mask=mask, position_ids=positions, cache=self.cache, use_cache=True, **model_kwargs)
        forward_hidden = getattr(self.model, "forward_hidden", None)
        if forward_hidden is not None:
            logits, hidden = forward_hidden(tokens, logits_to_keep=logits_to_keep, **kw)
            result: torch.Tensor | tuple[torch.Tensor, torch.Tensor] = (logits, hidden) if return_hidden else logits
        elif return_hidden:
            hidden = self.model.base_model(input_ids=tokens, **kw).last_hidden_state  # [B, T, H]
            keep = hidden if logits_to_keep == 0 else hidden[:, -logits_to_keep:]
            result = (self.model.get_output_embeddings()(keep), hidden)
        else:
            result = self.model(input_ids=tokens, logits_to_keep=logits_to_keep, **kw).logits
        self.col_pos = col_pos
        self.lengths = self.lengths + live.sum(1)
        return result

    def _mask(self, col_pos: torch.Tensor, T: int) -> torch.Tensor:
        """Additive 4D mask ``[B, 1, T, L+T]``: real, causal (by column) columns of the row, plus self."""
        L_total = col_pos.shape[1]
        L = L_total - T
        cols = torch.arange(L_total, device=col_pos.device)
        q_cols = torch.arange(L, L_total, device=col_pos.device)
        causal = cols[None, :] <= q_cols[:, None]  # [T, L+T]
        allowed = (col_pos[:, None, :] >= 0) & causal[None]  # [B, T, L+T]
        allowed |= cols[None, None, :] == q_cols[None, :, None]  # a query always sees itself
        dtype = self.model.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=col_pos.device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[:, None]

    def truncate(self, new_lengths: torch.Tensor) -> None:
        """Roll row b back to its first ``new_lengths[b]`` real tokens (never forward)."""
        self.col_pos = torch.where(self.col_pos < new_lengths[:, None], self.col_pos, -1)
        self.lengths = torch.minimum(self.lengths, new_lengths)
        # Crop columns that are holes in every row off the end of the cache.
        real = (self.col_pos >= 0).any(0)  # [L]
        keep = int(real.nonzero().max()) + 1 if bool(real.any()) else 0
        drop = self.col_pos.shape[1] - keep
        if drop > 0:
            self.cache.crop(-drop)  # transformers 5.24: a negative count removes that many
            self.col_pos = self.col_pos[:, :keep]

    @property
    def num_columns(self) -> int:
        """Cache columns held (real tokens plus holes)."""
        return self.col_pos.shape[1]
