"""Deliberately wrong verifiers: proof that the certificate has teeth.

Each mutant replaces one step of the shipped code (a function of :mod:`verispec.verify`, of the
drafter's sampling step or of the sampling transform) by a wrong version, for the duration of a
``with mutant.injected():`` block. :func:`run_mutants` runs the certification grid under each
one and records the first case that catches it; every mutant must be caught
(``verispec certify --mutants``; a test asserts it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from .. import rng, sampling
from ..drafters import drawing as drafters
import importlib

from ..rng import STREAM_ACCEPT, STREAM_EMIT, inverse_cdf
from .grid import CertCase, CertResult, default_grid, run_case

V = importlib.import_module("verispec.verify.chain")  # the module whose steps the mutants replace

__all__ = ["Mutant", "MutantResult", "MUTANTS", "run_mutants", "TREE_MUTANTS", "run_tree_mutants"]


@dataclass(frozen=True)
class Mutant:
    """A wrong variant of one step: ``patches`` maps (module, attribute) to a replacement factory
    that gets the real function and returns the wrong one."""

    name: str
    what: str
    patches: tuple[tuple[object, str, Callable[[Callable], Callable]], ...]
    first: str | None = None  # the edge case to try first (where the broken step runs), if any

    @contextlib.contextmanager
    def injected(self) -> Iterator[None]:
        saved = [(mod, attr, getattr(mod, attr)) for mod, attr, _ in self.patches]
        try:
            for (mod, attr, make), (_, _, real) in zip(self.patches, saved):
                setattr(mod, attr, make(real))
            yield
        finally:
            for mod, attr, real in saved:
                setattr(mod, attr, real)

    @property
    def where(self) -> str:
        return ", ".join(f"{getattr(m, '__name__', m)}.{a}" for m, a, _ in self.patches)


# ----------------------------------------------------------------------------------------------
# The wrong steps


def _accept_all(real):
    return lambda u, p_d, q_d: torch.ones_like(u, dtype=torch.bool)


def _accept_q_over_p(real):
    return lambda u, p_d, q_d: u * p_d < q_d


def _slot_j(p, q, d, rows, j, rejected):
    """p_j and the q_j that the correct rule subtracts (0 for bonus rows), both float64 [b, V]."""
    K = d.shape[1]
    p_j = V._rows_at(p, rows, j).double()
    if K == 0:
        return p_j, torch.zeros_like(p_j)
    jj = j.clamp(max=K - 1)
    if q is None:
        q_j = torch.zeros_like(p_j).scatter_(-1, d[rows, jj][:, None], 1.0)
    else:
        q_j = V._rows_at(q, rows, jj).double()
    return p_j, q_j * rejected[:, None]


def _residual_is_p(real):
    return lambda p, q, d, rows, j, rejected: V._rows_at(p, rows, j).double()


def _residual_abs(real):
    def residual(p, q, d, rows, j, rejected):
        p_j, q_j = _slot_j(p, q, d, rows, j, rejected)
        return V._fallback((p_j - q_j).abs(), p, rows, j)
    return residual


def _bonus_from_q(real):
    def residual(p, q, d, rows, j, rejected):
        out = real(p, q, d, rows, j, rejected)
        K = d.shape[1]
        bonus = (~rejected & (j > 0)).nonzero().squeeze(1)
        if K and bonus.numel():  # the bonus drawn from the last draft's q instead of p_{n+1}
            last = (j[bonus] - 1).clamp(max=K - 1)
            if q is None:
                out[bonus] = torch.zeros_like(out[bonus]).scatter_(-1, d[rows[bonus], last][:, None], 1.0)
            else:
                out[bonus] = V._rows_at(q, rows[bonus], last).double()
        return out
    return residual


def _accept_uniform_reused(real):
    return lambda residual, draws, seeds, positions: inverse_cdf(residual, draws.uniform(seeds, positions,
                                                                                         STREAM_ACCEPT))


def _not_renormalised(real):
    def draw(residual, draws, seeds, positions):
        u = draws.uniform(seeds, positions, STREAM_EMIT)
        cdf = residual.cumsum(-1)  # the raw residual's cdf, not scaled to total 1
        return torch.searchsorted(cdf, u[:, None], right=True).clamp(max=residual.shape[-1] - 1).squeeze(-1)
    return draw


def _greedy_ties_to_highest(real):
    def transform(logits, params):
        if not params.greedy:
            return real(logits, params)
        top = logits.shape[-1] - 1 - logits.flip(-1).argmax(-1, keepdim=True)
        return torch.zeros_like(logits).scatter_(-1, top, 1.0)
    return transform


def _q_before_top_p(real):
    def sample_draft(logits, params, method, seeds, positions, draws=V.COUNTER):
        d, _ = real(logits, params, method, seeds, positions, draws)  # sampled from the filtered q ...
        return d, sampling.logits_to_probs(logits, dataclasses.replace(params, top_p=1.0))  # ... reports the raw q
    return sample_draft


def _greedy_accepts_every_draft(real):
    def greedy(p, d, drafted, num_draft):
        B, K1, _ = p.shape
        x = V._rows_at(p, torch.arange(B), num_draft).argmax(-1)
        return V._assemble(d, num_draft.clone(), x, num_draft)
    return greedy


def _accept_unnormalised(real):
    """The accept test on p(d) and q(d) as stored, not p / sum(p) and q / sum(q) (the residual still
    normalises): off by the rows' rounding, 1e-3 for bfloat16."""
    return lambda p, q, p_d, q_d, u, drafted: (p_d, q_d)


def _argmax_at_num_draft(real):
    def verify_argmax(target_top, draft_tokens, num_draft):
        out = real(target_top, draft_tokens, num_draft)
        x = target_top.gather(1, num_draft[:, None]).squeeze(1)  # the argmax at slot n, not at num_accepted
        d = torch.where(torch.arange(draft_tokens.shape[1]) < num_draft[:, None], draft_tokens, 0)
        return V._assemble(d, out.num_accepted, x, num_draft)
    return verify_argmax


def _inverse_cdf_drops_tail(real):
    def inverse_cdf(probs, u):
        V_ = probs.shape[-1]
        full = V_ // rng._CHUNK * rng._CHUNK
        if V_ < 8 * rng._CHUNK or full == V_:
            return real(probs, u)
        return real(probs[..., :full], u)  # the last, partial chunk is never searched
    return inverse_cdf


def _gumbel_first_block_only(real):
    def gumbel_argmax(probs, seeds, positions, noise=None):
        noise = rng.GumbelUniforms(seeds, positions) if noise is None else noise
        n, V_ = probs.shape
        L = rng.GUMBEL_BLOCK
        C = -(-V_ // L)
        pmax = torch.nn.functional.pad(probs, (0, C * L - V_)).view(n, C, L).amax(-1)
        top, at = noise.block_max(torch.arange(C))
        first = (torch.log(top) / pmax.double()).argmax(-1)  # the block with the best bound ...
        return rng._block_best(probs, noise, top, at, torch.arange(n), first)[1]  # ... and no other
    return gumbel_argmax


def _gumbel_one_hot_shortcut_wrong(real):
    def target_token(p_i, seeds, positions, draws):
        t = real(p_i, seeds, positions, draws)
        return torch.where(V._is_one_hot(p_i), (t + 1) % p_i.shape[-1], t)
    return target_token


MUTANTS: tuple[Mutant, ...] = (
    Mutant("accept_all", "accept every draft", ((V, "_accepts", _accept_all),)),
    Mutant("accept_q_over_p", "accept with probability q/p instead of p/q", ((V, "_accepts", _accept_q_over_p),)),
    Mutant("accept_unnormalised", "accept test on p(d), q(d) as stored, not p/sum(p), q/sum(q)",
           ((V, "_normalised_at", _accept_unnormalised),), first="random"),
    Mutant("residual_is_p", "on rejection draw from p, not max(0, p - q)", ((V, "_residual", _residual_is_p),)),
    Mutant("residual_abs", "residual |p - q| instead of max(0, p - q)", ((V, "_residual", _residual_abs),)),
    Mutant("bonus_from_q", "bonus token drawn from the last q instead of p", ((V, "_residual", _bonus_from_q),)),
    Mutant("accept_uniform_reused", "the residual draw reuses the accept uniform",
           ((V, "_draw", _accept_uniform_reused),)),
    Mutant("residual_not_renormalised", "inverse CDF over the raw residual, not normalised",
           ((V, "_draw", _not_renormalised),)),
    Mutant("inverse_cdf_drops_tail", "two-level inverse CDF (V >= 2,048) never searches the last partial chunk",
           ((rng, "inverse_cdf", _inverse_cdf_drops_tail), (V, "inverse_cdf", _inverse_cdf_drops_tail)),
           first="large_v"),
    Mutant("greedy_ties_to_highest", "temperature 0 breaks ties towards the highest id",
           ((sampling, "logits_to_probs", _greedy_ties_to_highest),
            (drafters, "logits_to_probs", _greedy_ties_to_highest))),
    Mutant("q_before_top_p", "the drafter reports q before the top-p filter it sampled with",
           ((drafters, "sample_draft", _q_before_top_p),)),
    Mutant("greedy_accepts_all", "the greedy fast path accepts every draft",
           ((V, "_verify_greedy", _greedy_accepts_every_draft),)),
    Mutant("argmax_emits_at_num_draft", "verify_argmax (the engine's greedy path) emits the argmax at slot n, "
           "not at the first rejection", ((V, "verify_argmax", _argmax_at_num_draft),), first="greedy_ties"),
    Mutant("gumbel_first_block_only", "gumbel: the search stops at the block with the best bound (V > 32)",
           ((rng, "gumbel_argmax", _gumbel_first_block_only),), first="large_v"),
    Mutant("gumbel_one_hot_shortcut", "gumbel: one-hot slots emit the wrong token",
           ((V, "_target_token", _gumbel_one_hot_shortcut_wrong),)),
)


@dataclass(frozen=True)
class MutantResult:
    mutant: Mutant
    caught_by: CertResult | None  # the first failing case, or None: the mutant survived
    cases_run: int
    seconds: float

    @property
    def caught(self) -> bool:
        return self.caught_by is not None


def run_mutants(cases: Sequence[CertCase] | None = None, mutants: Sequence[Mutant] = MUTANTS,
                on_case: Callable[[], None] | None = None) -> list[MutantResult]:
    """Certify under each mutant until a case fails; gumbel mutants are tried on gumbel cases first."""
    cases = list(default_grid(quick=True) if cases is None else cases)
    results = []
    for m in mutants:
        first = "gumbel" if m.name.startswith("gumbel") else "exact"
        order = sorted(cases, key=lambda c: (c.edge != m.first, c.method != first, c.vocab, c.k))
        results.append(_hunt(m, order, run_case, on_case))
    return results


def _hunt(m: Mutant, order: Sequence, run: Callable, on_case: Callable[[], None] | None) -> MutantResult:
    """Run the cases in ``order`` with ``m`` injected until one fails (the mutant is caught)."""
    t0, caught, n = time.perf_counter(), None, 0
    with m.injected():
        for case in order:
            n += 1
            res = run(case)
            if on_case:
                on_case()
            if not res.passed:
                caught = res
                break
    return MutantResult(m, caught, n, time.perf_counter() - t0)


# ----------------------------------------------------------------------------------------------
# Trees and block verification (verispec.verify.tree, verispec.verify.block), caught by the tree
# certificate (verispec.certify.trees)

TREE = importlib.import_module("verispec.verify.tree")
BLOCK = importlib.import_module("verispec.verify.block")


def _residual_not_carried(real):
    """After a rejected sibling the law stays as it was: the next sibling is tested, and the token
    emitted after the last one drawn, against the node's p instead of the residual."""
    return lambda law, q: law


def _q_not_renormalised(real):
    """Without replacement: the rejected token's mass is removed from q, and q is not renormalised."""
    return lambda q, c: q.scatter(1, c, 0.0)


def _sibling_tested_against_p(real):
    """The ladder carries the residual (and emits from it), but tests each sibling against the node's
    own p instead of the residual."""
    def ladder(p_node, q_node, kid_tok, has, u, without_replacement):
        n, M = kid_tok.shape
        law, q_law = p_node.clone(), None if q_node is None else q_node.clone()
        rank = torch.full((n,), -1, dtype=torch.int64)
        for j in range(M):
            open_ = has[:, j] & (rank < 0)
            c = kid_tok[:, j].clamp_min(0)[:, None]
            q_c = torch.ones_like(u[:, j]) if q_law is None else q_law.gather(1, c).squeeze(1)
            acc = open_ & (u[:, j] * q_c < p_node.gather(1, c).squeeze(1))  # p, not the residual
            rank[acc] = j
            rej = (open_ & ~acc).nonzero().squeeze(1)
            if rej.numel():
                q_r = torch.zeros_like(law[rej]).scatter_(1, c[rej], 1.0) if q_law is None else q_law[rej]
                law[rej] = TREE._carry(law[rej], q_r)
                if without_replacement and q_law is not None:
                    q_law[rej] = TREE._remove(q_law[rej], c[rej])
        return rank, law
    return ladder


def _noise_keyed_by_node(real):
    """Draws keyed by the node's slot in the pass (``positions + slot``) instead of its depth."""
    return lambda positions, depth: positions[:, None] + torch.arange(depth.shape[1])


def _block_weights_lag(real):
    """Block verification's weights one position late: w_i computed as the correct w_{i-1}."""
    def weights(ratio):
        w = real(ratio)
        return torch.cat([w[:, :1], w[:, :-1]], 1)
    return weights


TREE_MUTANTS: tuple[Mutant, ...] = (
    Mutant("tree_residual_not_carried", "a rejected sibling's residual is not carried to the next sibling",
           ((TREE, "_carry", _residual_not_carried),), first="iid"),
    Mutant("tree_q_not_renormalised", "without replacement: q not renormalised after a rejected sibling",
           ((TREE, "_remove", _q_not_renormalised),), first="without_replacement"),
    Mutant("tree_sibling_tested_against_p", "a sibling is tested against the node's p instead of the residual",
           ((TREE, "_sibling_ladder", _sibling_tested_against_p),), first="iid"),
    Mutant("tree_noise_keyed_by_node", "draws (Gumbel noise, accept and emit uniforms) keyed by node, not position",
           ((TREE, "_node_positions", _noise_keyed_by_node),), first="gumbel"),
    Mutant("block_weights_off_by_one", "block verification's weights w_i one position late",
           ((BLOCK, "_block_weights", _block_weights_lag),), first="block"),
)


def run_tree_mutants(cases=None, mutants: Sequence[Mutant] = TREE_MUTANTS,
                     on_case: Callable[[], None] | None = None) -> list[MutantResult]:
    """Run the tree certificate (:mod:`verispec.certify.trees`) under each tree mutant until a case
    fails, trying the cases of the mutant's mode (``first``) first."""
    from .trees import run_tree_case, tree_grid

    cases = list(tree_grid(quick=True) if cases is None else cases)
    results = []
    for m in mutants:
        order = sorted(cases, key=lambda c: (c.mode != m.first, -c.vocab))
        results.append(_hunt(m, order, run_tree_case, on_case))
    return results
