"""Drafting with an EAGLE head over the target's features (see :mod:`verispec.drafters.eagle_head`)."""

from __future__ import annotations

import torch

from .eagle_head import DRAFT_WEIGHTS, EagleDraftModel, EagleFiles, bind_eagle, features_match_logits
from ..models import CausalLM
from ..kv import KVRunner, left_pad, prefill
from .base import Draft, DraftAsk, DrafterBase
from .drawing import draft_chain
from .tree_growth import draft_tree

__all__ = ["EagleDrafter"]


class EagleDrafter(DrafterBase):
    """Drafts with an EAGLE head over the target's features.

    The head's KV cache holds one *pair* ``(f_{i-1}, x_i)`` per context position, only for
    positions whose target feature is known (the target computes ``f_i`` when it verifies
    position i). A proposal feeds the pending real pairs, then drafts step by step, feeding
    its own predicted feature beside each draft token; those speculative pairs are rolled back
    at ``update``, which brings the target's real features for the emitted tokens.
    """

    reads_target_features = True

    drafts_trees = True  # a DraftAsk with ``nodes`` gets a tree (EAGLE-2's dynamic tree)

    def __init__(self, files: EagleFiles, name: str = "eagle", *, weights: str = "auto", tree_width: int = 4) -> None:
        """``weights``: what each draft step reads, ``"auto"`` (a rule on the CPU's flags),
        ``"fp32"`` / ``"fp16"`` / ``"int8"``, or ``"measured"`` (timed) (see
        :func:`verispec.drafters.eagle_head.bind_eagle`). ``tree_width``: children per node and
        nodes expanded per depth when the engine asks for trees (:mod:`.tree_growth`)."""
        if weights not in DRAFT_WEIGHTS:
            raise ValueError(f"weights must be one of {DRAFT_WEIGHTS}, got {weights!r}")
        if isinstance(tree_width, bool) or not isinstance(tree_width, int) or not 1 <= tree_width <= 16:
            raise ValueError(f"tree_width must be an int in [1, 16], got {tree_width!r}")
        self.tree_width = tree_width
        self.files = files
        self.name = name
        self.weights = weights
        self.model: EagleDraftModel | None = None
        self.vocab_map = files.vocab_map

    @property
    def feature_taps(self) -> tuple[int, ...]:  # type: ignore[override]
        """The target's decoder layers the head reads beside its final features (EAGLE-3 style)."""
        return self.files.head.feature_taps

    def bind(self, target: CausalLM) -> None:
        layers = getattr(target.model.config, "num_hidden_layers", 0)
        if self.feature_taps and max(self.feature_taps) >= layers:
            raise ValueError(f"EAGLE head {self.name!r} reads layers {list(self.feature_taps)}; target "
                             f"{target.name!r} has {layers}")
        if not features_match_logits(target.model):
            raise ValueError(f"target {target.name!r} does not compute its logits as lm_head(final hidden "
                             "state); an EAGLE head cannot draft from its features")
        self.model = bind_eagle(self.files, target, weights=self.weights)
        self.lengths: list[int] = []  # context length per row
        self.pending_tok: list[list[int]] = []  # x_i not in the head's cache yet
        self.pending_feat: list[list[torch.Tensor]] = []  # f_{i-1} beside each
        self.runner = KVRunner(self.model, 0)
        self._real = self.runner.lengths.clone()  # cache length holding only real pairs

    def _bound(self) -> EagleDraftModel:
        if self.model is None:
            raise RuntimeError("EagleDrafter.bind(target) must be called before use")
        return self.model

    def add(self, prompts: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        """New rows join. Their prompts' pairs, but the last, go through the head here, prompts of
        one length together (:func:`~verispec.kv.prefill`), in runners of their own that then join
        the others': fed at the next proposal beside the rows already running, a 200-token prompt
        made every row's pass 200 columns wide and left as many hole columns in every row's cache
        (at 8 rows that cost more than speculation gained), and padded to the longest prompt, 16
        joining prompts cost the head a fifth of the target's prefill. The last pair stays
        pending: the proposal reads its logits."""
        model = self._bound()
        if features is None or len(features) != len(prompts):
            raise ValueError("EagleDrafter needs the target's prompt features (one [len(prompt) - 1, H] per prompt)")
        features = self._real_features(features)
        zero = torch.zeros(1, model.config.hidden_size, dtype=model.dtype)
        pairs = [(list(p), torch.cat([zero, f.to(model.dtype)])) for p, f in zip(prompts, features)]  # (x_i, f_{i-1})
        # prompts of one length together, never padded to the longest (see kv.prefill)
        joining = prefill(model, [p[:-1] for p, _ in pairs], features=[f[:-1] for _, f in pairs]).runner
        self.lengths += [len(p) for p in prompts]
        self.pending_tok += [p[-1:] for p, _ in pairs]
        self.pending_feat += [[f[-1:]] for _, f in pairs]
        self.runner.extend(joining)
        self._real = self.runner.lengths.clone()

    def keep(self, rows: torch.Tensor) -> None:
        self._bound()
        index = rows.tolist()
        self.lengths = [self.lengths[i] for i in index]
        self.pending_tok = [self.pending_tok[i] for i in index]
        self.pending_feat = [self.pending_feat[i] for i in index]
        self.runner.select(rows)
        self._real = self._real[rows.to(self._real.device)]

    def propose(self, ask: DraftAsk) -> Draft:
        model = self._bound()
        B = len(self.lengths)
        if B == 0 or int(ask.k.max()) == 0:
            return Draft(torch.zeros(B, 0, dtype=torch.int64), None, torch.zeros(B, dtype=torch.int64))
        logits, f_last = self._feed_pending()  # [B, V_d], [B, 1, H]
        positions = torch.tensor(self.lengths, dtype=torch.int64, device=model.device)  # slot 0's position
        if ask.nodes is not None and bool((ask.nodes > 0).any()):
            return draft_tree(logits, self._expand(f_last), ask, self.vocab_map, positions, width=self.tree_width)[0]
        feature = {"f": f_last}

        def step(d: torch.Tensor) -> torch.Tensor:  # the pair (f^, d): the head's own feature beside its draft
            out, feature["f"] = self.runner.forward(d[:, None], logits_to_keep=1, return_hidden=True,
                                                    features=feature["f"])
            return out[:, -1]

        return draft_chain(logits, step, ask, self.vocab_map, positions)[0]

    def _expand(self, f_root: torch.Tensor):
        """The tree grower's ``expand``: feed a depth's new nodes, return the head's logits after each.

        Node i's pair is (the head's predicted feature at i's parent, token i); it sits at the
        position of its depth and sees the real context and its ancestors' columns only (the
        columns of earlier depths stay cached: ``KVRunner.forward(visible=)``). They are rolled
        back at :meth:`update`, as a chain's are."""
        B, H = f_root.shape[0], f_root.shape[-1]
        start = self.runner.col_pos.shape[1]  # the first speculative column
        grown = {"feat": f_root[:, :0], "vis": torch.zeros(B, 0, 0, dtype=torch.bool), "col": []}

        def expand(tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
            device = self.runner.col_pos.device
            L = self.runner.col_pos.shape[1]
            f = torch.cat([f_root, grown["feat"]], 1)  # [B, 1 + n, H]: slot 0 the root
            inputs = f.gather(1, (parents + 1)[..., None].expand(-1, -1, H))  # [B, m, H]
            vis = grown["vis"]  # [B, n, S]: each node's ancestors' columns, among the speculative ones
            S, n = L - start, vis.shape[1]
            col = torch.tensor(grown["col"], dtype=torch.int64).view(1, -1).expand(B, -1)  # [B, n]
            par = parents.cpu().clamp_min(0)
            spec = torch.zeros(B, tokens.shape[1], S, dtype=torch.bool)
            if n:
                spec = torch.where((parents.cpu() >= 0)[..., None], vis[torch.arange(B)[:, None], par, :S], spec)
                own = torch.nn.functional.one_hot(col.gather(1, par) - start, S).bool()  # the parent's column
                spec |= own & (parents.cpu() >= 0)[..., None]
            visible = torch.cat([torch.ones(B, tokens.shape[1], start, dtype=torch.bool), spec], -1).to(device)
            logits, hidden = self.runner.forward(tokens, parents=torch.full_like(tokens, -1), visible=visible,
                                                 return_hidden=True, features=inputs)
            m = tokens.shape[1]
            grown["vis"] = torch.cat([torch.nn.functional.pad(vis, (0, m)), torch.nn.functional.pad(spec, (0, m))], 1)
            grown["feat"] = torch.cat([grown["feat"], hidden], 1)
            grown["col"] += list(range(L, L + m))
            return logits

        return expand

    def _real_features(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        """What the head reads of the target, per row ``[n, H]``: the final features as they
        are, or for a head with taps (``[n, 1 + taps, H]`` given) the final ones with the taps
        fused in (:meth:`~verispec.drafters.eagle_head.EagleDraftModel.fuse`: the fusion's matmul in
        the draft weights), each row on its own so that its features never depend on the other rows."""
        model = self._bound()
        taps = model.head.feature_taps
        shape = (1 + len(taps),) if taps else ()  # what each feature holds besides H
        bad = next((f.shape for f in features if tuple(f.shape[1:-1]) != shape), None)
        if bad is not None:
            reads = f" reads the target's layers {list(taps)}: it" if taps else ""
            want = f"[n, {1 + len(taps)}, H]" if taps else "[n, H]"
            raise ValueError(f"EAGLE head {self.name!r}{reads} needs features {want}, got {list(bad)}")
        if not taps:
            return features
        with torch.no_grad():
            return [model.fuse(f[:, 0], f[:, 1:]) for f in features]

    def _feed_pending(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed the pending real pairs (ragged: left-padded); the logits ``[B, V_d]`` and the
        predicted feature ``[B, 1, H]`` after each row's context."""
        if not any(self.pending_tok):
            raise RuntimeError("EAGLE head has no pending pair to draft from")
        logits, f_hat = self._feed(self.runner, self.pending_tok, self.pending_feat)
        B = len(self.pending_tok)
        self.pending_tok = [[] for _ in range(B)]
        self.pending_feat = [[] for _ in range(B)]
        self._real = self.runner.lengths.clone()  # the cache holds only real pairs up to here
        return logits[:, -1], f_hat[:, -1:]

    def _feed(self, runner: KVRunner, tokens: list[list[int]], feats: list[list[torch.Tensor]]
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed ragged pairs (tokens per row, their features as a list of ``[n, H]`` pieces per row;
        left-padded) through ``runner``: logits ``[B, 1, V_d]`` and predicted features ``[B, T, H]``."""
        model = self._bound()
        feed, live = left_pad(tokens)
        device = model.device
        feed, live = feed.to(device), live.to(device)
        f = torch.zeros(*feed.shape, model.config.hidden_size, dtype=model.dtype, device=device)
        f[live] = torch.cat([x.to(device) for row in feats for x in row])  # row-major, as live
        return runner.forward(feed, live, logits_to_keep=1, return_hidden=True, features=f)

    def update(self, emitted: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        model = self._bound()
        if features is None:
            raise ValueError("EagleDrafter.update needs the target's features for the emitted tokens")
        features = self._real_features(features)
        self.runner.truncate(self._real.to(self.runner.lengths.device))  # drop speculative pairs
        for b, new in enumerate(emitted):
            if not new:
                continue
            if features[b].shape[0] != len(new):
                raise ValueError(f"row {b}: {len(new)} emitted tokens but {features[b].shape[0]} features")
            self.pending_tok[b].extend(new)
            self.pending_feat[b].append(features[b].to(model.dtype))
            self.lengths[b] += len(new)
