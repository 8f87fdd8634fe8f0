"""Reading HF model directories, tokenizers and vocab maps: safetensors only, never the network.

Also the error every loader raises (:class:`ModelLoadError`) and :func:`_quiet`, which silences
transformers while loading.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch
import transformers

VOCAB_MAP_FILE = "vocab_map.safetensors"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


class ModelLoadError(ValueError):
    """A model or tokenizer could not be loaded; the message says which argument and why."""


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence transformers' progress bars and info/warning chatter while loading."""
    tf_logging = transformers.utils.logging
    bars, level = tf_logging.is_progress_bar_enabled(), tf_logging.get_verbosity()
    tf_logging.disable_progress_bar()
    tf_logging.set_verbosity_error()
    try:
        yield
    finally:
        tf_logging.set_verbosity(level)
        if bars:
            tf_logging.enable_progress_bar()


def _has_tokenizer(path: Path) -> bool:
    return path.is_file() or any((path / f).is_file() for f in _TOKENIZER_FILES)


def _load_hf_dir(path: Path, dtype: torch.dtype, trust_remote_code: bool, *,
                 load_tokenizer: bool) -> tuple[transformers.PreTrainedModel, transformers.PreTrainedTokenizerBase | None]:
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"model directory {str(path)!r} has no config.json (not a HF model directory)")
    weights = [p for p in path.glob("*.safetensors") if p.name != VOCAB_MAP_FILE]
    if not weights and not (path / "model.safetensors.index.json").is_file():
        pickles = sorted(p.name for p in path.iterdir() if p.suffix in _PICKLE_SUFFIXES)
        if pickles:
            raise ModelLoadError(
                f"model directory {str(path)!r} has only pickle weights ({', '.join(pickles)}); verispec "
                "loads safetensors only and never unpickles. Convert it once with transformers: "
                "model.save_pretrained(dir) writes model.safetensors."
            )
        raise ModelLoadError(f"model directory {str(path)!r} has no weights (no *.safetensors file)")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, trust_remote_code=trust_remote_code, local_files_only=True, use_safetensors=True
        )
    except Exception as e:
        raise ModelLoadError(f"could not load the model in {str(path)!r}: {type(e).__name__}: {e}") from e
    tok = _load_tokenizer(path, trust_remote_code, "name_or_path") if load_tokenizer else None
    return model, tok


def _load_tokenizer(path: Path, trust_remote_code: bool, what: str) -> transformers.PreTrainedTokenizerBase:
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelLoadError(f"{what}={str(path)!r}: expected a tokenizer directory or a .gguf file")
        kw: dict[str, object] = {"gguf_file": path.name}
        path = path.parent
    else:
        if not _has_tokenizer(path):
            raise ModelLoadError(
                f"{what}={str(path)!r}: no tokenizer files ({', '.join(_TOKENIZER_FILES)}); "
                "pass tokenizer= pointing at a tokenizer directory"
            )
        kw = {"local_files_only": True, "trust_remote_code": trust_remote_code}
    try:
        return transformers.AutoTokenizer.from_pretrained(path, **kw)
    except Exception as e:
        raise ModelLoadError(f"{what}={str(path)!r}: could not load the tokenizer: {type(e).__name__}: {e}") from e


def _load_vocab_map(path: Path) -> torch.Tensor | None:
    file = path / VOCAB_MAP_FILE
    if not file.is_file():
        return None
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(file)
    except (SafetensorError, OSError) as e:
        raise ModelLoadError(f"{str(file)!r}: unreadable vocab map: {e}") from e
    vmap = tensors.get("vocab_map")
    if vmap is None or vmap.ndim != 1 or vmap.dtype.is_floating_point or vmap.dtype == torch.bool:
        raise ModelLoadError(f"{str(file)!r}: expected a 1-D integer tensor named 'vocab_map'")
    return vmap.to(torch.int64)
