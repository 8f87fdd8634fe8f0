"""Tiny, fully offline models for tests and examples.

``tiny_llama()`` builds a random ``LlamaForCausalLM`` with a character-level tokenizer in memory
(no download, well under a second); ``save_tiny_llama()`` writes one to a directory that
``verispec.models.load_causal_lm`` loads like any HF checkpoint (config.json + model.safetensors +
tokenizer files).

The tokenizer: ids 0-3 are the special tokens ``<|endoftext|>`` (pad), ``<|im_start|>`` (bos),
``<|im_end|>`` (eos) and ``<unk>``; every other id is one character (space, lower-case letters,
newline, punctuation, digits, upper-case letters, then further Unicode characters as needed), so
text made of those characters round-trips exactly. Its chat template is ChatML, like SmolLM2's.
"""

from __future__ import annotations

import os
import string
from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from verispec.models import CausalLM

__all__ = ["SPECIAL_TOKENS", "tiny_alphabet", "tiny_tokenizer", "tiny_llama", "save_tiny_llama"]

SPECIAL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_BASE_ALPHABET = (
    " " + string.ascii_lowercase + "\n.,!?'" + string.digits + string.ascii_uppercase
    + "".join(c for c in string.punctuation if c not in ".,!?'") + "\t"
)


def tiny_alphabet(n: int) -> list[str]:
    """The first ``n`` characters of the tiny tokenizer's character vocabulary (in id order)."""
    chars = list(_BASE_ALPHABET)
    code = 0xA1  # then Latin-1 and onwards, skipping anything that is not a printable character
    while len(chars) < n:
        c = chr(code)
        code += 1
        if c.isprintable() and not c.isspace():
            chars.append(c)
    return chars[:n]


def tiny_tokenizer(size: int = 64) -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer with exactly ``size`` tokens (4 special + ``size - 4`` chars)."""
    if size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(f"tokenizer size must be >= {len(SPECIAL_TOKENS) + 1}, got {size}")
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for c in tiny_alphabet(size - len(SPECIAL_TOKENS)):
        vocab[c] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        additional_special_tokens=[],
        clean_up_tokenization_spaces=False,
    )
    tok.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS[:3])})
    tok.chat_template = CHAT_TEMPLATE
    tok.model_max_length = 512
    return tok


def tiny_llama(
    vocab_size: int = 64,
    hidden: int = 32,
    layers: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    *,
    heads: int = 4,
    kv_heads: int = 2,
    tokenizer_size: int | None = None,
    tie_word_embeddings: bool = True,
    initializer_range: float = 0.2,
) -> CausalLM:
    """A random tiny Llama with a matching tokenizer, in memory, in eval mode.

    Weights are drawn in float32 from ``seed`` and then cast, so the same seed gives the same model
    in every dtype (up to rounding). ``tokenizer_size`` < ``vocab_size`` makes a padded output head
    (rows no token maps to), as real checkpoints often have. ``initializer_range`` is larger than
    HF's default so that next-token distributions are far from uniform.
    """
    tok = tiny_tokenizer(vocab_size if tokenizer_size is None else tokenizer_size)
    if len(tok) > vocab_size:
        raise ValueError(f"tokenizer_size {len(tok)} exceeds vocab_size {vocab_size}")
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=512,
        initializer_range=initializer_range,
        tie_word_embeddings=tie_word_embeddings,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.to(dtype)
    model.eval()
    model.requires_grad_(False)
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.eos_token_id = EOS_ID
    model.generation_config.bos_token_id = BOS_ID
    return CausalLM(model=model, tokenizer=tok, name=f"tiny-llama-v{vocab_size}-h{hidden}-l{layers}-s{seed}",
                    vocab_map=None)


def save_tiny_llama(path: str | os.PathLike, **kw: object) -> Path:
    """Write ``tiny_llama(**kw)`` (model as safetensors + tokenizer) to directory ``path``; returns it."""
    path = Path(path)
    lm = tiny_llama(**kw)  # type: ignore[arg-type]
    lm.model.save_pretrained(path)
    lm.tokenizer.save_pretrained(path)
    return path


def tiny_eagle(target: CausalLM, seed: int = 0, vocab_map: torch.Tensor | None = None,
               scale: float = 0.3, taps: Sequence[int] = (), layers: int = 1):
    """A random EAGLE head (:mod:`verispec.drafters.eagle_head`) for ``target``, as loaded files.

    Initialised near "repeat the previous feature" and then perturbed by ``scale``-sized noise
    from ``seed``, so its drafts are neither always right nor always wrong. ``vocab_map``
    (sorted target ids) gives it a reduced output vocabulary; ``taps`` makes it read those
    decoder layers of the target too (its fusion perturbed away from zero like the rest);
    ``layers``: the head's decoder layers.
    """
    from verispec.drafters.eagle_head import EagleFiles, EagleHead, eagle_config

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = EagleHead(eagle_config(target.model.config, taps, layers))
        head.init_from_target(target.model)
        with torch.no_grad():
            for p in (p for p in head.parameters() if p.requires_grad):  # not the unused embedding stub
                p.add_(scale * torch.randn_like(p) * p.detach().float().std().clamp_min(0.02))
    head.to(target.model.dtype).eval().requires_grad_(False)
    return EagleFiles(head, vocab_map, {"format": "tiny"})
