"""Distil a small draft model for a target: ``verispec distill``.

Three stages, each resumable, all state under one output directory ``out``:

1. **Labels** (``out/labels/``; :mod:`.shards`, :mod:`.labels`). The target reads the corpus
   (:mod:`.corpus`) with teacher forcing and its next-token distribution at every position is
   kept as the top-32 log-probs (ids + values), in safetensors shards written atomically (temp
   file + rename). *Self-distillation* shards hold continuations the target generated itself
   (greedy, and sampled every ``sample_every``-th batch) from corpus prompts, labelled with the
   target's full distribution at every position: the target loops and repeats itself along its
   own output, and a student trained only on human text does not learn to copy
   (docs/design.md section 7). Shards are a pure function of (corpus, seed, shard index), so a
   killed run continues where it stopped and ``train`` can be re-run without running the target
   again.
2. **Training** (``out/checkpoints/``; :mod:`.train`, :mod:`.loss`). A small
   ``LlamaForCausalLM`` (:mod:`.student`) with tied input/output embeddings (one ``49152 x H``
   matrix, initialised by PCA of the target's embedding) learns KL(teacher top-k, renormalised
   || student) + ``ce_weight`` x CE(teacher argmax), with the student's output restricted to the
   ``vocab_size`` tokens the teacher most often prefers (the *vocab map*, :mod:`.vocab_map`).
   Checkpoints (model + AdamW state, safetensors) are written atomically every ``ckpt_every``
   steps; a re-run resumes from the last one.
3. **Export** (``out/``): config.json + model.safetensors (float16) + the target's tokenizer
   files + ``vocab_map.safetensors`` (int64 target ids, sorted, unique). ``load_causal_lm(out)``
   loads it; verispec then computes only the vocab-map rows of the head, HF assisted
   generation uses the full tied head (both exact: tokens outside the map get q = 0). The cost
   c and acceptance of the fresh draft are then measured (:mod:`.measure`).

``--arch eagle`` trains an EAGLE-style head instead (:mod:`.eagle_stage`; :mod:`verispec.drafters.eagle_head`,
training in :mod:`verispec.distill.eagle_train`): after the labels, the target's final hidden states for
every label shard are stored in ``out/features/`` (resumable), the head is trained on them, and
the export is ``eagle_config.json`` + ``eagle.safetensors`` + ``vocab_map.safetensors`` (the
head uses the target's own embedding and output rows, so it holds no copy of them).

Corpus: by default the Python standard library's own sources (offline, ~3M tokens), split into
train / held-out by file. Add any local text with ``--corpus PATH`` (files, or folders searched
for ``*.py *.txt *.md *.rst *.json *.c *.h *.js *.ts *.java *.go *.rs *.html``). With internet a
bigger corpus is just more local files, e.g. ``git clone`` a few repositories or save a dataset
split as text files, and pass the folders with ``--corpus``.

A head that knows general text (docs/design.md section 11) comes from three more modules, each
with its own ``python -m`` entry: :mod:`.instructions` (offline user instructions over eight task
families, held out by source), :mod:`.answers` (the target's answers by continuous batching, as
resumable shards, with its hidden states recorded while it generates: :mod:`.record`) and
:mod:`.head` (an EAGLE head trained on those shards, agreement per family).

The whole run is :func:`distill` (:mod:`.pipeline`); the command's options and output are in
:mod:`.command`, and ``python -m verispec.distill`` is the same as ``verispec distill``.
"""

from __future__ import annotations

from .command import add_distill_arguments, run_from_args
from .config import KINDS, SEQ_LEN, TOPK, DistillConfig
from .corpus import TEXT_SUFFIXES, corpus_files, prepare_streams, split_files, stdlib_files
from .dataset import LabelSet, label_files, sequence_weights
from .labels import generate_chat, generate_labelled, label_chunks
from .loss import distill_loss, evaluate
from .measure import measure_acceptance, measure_cost
from .pipeline import distill
from .shards import make_labels, shard_path
from .student import build_student, export_student, parse_arch, pca_embedding, student_config, student_logits
from .train import train_student
from .vocab_map import choose_vocab_map, coverage

__all__ = [
    "KINDS",
    "SEQ_LEN",
    "TEXT_SUFFIXES",
    "TOPK",
    "DistillConfig",
    "LabelSet",
    "add_distill_arguments",
    "build_student",
    "choose_vocab_map",
    "corpus_files",
    "coverage",
    "distill",
    "distill_loss",
    "evaluate",
    "export_student",
    "generate_chat",
    "generate_labelled",
    "label_chunks",
    "label_files",
    "make_labels",
    "measure_acceptance",
    "measure_cost",
    "parse_arch",
    "pca_embedding",
    "prepare_streams",
    "run_from_args",
    "sequence_weights",
    "shard_path",
    "split_files",
    "stdlib_files",
    "student_config",
    "student_logits",
    "train_student",
]
