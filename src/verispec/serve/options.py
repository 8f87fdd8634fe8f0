"""The command line of ``verispec serve`` (argparse only: cheap to import for ``verispec --help``)."""

from __future__ import annotations

import argparse

__all__ = ["add_serve_arguments"]


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="smollm2-135m", help="built-in name, HF model dir or .gguf file")
    p.add_argument("--draft", default="default", help="drafter spec, as for `verispec generate` ('none': no drafter)")
    p.add_argument("--k", default="auto", help="default draft-length policy: an int, 'auto' or 'heuristic'")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-batch", type=int, default=16, help="most requests running at once (rows of a step)")
    p.add_argument("--max-queue", type=int, default=64, help="most requests waiting; more are answered 429")
    p.add_argument("--verify-budget", type=int, default=0,
                   help="an explicit cap on the tokens of a verify pass for rows whose text cannot change "
                        "(greedy, gumbel, unseeded): such a row drafts at most budget // batch - 1 tokens; "
                        "0 (default) = no cap: --k auto already drafts less as the batch grows, from the "
                        "measured cost of a pass of the batch's size. Seeded exact requests are never capped")
    p.add_argument("--served-model-name", default=None, help="the model id clients send (default: the target's "
                                                              "name or directory name)")
    p.add_argument("--drain-timeout", type=float, default=30.0,
                   help="seconds in-flight requests may run after SIGTERM/SIGINT before they are cancelled")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                   help="dtype of the target's (and a draft model's) weights")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
