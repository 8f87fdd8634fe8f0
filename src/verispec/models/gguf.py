"""Loading GGUF files: dequantised to a plain transformers model of the requested dtype."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
import transformers

from .hf import ModelLoadError, _load_tokenizer


def _load_gguf(path: Path, dtype: torch.dtype, *, load_tokenizer: bool = True
               ) -> tuple[transformers.PreTrainedModel, transformers.PreTrainedTokenizerBase | None]:
    """Load and dequantise a GGUF file with transformers' GGUF reader.

    ``from_pretrained(gguf_file=...)`` would need ``accelerate`` (transformers 5.x) and keeps
    weights quantised; instead the config is read from the GGUF metadata, the tensors are
    dequantised by ``load_gguf_checkpoint`` and loaded as a plain state dict.
    """
    if path.suffix != ".gguf":
        raise ModelLoadError(f"name_or_path={str(path)!r}: a file must be a .gguf model; otherwise pass a directory")
    if importlib.util.find_spec("gguf") is None:
        raise ModelLoadError("loading .gguf files needs the gguf package: pip install gguf")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    try:
        config = transformers.AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
        with torch.device("meta"):  # only to map GGUF tensor names to parameter names
            skeleton = transformers.AutoModelForCausalLM.from_config(config)
        tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=skeleton,
                                       torch_dtype=dtype)["tensors"]
        model = type(skeleton).from_pretrained(None, config=config, state_dict=tensors, dtype=dtype)
    except Exception as e:
        raise ModelLoadError(f"could not load GGUF file {str(path)!r}: {type(e).__name__}: {e}") from e
    tok = _load_tokenizer(path, False, "name_or_path") if load_tokenizer else None
    return model, tok
