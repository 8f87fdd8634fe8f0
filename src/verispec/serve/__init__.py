"""``verispec serve``: an OpenAI-compatible speculative decoding server with continuous batching.

* :mod:`.protocol`: request validation and OpenAI response / chunk bodies;
* :mod:`.scheduler`: the thread that owns the engine (admission, cancellation, steps);
* :mod:`.drafting`: per-request draft-length caps ("draft": "none", an explicit ``--verify-budget``);
* :mod:`.metrics`: Prometheus metrics (vLLM's names with a ``verispec:`` prefix);
* :mod:`.app`: FastAPI routes and server-sent events;
* :mod:`.options`: its command-line arguments;
* :mod:`.server`: the command (models, scheduler, uvicorn, draining on SIGTERM / SIGINT);
* :mod:`.loadgen`: ``verispec bench serve``, a load generator over the built-in workloads.
"""

from .options import add_serve_arguments

__all__ = ["add_serve_arguments"]  # the server itself: verispec.serve.server (build, run_serve)
