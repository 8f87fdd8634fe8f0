"""The offline instruction corpus (verispec.distill.instructions): size and variety per family,
the held-out split by source, the benchmark guard (and that it can fail), determinism, length
caps, translation and math prompts, the roff reader, JSONL, the command and self-instruct."""

from __future__ import annotations

import random
import re

import pytest

from verispec.distill.instructions import (
    FAMILIES,
    MAX_CHARS,
    Instruction,
    bench_shingles,
    build_instructions,
    drop_bench_overlap,
    load_sources,
    new_beside,
    normalise,
    parse_question,
    read_jsonl,
    self_instruct,
    write_jsonl,
)
from verispec.distill.instructions.__main__ import main
from verispec.distill.instructions.build import _Dedup
from verispec.distill.instructions.families import Candidate, add_typos
from verispec.distill.instructions.mathgen import MATH_TEMPLATES, math_problem, numbers_in
from verispec.distill.instructions.roff import render_roff
from verispec.workloads import load_workload

N = 12000


@pytest.fixture(scope="module")
def built():
    stats: dict = {}
    return build_instructions(N, 0, stats=stats), stats


def _enough_local_text() -> bool:
    return len(load_sources().by_lang("en")) >= 2000


def _my_shingles(text: str, k: int = 8) -> set[tuple[str, ...]]:
    """Written apart from the module's own, so that the test does not check the code with itself."""
    words = re.sub(r"[^\w]+", " ", text.lower()).split()
    return {tuple(words[i:i + k]) for i in range(len(words) - k + 1)}


def test_counts_per_family_and_distinct(built):
    corpus, stats = built
    assert len(corpus) == N == stats["total"]
    assert len({normalise(i.text) for i in corpus}) == N >= 5000
    assert len({i.id for i in corpus}) == N
    by_family = {f: [i for i in corpus if i.family == f] for f in FAMILIES}
    assert set(by_family) == {"chat", "qa", "summarization", "translation", "math", "rag", "code", "grounded"}
    if not _enough_local_text():
        pytest.skip("this machine has too little local text (man pages) for every family's pool")
    for f, items in by_family.items():
        assert len(items) >= 0.05 * N, (f, len(items))
        assert sum(i.split == "heldout" for i in items) >= 40, f
        assert stats["families"][f]["train"] + stats["families"][f]["heldout"] == len(items)


def test_heldout_is_by_source(built):
    corpus, _ = built
    sides: dict[str, set[str]] = {}
    for i in corpus:
        sides.setdefault(i.source, set()).add(i.split)
    assert all(len(s) == 1 for s in sides.values()), [k for k, s in sides.items() if len(s) > 1][:5]
    held = sum(i.split == "heldout" for i in corpus)
    assert 0.02 * N <= held <= 0.15 * N
    # math holds out whole templates
    math_held = {i.source for i in corpus if i.family == "math" and i.split == "heldout"}
    math_train = {i.source for i in corpus if i.family == "math" and i.split == "train"}
    assert math_held and math_train and not math_held & math_train


def test_no_bench_prompt_shingle(built):
    corpus, _ = built
    bench = set().union(*(_my_shingles(p.text) for p in load_workload("all")))
    assert bench
    bad = [i.id for i in corpus if _my_shingles(i.text) & bench]
    assert not bad


def test_a_planted_bench_prompt_is_dropped(monkeypatch):
    prompts = load_workload("all")
    bench = bench_shingles()
    planted = [prompts[0].text, "Please help me.\n\n" + prompts[15].text[:120], "A question nobody benchmarks?"]
    assert drop_bench_overlap(planted, bench) == [False, False, True]
    # through the whole build: a family that proposes bench prompts gets none of them in
    chat = FAMILIES["chat"]

    def leaky(src, rng, n):
        return [Candidate("leak:bench", p.text) for p in prompts] + chat(src, rng, n)

    monkeypatch.setitem(FAMILIES, "chat", leaky)
    stats: dict = {}
    corpus = build_instructions(400, 0, stats=stats)
    assert not [i for i in corpus if i.source == "leak:bench"]
    assert stats["drops_by_family"]["chat"]["bench overlap"] >= len(prompts)


def test_deterministic():
    a, b = build_instructions(300, 3), build_instructions(300, 3)
    assert a == b
    c = build_instructions(300, 4)
    assert [i.text for i in c] != [i.text for i in a]


def test_texts_nonempty_and_capped(built):
    corpus, _ = built
    for i in corpus:
        assert isinstance(i, Instruction) and i.text.strip() == i.text and i.text
        assert len(i.text) <= MAX_CHARS
        assert i.split in ("train", "heldout") and i.family in FAMILIES and i.id.startswith(i.family + "-")


def test_translation_prompts_name_a_language(built):
    corpus, _ = built
    trans = [i for i in corpus if i.family == "translation"]
    assert trans
    for i in trans:
        assert re.search(r"\b(French|Spanish|German)\b", i.text), i.text
        if i.source.startswith("man-"):  # a French / Spanish / German text: into English
            assert "English" in i.text, i.text


def test_math_answers_are_not_in_the_prompt(built):
    rng = random.Random(0)
    for name in sorted(MATH_TEMPLATES):
        for _ in range(30):
            p = math_problem(rng, name)
            assert p.answer not in p.text
            first = re.search(r"\d+(?:\.\d+)?(?:/\d+)?", p.answer.replace(",", ""))
            assert first is None or first.group(0) not in numbers_in(p.text), (name, p.text, p.answer)
    corpus, _ = built
    math = [i for i in corpus if i.family == "math"]
    assert len({i.source for i in math}) >= 30
    assert not [i for i in math if re.search(r"answer (is|:)|solution:", i.text, re.I)]


def test_dedup_exact_and_near():
    d = _Dedup()
    base = "Summarise this text. " + " ".join(f"word{i}" for i in range(60))
    assert d.check("qa", Candidate("man:a.1", base)) == ""
    assert d.check("qa", Candidate("man:b.1", "  " + base.upper())) == "exact"
    assert d.check("qa", Candidate("man:a.1", base + " one more")) == "near"
    assert d.check("qa", Candidate("man:b.1", base + " one more")) == ""  # another source: kept
    assert d.check("chat", Candidate("man:a.1", base + " two more")) == ""  # another family: kept


def test_add_typos_changes_text():
    text = "The configuration file contains their settings, which are read before the program starts."
    rng = random.Random(1)
    for _ in range(20):
        assert add_typos(text, rng) != text


def test_render_roff():
    src = "\n".join([
        '.\\" a comment', ".TH DEMO 1", ".SH NAME", "demo \\- show a \\fBdemo\\fR page", ".SH DESCRIPTION",
        "The \\fBdemo\\fP tool prints \\(lqhello\\(rq and exits.", "It is caf\\('e safe\\(em mostly.", ".PP",
        "Second paragraph.", ".nf", "code line that must not appear", ".fi", ".TP", ".B \\-v",
        "Verbose output.", ".SH SEE ALSO", ".BR other (1)",
    ])
    name, paras = render_roff(src)
    assert name == "demo - show a demo page"
    texts = [p.text for p in paras]
    assert 'The demo tool prints "hello" and exits. It is café safe - mostly.' in texts
    assert "Second paragraph." in texts and not any("code line" in t for t in texts)
    assert not any(t.startswith("-v") for t in texts)
    item = [p for p in paras if p.text == "Verbose output."]
    assert item and item[0].item and item[0].section == "DESCRIPTION"
    assert paras[-1].section == "SEE ALSO" and paras[-1].text == "other(1)"
    assert render_roff(".so man1/other.1\n") == ("", [])


def test_jsonl_roundtrip(tmp_path):
    items = build_instructions(60, 1)
    path = tmp_path / "c.jsonl"
    write_jsonl(items, path)
    assert read_jsonl(path) == items
    path.write_text('{"id": "x"}\n')
    with pytest.raises(ValueError, match="line 1"):
        read_jsonl(path)


def test_command(tmp_path, capsys):
    out = tmp_path / "c.jsonl"
    assert main(["--n", "80", "--seed", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "80 instructions" in printed and "heldout" in printed and "math" in printed
    assert len(read_jsonl(out)) == 80
    for bad in (["--n", "0", "--out", str(out)], ["--n", "x", "--out", str(out)], ["--n", "5"],
                ["--n", "5", "--out", str(tmp_path / "missing" / "c.jsonl")], ["--seed", "1.5", "--out", str(out)]):
        with pytest.raises(SystemExit) as e:
            main(bad)
        assert e.value.code == 2
    assert "error" in capsys.readouterr().err


def test_new_beside_keeps_only_new_texts_and_the_earlier_split_of_each_source():
    known = build_instructions(300, 0)
    more = build_instructions(500, 0)
    # an earlier corpus that held one of the new sources out, and trained on one held out now (two
    # sources with texts the earlier corpus lacks: which sources those are depends on the machine's
    # stdlib and manual pages, so they are looked up, not taken as the first of the corpus)
    earlier = {normalise(i.text) for i in known}
    fresh = [i for i in more if normalise(i.text) not in earlier]
    held_now = next(i for i in fresh if i.split == "heldout")
    train_now = next(i for i in fresh if i.split == "train" and i.source != held_now.source)
    known += [Instruction("x-1", train_now.family, train_now.source, "heldout", "an earlier text, held out"),
              Instruction("x-2", held_now.family, held_now.source, "train", "an earlier text, trained on")]
    new = new_beside(more, known)
    known_texts = {normalise(i.text) for i in known}
    assert new and all(normalise(i.text) not in known_texts for i in new)
    assert len(new) == sum(normalise(i.text) not in known_texts for i in more)
    split, own = {i.source: i.split for i in known}, {i.id: i.split for i in more}
    assert all(i.split == split.get(i.source, own[i.id]) for i in new)
    flipped = [i for i in new if i.source in (held_now.source, train_now.source)]
    assert flipped and all(i.split == ("heldout" if i.source == train_now.source else "train") for i in flipped)


def test_command_with_exclude(tmp_path, capsys):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert main(["--n", "80", "--seed", "2", "--out", str(first)]) == 0
    assert main(["--n", "160", "--seed", "2", "--out", str(second), "--exclude", str(first)]) == 0
    assert "are in --exclude (80 instructions)" in capsys.readouterr().out
    old = {normalise(i.text) for i in read_jsonl(first)}
    new = read_jsonl(second)
    assert 0 < len(new) < 160 and not old & {normalise(i.text) for i in new}
    for bad in (["--exclude", str(tmp_path / "none.jsonl")], ["--exclude", str(second)]):
        with pytest.raises(SystemExit) as e:
            main(["--n", "20", "--out", str(second), *bad])
        assert e.value.code == 2
    assert "--exclude" in capsys.readouterr().err


def test_parse_question():
    assert parse_question("Question: how do I keep basil alive indoors?") == "How do I keep basil alive indoors?"
    assert parse_question('Sure!\n1. "What is the best way to learn chess openings?"') == \
        "What is the best way to learn chess openings?"
    assert parse_question('A person might type: "What was the French Revolution about?"') == \
        "What was the French Revolution about?"
    assert parse_question("A beginner might ask: how do rooks move in chess?") == "How do rooks move in chess?"
    assert parse_question("Why?") is None  # too short
    assert parse_question("Tell me about volcanoes.") is None
    assert parse_question("What is a? And what is b, in detail please?") is None  # two questions
    assert parse_question("What " + "very " * 60 + "long?") is None


def test_self_instruct_with_a_fake_generator():
    bench_q = next(p.text for p in load_workload("chat") if "?" in p.text).split("?")[0] + "?"
    replies = iter([
        "How can I make my tomato plants produce more fruit?",
        "How can I make my tomato plants produce more fruit?",  # a duplicate
        "Sure! Here is one:\nQuestion: What is the safest way to clean a laptop keyboard?",
        "I cannot think of one.",
        bench_q,  # a benchmark question: dropped
        "What's the difference between baking soda and baking powder in cakes?",
    ] + [f"What is a good question number {k} about gardens?" for k in range(100)])
    calls = []

    def fake(prompts: list[str]) -> list[str]:
        calls.append(list(prompts))
        assert all("Reply with the question only." in p for p in prompts)
        return [next(replies) for _ in prompts]

    out = self_instruct(fake, ["gardening", "laptops", "baking"], n=5, seed=0, batch_size=3)
    texts = [i.text for i in out]
    assert texts[:3] == ["How can I make my tomato plants produce more fruit?",
                         "What is the safest way to clean a laptop keyboard?",
                         "What's the difference between baking soda and baking powder in cakes?"]
    assert len(out) == 5 and len(set(texts)) == 5 and bench_q not in texts
    assert all(i.family == "chat" and i.source.startswith("self:") and i.split in ("train", "heldout") for i in out)
    assert sum(len(c) for c in calls) == 9  # stops once n are collected
    with pytest.raises(ValueError, match="replies"):
        self_instruct(lambda ps: ps[:-1], ["x"], n=2, seed=0)
    with pytest.raises(ValueError, match="seed subject"):
        self_instruct(fake, [" "], n=2)
    assert self_instruct(lambda ps: ["no question here"] * len(ps), ["x"], n=3, max_prompts=6) == []
