"""A draft: the tokens a drafter proposes for one step, as a tree per row (a chain is a tree).

Node ``i`` of row ``b`` holds ``tokens[b, i]``; its parent is ``parents[b, i]``, another node of
the same row, or ``-1`` for the root: the row's last emitted token, which the target pass feeds
first. A chain is the case ``parents[b, i] = i - 1``. Nodes are in topological order (a parent
comes before its children), so the target pass feeds them in index order and node ``i`` of a
row sits in column ``i + 1`` of that pass.

``probs[b, i]`` is the distribution q that node i's token was drawn from (over the target's
vocabulary), i.e. the drafter's distribution *after* its parent, the same row for every sibling
(for children drawn without replacement: q before any sibling was removed; the verifier removes
them); ``None`` means every node is a point mass (prompt lookup, greedy drafters). ``child_draw``
says how the children of one node were drawn, which decides the exact rule that verifies them
(docs/design.md section 9; :func:`verispec.verify.verify_tree`):

* ``"single"``: one child per node (a chain);
* ``"iid"``: children drawn independently from the same q (multi-draft rejection sampling);
* ``"without_replacement"``: children drawn one after another, each from q renormalised
  without the earlier ones (recursive rejection sampling, SpecInfer/sequoia style);
* ``"top_k"``: the k most likely tokens of q, deterministically (verified as point masses,
  whatever ``probs`` holds: exact at any temperature, accepting less than a sampled q would).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["Draft", "CHILD_DRAWS", "chain_parents", "node_depths", "tree_outcome"]

CHILD_DRAWS = ("single", "iid", "without_replacement", "top_k")


def chain_parents(B: int, N: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``[B, N]`` int64 parents of a chain: node i hangs under node i - 1 (node 0 under the root)."""
    return (torch.arange(N, device=device) - 1).expand(B, N).clone()


def node_depths(parents: torch.Tensor) -> torch.Tensor:
    """``[B, N]`` int64 depth of each node of trees given by ``parents [B, N]`` (topological; -1:
    the root): 1 for children of the root."""
    B, N = parents.shape
    depth = torch.zeros(B, N, dtype=torch.int64, device=parents.device)
    for i in range(N):  # topological order: a parent's depth is known before its children's
        par = parents[:, i]
        depth[:, i] = 1 + torch.where(par >= 0, depth.gather(1, par.clamp_min(0)[:, None]).squeeze(1), 0)
    return depth


def tree_outcome(path: torch.Tensor, parents: torch.Tensor, num_draft: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tested, accepted)`` ``[B, N]`` bool for a tree pass: tested, the nodes under the root or
    under a node of the accepted ``path [B, N]`` (node ids, -1 past its end); accepted, those on it."""
    path, parents = path.cpu(), parents.cpu()
    B, N = parents.shape
    on = torch.zeros(B, N + 1, dtype=torch.bool)  # slot 0: the root
    on.scatter_(1, (path + 1).clamp_min(0), path >= 0)
    on[:, 0] = True
    valid = torch.arange(N)[None] < num_draft.cpu()[:, None]
    tested = valid & on.gather(1, (parents + 1).clamp_min(0))
    return tested, tested & on[:, 1:]


@dataclass
class Draft:
    """One proposal for a batch of B rows, N node slots per row.

    Attributes:
        tokens: ``[B, N]`` int64 node tokens (slots past ``num_draft`` are ignored).
        probs: ``[B, N, V]`` the q each node's token was drawn from, or ``None`` (point masses).
        num_draft: ``[B]`` int64 nodes per row (<= N).
        parents: ``[B, N]`` int64 parent node per node, ``-1`` for the root; ``None`` means a
            chain (parent = i - 1), the form every drafter produces today.
        child_draw: how siblings were drawn, one of :data:`CHILD_DRAWS`.
        forwards: draft model forward passes this proposal took.
        fed: node positions those forwards computed per row (a tree's forward feeds its whole
            frontier); 0 means one per forward.
        accept_prob: optional ``[B, N]`` float64: the drafter's estimate that node i is accepted
            given that its ancestors were, from the past only (e.g. prompt lookup's match
            length); NaN where it has none. The engine may cut a row's draft where another node
            stops paying for its verification.
        confidence: optional ``[B, N]`` float64: a model drafter's own probability of each node's
            token (NaN where it has none); the engine calibrates it against what the target
            accepts to decide how far later drafts go.
        copied: optional ``[B, N]`` bool: nodes copied from the context (prompt lookup) rather
            than drawn by a model; the statistics count what each source had accepted.
    """

    tokens: torch.Tensor
    probs: torch.Tensor | None
    num_draft: torch.Tensor
    parents: torch.Tensor | None = None
    child_draw: str = "single"
    forwards: int = 0
    accept_prob: torch.Tensor | None = field(default=None)
    confidence: torch.Tensor | None = field(default=None)
    fed: int = 0
    copied: torch.Tensor | None = field(default=None)

    def __post_init__(self) -> None:
        if self.child_draw not in CHILD_DRAWS:
            raise ValueError(f"child_draw must be one of {CHILD_DRAWS}, got {self.child_draw!r}")
        if self.tokens.dim() != 2:
            raise ValueError(f"Draft.tokens must be [B, N], got shape {tuple(self.tokens.shape)}")
        if self.parents is not None:
            if self.parents.shape != self.tokens.shape:
                raise ValueError(f"Draft.parents must be [B, N] = {tuple(self.tokens.shape)}, "
                                 f"got {tuple(self.parents.shape)}")
            N = self.tokens.shape[1]
            if bool((self.parents >= torch.arange(N, device=self.parents.device)).any()) or \
                    bool((self.parents < -1).any()):
                raise ValueError("Draft.parents must point to an earlier node or -1 (topological order)")

    @property
    def width(self) -> int:
        """N, the node slots per row."""
        return self.tokens.shape[1]

    @property
    def is_chain(self) -> bool:
        """True when every row is a chain (parent = i - 1)."""
        if self.parents is None:
            return True
        B, N = self.tokens.shape
        return bool((self.parents == chain_parents(B, N, self.parents.device)).all())

    def parent_index(self) -> torch.Tensor:
        """``[B, N]`` parents, filled in for chains."""
        if self.parents is not None:
            return self.parents
        B, N = self.tokens.shape
        return chain_parents(B, N, self.tokens.device)

    def depth(self) -> torch.Tensor:
        """``[B, N]`` int64 depth of each node: 1 for children of the root (its position offset)."""
        return node_depths(self.parent_index())

    def to(self, device: torch.device | str) -> Draft:
        """The same draft with its tensors on ``device`` (itself when they already are)."""
        if self.tokens.device == torch.device(device):
            return self
        def move(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x.to(device)

        return Draft(move(self.tokens), move(self.probs), move(self.num_draft), move(self.parents), self.child_draw,
                     self.forwards, move(self.accept_prob), move(self.confidence), self.fed, move(self.copied))

    def rows(self, index: torch.Tensor) -> Draft:
        """The rows ``index`` (int64 ``[n]``, on the draft's device), in that order."""
        def pick(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x[index]

        return Draft(self.tokens[index], pick(self.probs), self.num_draft[index], pick(self.parents), self.child_draw,
                     self.forwards, pick(self.accept_prob), pick(self.confidence), self.fed, pick(self.copied))

    def cut(self, width: int) -> Draft:
        """The first ``width`` node slots of every row (``num_draft`` capped to match).

        Cutting a tree keeps it valid: nodes are topologically ordered, so a kept node's
        parent is kept too.
        """
        return Draft(self.tokens[:, :width], None if self.probs is None else self.probs[:, :width],
                     torch.minimum(self.num_draft, torch.tensor(width)),
                     None if self.parents is None else self.parents[:, :width], self.child_draw, self.forwards,
                     None if self.accept_prob is None else self.accept_prob[:, :width],
                     None if self.confidence is None else self.confidence[:, :width], self.fed,
                     None if self.copied is None else self.copied[:, :width])
