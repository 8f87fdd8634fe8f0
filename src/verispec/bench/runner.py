"""Run a benchmark: the same prompts through target-only decoding, every drafter x K, and
(optionally) HuggingFace ``generate``, interleaved so that machine drift hits all of them.

Loop order: ``for repeat: for prompt: for config`` (config order rotated per prompt), each
generation batch 1, timed by its wall clock (``GenerationStats.wall``; HF: around
``model.generate``). One warm-up generation per config runs first and is not recorded.
Ctrl-C stops the loop and returns what finished, marked ``partial``.

After the loop the baseline's one-token passes are compared with the one-token passes inside
the speculative configs (:func:`verispec.bench.reliability.one_token_pass_check`). When they
disagree by more than 15% the baseline is measured once more (every prompt, ``repeats`` times,
nothing else); the new generations replace the old ones (kept in ``BenchRun.superseded``) and
every check is recorded in ``BenchRun.baseline_checks``. If they still disagree, the analysis
marks the run unreliable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..drafters import Drafter
from ..engine import GenerationStats, SpeculativeDecoder
from ..models import CausalLM
from ..sampling import SamplingParams
from .hf_compare import HFSetting, hf_generate, hf_supports
from .reliability import PASS_TOLERANCE, one_token_pass_check
from ..workloads import BenchPrompt

__all__ = ["BenchConfig", "BenchRun", "BenchSettings", "DrafterSpec", "Measurement", "run_benchmark"]


@dataclass
class DrafterSpec:
    """A drafter to benchmark. ``kind``: "ngram", "model", "eagle" or "hybrid"; ``draft_lm`` its model (if any)."""

    label: str
    drafter: Drafter
    kind: str
    draft_lm: CausalLM | None = None
    max_ngram: int = 3
    hf_lm: CausalLM | None = None  # the same draft with its full head, for HF (if it has a vocab_map)


@dataclass
class BenchSettings:
    """What to measure. ``repeats``: timed generations per (prompt, config); ``remeasure_baseline``:
    measure target-only once more when its one-token passes disagree with the speculative configs'
    by more than ``pass_tolerance`` (a fraction, 0.15 = 15%)."""

    max_new_tokens: int = 128
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=0.0))
    ks: Sequence[int | str] = (1, 2, 4, 6, 8, "auto")
    repeats: int = 1
    seed: int = 0
    method: str = "exact"
    methods: Sequence[str] = ()  # a sweep: each drafter x K once per method, labelled "drafter/method"; () = (method,)
    compare_hf: bool = False
    warmup_tokens: int = 8
    remeasure_baseline: bool = True
    pass_tolerance: float = PASS_TOLERANCE
    costs: object = None  # a pinned PassCosts for every decoder (--costs), or None (see SpeculativeDecoder)


@dataclass
class BenchConfig:
    """One measured configuration. ``engine``: "verispec" or "hf"; ``drafter`` None = target only."""

    key: str
    engine: str
    drafter: str | None
    k: int | str | None
    decoder: SpeculativeDecoder | None = None
    hf: HFSetting | None = None
    draft_lm: CausalLM | None = None

    @property
    def is_baseline(self) -> bool:
        return self.engine == "verispec" and self.drafter is None


@dataclass
class Measurement:
    prompt_id: str
    category: str
    config: str
    repeat: int
    tokens: list[int]
    wall: float
    finish_reason: str
    stats: GenerationStats | None = None  # verispec runs only
    hf_passes: int | None = None  # HF runs only: target forward calls, the prefill included

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


@dataclass
class BenchRun:
    """Everything a run measured; :func:`verispec.bench.report.analyse` turns it into numbers."""

    target: str
    prompts: list[BenchPrompt]
    prompt_ids: dict[str, list[int]]
    configs: list[BenchConfig]
    settings: BenchSettings
    measurements: list[Measurement] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    partial: bool = False
    started: float = 0.0
    finished: float = 0.0
    baseline_checks: list[dict] = field(default_factory=list)  # one-token pass checks, in order
    superseded: list[Measurement] = field(default_factory=list)  # baseline generations a re-measure replaced


def build_configs(target: CausalLM, drafters: Sequence[DrafterSpec], settings: BenchSettings,
                  notes: list[str]) -> list[BenchConfig]:
    """Baseline first, then verispec drafter x K, then the HF equivalents (if compare_hf)."""
    configs = [BenchConfig("target-only", "verispec", None, None, SpeculativeDecoder(target, None, method=settings.method))]
    methods = list(settings.methods) or [settings.method]
    for d in drafters:
        for method in methods:
            label = d.label if len(methods) == 1 else f"{d.label}/{method}"
            for k in settings.ks:
                configs.append(BenchConfig(f"{label} k={k}", "verispec", label, k,
                                           SpeculativeDecoder(target, d.drafter, k=k, method=method,
                                                              costs=settings.costs)))
    if settings.compare_hf:
        for method in methods:
            if method != "exact":
                notes.append(f"--compare hf: HF has no {method!r} method; it samples its own way")
        configs.append(BenchConfig("hf target-only", "hf", None, None, hf=HFSetting("none", 0)))
        for d in drafters:
            if d.kind == "hybrid":
                notes.append(f"--compare hf: HF has no hybrid copy+model drafter; {d.label} is not compared")
                continue
            if d.kind == "eagle":
                notes.append(f"--compare hf: HF assisted generation has no EAGLE drafter; {d.label} is not compared")
                continue
            hf_draft = d.hf_lm or d.draft_lm
            why = hf_supports(hf_draft) if d.kind == "model" else None
            if why:
                notes.append(f"--compare hf: {d.label} not compared: {why}")
                continue
            hf_ks: list[int | str] = [k for k in settings.ks if isinstance(k, int)]
            if any(not isinstance(k, int) for k in settings.ks):
                if d.kind == "model":
                    hf_ks.append("heuristic")
                elif not hf_ks:
                    hf_ks.append(4)  # HF prompt lookup has no K schedule: compare adaptive K with a fixed 4
            for k in hf_ks:
                configs.append(BenchConfig(f"hf {d.label} k={k}", "hf", d.label, k,
                                           hf=HFSetting(d.kind, k, d.max_ngram), draft_lm=hf_draft))
    return configs


def run_benchmark(target: CausalLM, drafters: Sequence[DrafterSpec], prompts: Sequence[BenchPrompt],
                  settings: BenchSettings, *, on_step: Callable[[str, int, int], None] | None = None,
                  on_start: Callable[[int], None] | None = None) -> BenchRun:
    """Measure every config on every prompt ``settings.repeats`` times (see the module docstring).

    ``on_start(total_steps)`` is called once; ``on_step(description, done, total)`` before each
    generation (for a progress bar). Returns a :class:`BenchRun`, ``partial=True`` after Ctrl-C.
    """
    if settings.repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {settings.repeats}")
    if not prompts:
        raise ValueError("no prompts to benchmark")
    notes: list[str] = []
    configs = build_configs(target, drafters, settings, notes)
    base = configs[0].decoder
    assert base is not None
    ids = {p.id: base.encode([p.text], chat=p.chat)[0] for p in prompts}
    limit = getattr(target.model.config, "max_position_embeddings", None)
    for p in prompts:
        if limit is not None and len(ids[p.id]) + settings.max_new_tokens > limit:
            raise ValueError(f"prompt {p.id!r} has {len(ids[p.id])} tokens; with max_new_tokens="
                             f"{settings.max_new_tokens} it exceeds {target.name}'s context of {limit} tokens")
    run = BenchRun(target.name, list(prompts), ids, configs, settings, notes=notes, started=time.time())
    total = settings.repeats * len(prompts) * len(configs)
    if on_start:
        on_start(total + len(configs))
    done = 0
    try:
        # Warm-up: one short generation per config, not recorded.
        first = prompts[0]
        for cfg in configs:
            if on_step:
                on_step(f"warm-up {cfg.key}", done, total)
            _generate(cfg, target, ids[first.id], min(settings.warmup_tokens, settings.max_new_tokens),
                      settings, seed=settings.seed)
            done += 1
        for r in range(settings.repeats):
            for i, p in enumerate(prompts):
                shift = (i + r) % len(configs)
                order = configs[shift:] + configs[:shift]  # rotate so no config always runs first
                for cfg in order:
                    if on_step:
                        on_step(f"{cfg.key} | {p.id} | repeat {r + 1}/{settings.repeats}", done, total)
                    # The same seed per prompt for every config and repeat: outputs comparable.
                    tokens, wall, reason, stats, passes = _generate(cfg, target, ids[p.id], settings.max_new_tokens,
                                                                    settings, seed=settings.seed + i)
                    run.measurements.append(Measurement(p.id, p.category, cfg.key, r, tokens, wall, reason, stats,
                                                        passes))
                    done += 1
    except KeyboardInterrupt:
        run.partial = True
    if not run.partial:
        _check_baseline(run, target, ids, on_step, on_start, done, total)
    run.finished = time.time()
    return run


def _check_baseline(run: BenchRun, target: CausalLM, ids: dict[str, list[int]],
                    on_step: Callable[[str, int, int], None] | None, on_start: Callable[[int], None] | None,
                    done: int, total: int) -> None:
    """Compare the baseline's one-token passes with the speculative configs'; re-measure it once if they disagree."""
    settings = run.settings
    base = run.configs[0]
    spec = [c.key for c in run.configs if c.engine == "verispec" and c.drafter is not None]
    check = one_token_pass_check(run.measurements, base.key, spec, settings.pass_tolerance)
    run.baseline_checks.append(check)
    if check["agree"] is not False or not settings.remeasure_baseline:
        return
    run.notes.append(f"target-only's one-token passes (mean {check['baseline_pass_ms']:.1f} ms) and those inside the "
                     f"speculative configs ({check['speculative_pass_ms']:.1f} ms) differ by "
                     f"{100 * check['gap']:.0f}% (> {100 * settings.pass_tolerance:.0f}%): target-only re-measured once")
    extra = settings.repeats * len(run.prompts)
    if on_start:
        on_start(total + len(run.configs) + extra)
    fresh: list[Measurement] = []
    try:
        for r in range(settings.repeats):
            for i, p in enumerate(run.prompts):
                if on_step:
                    on_step(f"re-measure {base.key} | {p.id} | repeat {r + 1}/{settings.repeats}", done, total + extra)
                tokens, wall, reason, stats, _ = _generate(base, target, ids[p.id], settings.max_new_tokens, settings,
                                                           seed=settings.seed + i)
                fresh.append(Measurement(p.id, p.category, base.key, r, tokens, wall, reason, stats))
                done += 1
    except KeyboardInterrupt:  # keep the first measurement: it is complete, the re-measure is not
        run.partial = True
        return
    run.superseded = [m for m in run.measurements if m.config == base.key]
    run.measurements = [m for m in run.measurements if m.config != base.key] + fresh
    run.baseline_checks.append(one_token_pass_check(run.measurements, base.key, spec, settings.pass_tolerance))


def _generate(cfg: BenchConfig, target: CausalLM, ids: list[int], max_new: int, settings: BenchSettings,
              seed: int) -> tuple[list[int], float, str, GenerationStats | None, int | None]:
    """One generation: tokens, wall seconds, finish reason, verispec's stats or HF's target passes."""
    s = settings.sampling
    sampling = SamplingParams(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p, seed=seed)
    if cfg.engine == "verispec":
        assert cfg.decoder is not None
        res = cfg.decoder.generate([ids], max_new, sampling)
        return res.token_ids[0], res.stats.wall, res.finish_reasons[0], res.stats, None
    assert cfg.hf is not None
    tokens, wall, passes = hf_generate(target, ids, max_new, sampling, cfg.hf, cfg.draft_lm)
    reason = "eos" if tokens and tokens[-1] in target.eos_token_ids else "length"
    return tokens, wall, reason, None, passes

