"""Benchmarks: workloads, metrics and theory, the runner, reports and plots, HF comparison.

``verispec bench`` is wired by the CLI to :func:`add_bench_arguments` and :func:`run_bench`.
"""

from .command import add_bench_arguments, run_bench
from .theory import expected_tokens, optimal_k, predicted_speedup
from ..workloads import BUILTIN_WORKLOADS, BenchPrompt, WorkloadError, load_prompt_file, load_workload

__all__ = [
    "BUILTIN_WORKLOADS",
    "BenchPrompt",
    "WorkloadError",
    "add_bench_arguments",
    "expected_tokens",
    "load_prompt_file",
    "load_workload",
    "optimal_k",
    "predicted_speedup",
    "run_bench",
]
