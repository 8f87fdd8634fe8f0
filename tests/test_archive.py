"""Answer archives: packing answer shards to token ids and rebuilding their features in one
teacher-forced pass gives back the shards a data run with recorded features writes."""

from __future__ import annotations

import json

import pytest
import torch

from verispec.cli import main as cli_main
from verispec.distill.answers import AnswerJob, answer_shards, generate_answers, read_answer_shard
from verispec.distill.archive import AnswerArchive, pack_answers, read_archive, write_archive
from verispec.distill.refeature import archive_features, sequence_features
from verispec.distill.training import atomic_save

JOBS = [AnswerJob(f"j{i}", "chat" if i % 2 else "math", " ".join("abcdefgh"[: 2 + i % 5])) for i in range(7)]


def _answers(target, out, features):
    return generate_answers(target, JOBS, out, max_new_tokens=6, max_batch=3, shard_size=3, seed=5, sample_frac=0.5,
                            chat=False, features=features)


def test_pack_keeps_every_sequence_and_reads_back_the_same(tiny_target, tmp_path) -> None:
    _answers(tiny_target, tmp_path / "a", features=False)
    archive = pack_answers([tmp_path / "a"])
    write_archive(archive, tmp_path / "x.safetensors")
    back = read_archive(tmp_path / "x.safetensors")
    assert back == archive
    assert back.ids == [j.id for j in JOBS] and back.families == [j.family for j in JOBS]
    assert back.dtype == "torch.float64"
    seen = 0
    for path in answer_shards(tmp_path / "a"):
        t, ids, _ = read_answer_shard(path)
        for b, jid in enumerate(ids):
            k = back.ids.index(jid)
            n, L = int(t["prompt_len"][b]), int(t["length"][b])
            assert back.sequences[k] == t["input_ids"][b, :L].tolist() and back.prompt_len[k] == n
            seen += 1
    assert seen == len(JOBS) and back.answer_tokens == sum(len(a) for a in back.answers())


def test_token_ids_are_stored_in_16_bits_when_they_fit(tmp_path) -> None:
    from safetensors import safe_open

    for top, dtype in ((65535, torch.uint16), (65536, torch.int32)):
        a = AnswerArchive([[1, 2, top], [top, 0]], [1, 1], ["a", "b"], ["chat", "qa"], "torch.float32")
        write_archive(a, tmp_path / "x.safetensors")
        with safe_open(str(tmp_path / "x.safetensors"), "pt") as f:
            assert f.get_tensor("tokens").dtype == dtype
        assert read_archive(tmp_path / "x.safetensors") == a


def test_rebuilt_features_equal_the_recorded_ones(tiny_target, tmp_path) -> None:
    """The shards rebuilt from an archive hold the tokens, weights and (to float16) the features
    that the data run recorded while it generated."""
    _answers(tiny_target, tmp_path / "rec", features=True)
    archive = pack_answers([tmp_path / "rec"])
    run = archive_features(tiny_target, archive, tmp_path / "re", shard_size=3, batch_tokens=16)
    assert (run.written, run.skipped, run.sequences) == (3, 0, 7)
    rec = {jid: (t, b) for p in answer_shards(tmp_path / "rec") for t, ids, _ in [read_answer_shard(p)]
           for b, jid in enumerate(ids)}
    for p in answer_shards(tmp_path / "re"):
        t, ids, fams = read_answer_shard(p)
        for b, jid in enumerate(ids):
            t0, b0 = rec[jid]
            L = int(t["length"][b])
            for k in ("input_ids", "weight", "generated"):
                assert torch.equal(t[k][b, :L], t0[k][b0, :L]), k
            torch.testing.assert_close(t["features"][b, :L].float(), t0["features"][b0, :L].float(), atol=2e-3,
                                       rtol=2e-3)
            assert not t["features"][b, L - 1:].any()  # the last position and padding are zero
    again = archive_features(tiny_target, archive, tmp_path / "re", shard_size=3)
    assert (again.written, again.skipped) == (0, 3)


def test_batched_features_do_not_depend_on_the_batch(tiny_target) -> None:
    """Right-padding needs no mask for a causal model: each sequence's features are those of a
    pass over it alone, in any batch shape."""
    from verispec.drafters.eagle_head import target_features

    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 64, (n,), generator=g).tolist() for n in (9, 3, 14, 5, 14, 2)]
    for batch_tokens in (1, 20, 10_000):
        got = sequence_features(tiny_target.model, seqs, batch_tokens=batch_tokens)
        for s, f in zip(seqs, got):
            want = target_features(tiny_target.model, torch.tensor([s[:-1]]))[0].half()
            assert f.shape == want.shape
            torch.testing.assert_close(f, want, atol=1e-3, rtol=1e-3)


def test_bad_archives_and_packs_are_refused_with_a_clear_error(tiny_target, tmp_path) -> None:
    with pytest.raises(ValueError, match="unique"):
        AnswerArchive([[1, 2], [1, 2]], [1, 1], ["a", "a"], ["x", "x"], "")
    with pytest.raises(ValueError, match="prompt length"):
        AnswerArchive([[1, 2]], [2], ["a"], ["x"], "")
    atomic_save({"x": torch.zeros(2)}, tmp_path / "other.safetensors", metadata={"format": "something"})
    with pytest.raises(ValueError, match="not an answer archive"):
        read_archive(tmp_path / "other.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ValueError, match="not a readable safetensors"):
        read_archive(tmp_path / "junk.safetensors")
    with pytest.raises(ValueError, match="no answer shards"):
        pack_answers([tmp_path])
    # shards of two precisions in one pack
    _answers(tiny_target, tmp_path / "a", features=False)
    t, ids, fams = read_answer_shard(answer_shards(tmp_path / "a")[0])
    atomic_save(t, tmp_path / "b" / "answers-00000.safetensors",
                metadata={"ids": json.dumps([i + "b" for i in ids]), "families": json.dumps(fams),
                          "dtype": "torch.bfloat16"})
    with pytest.raises(ValueError, match="different precisions"):
        pack_answers([tmp_path / "a", tmp_path / "b"])


def test_pack_command_errors_name_the_argument(tmp_path, capsys) -> None:
    out = str(tmp_path / "x.safetensors")
    assert cli_main(["distill", "pack", "--answers", str(tmp_path / "none"), "--out", out]) == 2
    assert "--answers" in capsys.readouterr().err
    assert cli_main(["distill", "pack", "--answers", str(tmp_path), "--out", str(tmp_path / "x.bin")]) == 2
    assert "--out must end in .safetensors" in capsys.readouterr().err
    assert cli_main(["distill", "features", "--archive", str(tmp_path / "none.safetensors"),
                     "--out", str(tmp_path / "o")]) == 2
    assert "--archive" in capsys.readouterr().err
    assert not (tmp_path / "x.safetensors").exists() and not (tmp_path / "o").exists()
