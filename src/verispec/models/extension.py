"""Small C++ CPU kernels compiled on first use with torch's ``load_inline`` and kept per machine.

A kernel's build is named by a digest of its source, torch, Python and the CPU's feature flags
(``-march=native`` compiles for them), so a build for another CPU or another source is never
loaded; it lives in ``extensions/<name>`` under verispec's cache directory and is imported from
there without recompiling. Building needs a C++ compiler and ninja (the pip package is a
dependency); where either is missing the caller gets the exception and decides what to do.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import platform
import sys
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

import torch

from .paths import cache_dir, cpuinfo_field

__all__ = ["build_name", "extension_dir", "build_extension", "extensions_disabled", "LazyKernel", "LANES_SOURCE"]

#: C++ shared by the kernels' sources, after their ``#define VW`` (floats per vector, 8 or 16):
#: the vector types and ``hsum``, the lanes of a vector summed in a fixed pairwise order (lane i +
#: lane i + VW/2, then the halves again, with shuffles), the same for every call and kernel.
LANES_SOURCE = r"""
typedef float vf __attribute__((vector_size(VW * 4)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));

// The lanes of v in a fixed pairwise order (a scalar loop over the lanes cost rowdot more than
// the multiply-adds of a 16-row call).
static inline float hsum(vf v) {
#if VW == 16
  v8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
#else
  v8 a = v;
#endif
  v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  float c0 = b[0] + b[2], c1 = b[1] + b[3];
  return c0 + c1;
}
"""


def extensions_disabled() -> bool:
    """``$VERISPEC_NO_EXTENSIONS`` set (to anything but "" or "0"): use no compiled kernel."""
    return os.environ.get("VERISPEC_NO_EXTENSIONS", "") not in ("", "0")


class LazyKernel(Generic[T]):
    """A compiled kernel built on first :meth:`get` (once per process; ``build`` raises where it
    cannot be built: the reason is kept in ``failed`` and warned once, and ``get`` returns None
    ever after). ``$VERISPEC_NO_EXTENSIONS`` makes ``get`` return None without building."""

    def __init__(self, what: str, build: Callable[[], T]) -> None:
        self.what, self.build = what, build
        self.loaded: T | None = None
        self.failed: str | None = None
        self._lock = threading.Lock()

    def get(self) -> T | None:
        if extensions_disabled():
            return None
        if self.loaded is not None or self.failed is not None:
            return self.loaded
        with self._lock:
            if self.loaded is None and self.failed is None:
                try:
                    self.loaded = self.build()
                except Exception as e:  # no compiler or ninja, a compile error, an unwritable cache, ...
                    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
                    self.failed = f"{type(e).__name__}: {lines[-1] if lines else ''}"
                    warnings.warn(f"verispec: {self.what} is not available ({self.failed})", RuntimeWarning,
                                  stacklevel=3)
        return self.loaded


def _cpu_flags() -> str:
    """The CPU's feature flags (``-march=native`` compiles for them), else what platform knows."""
    return cpuinfo_field("flags") or f"{platform.processor()} {platform.platform()}"


def build_name(prefix: str, source: str) -> str:
    """``<prefix>_<digest>``: unique to the source, torch, Python and CPU."""
    tag = "\n".join([source, torch.__version__, sys.version, platform.machine(), _cpu_flags()])
    return f"{prefix}_" + hashlib.sha256(tag.encode()).hexdigest()[:12]


def extension_dir(prefix: str, source: str) -> Path:
    """Where the build of ``source`` is kept: ``extensions/<build_name>`` in verispec's cache."""
    return cache_dir() / "extensions" / build_name(prefix, source)


def build_extension(prefix: str, source: str, *, cflags: tuple[str, ...] = ()) -> types.ModuleType:
    """The compiled module of ``source`` (a pybind11 module), imported from its build directory
    or compiled there now (``-O3 -march=native -fopenmp`` plus ``cflags``). Raises where it
    cannot be built (not x86-64, no compiler or ninja, a compile error)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise RuntimeError(f"built only for x86-64, not {platform.machine()}")
    build = extension_dir(prefix, source)
    try:  # built before (its name pins source, torch and CPU): import it without the ~2 s of checks
        return _import_built(build)
    except (ImportError, OSError):
        pass
    from torch.utils.cpp_extension import load_inline, verify_ninja_availability

    with _ninja_on_path():
        verify_ninja_availability()  # a clear reason, before any compiler runs
        build.mkdir(parents=True, exist_ok=True)
        # -fopenmp in both flags: without it at::parallel_for runs the whole loop on one thread
        return load_inline(build.name, cpp_sources=source,
                           extra_cflags=["-O3", "-march=native", "-fopenmp", *cflags], extra_ldflags=["-fopenmp"],
                           build_directory=str(build), verbose=False)


@contextlib.contextmanager
def _ninja_on_path() -> Iterator[None]:
    """PATH with the pip ``ninja`` package's directory added while building: torch runs ``ninja``
    from PATH, which lacks a virtual environment's ``bin`` unless it is activated."""
    try:
        import ninja  # the dependency in pyproject; a system ninja on PATH serves as well
        extra = str(ninja.BIN_DIR)
    except (ImportError, AttributeError):
        yield
        return
    old = os.environ.get("PATH")
    os.environ["PATH"] = os.pathsep.join([p for p in (old, extra) if p])
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PATH", None)
        else:
            os.environ["PATH"] = old


def _import_built(build: Path) -> types.ModuleType:
    """The extension module that ``load_inline`` built in ``build`` (ImportError if there is none)."""
    so = build / f"{build.name}.so"  # load_inline's name for it
    spec = importlib.util.spec_from_file_location(build.name, so) if so.is_file() else None
    if spec is None or spec.loader is None:
        raise ImportError(f"no build in {build}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
