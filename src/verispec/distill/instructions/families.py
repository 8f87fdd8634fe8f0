"""The per-family instruction builders: each is a pure function of (sources, rng, n) that returns
``n`` candidates (:class:`Candidate`: text + source id) of one task family.

The families are those of the benchmark workloads (:data:`verispec.workloads.BUILTIN_WORKLOADS`):
``chat``, ``qa``, ``summarization``, ``translation``, ``math``, ``rag``, ``code`` and ``grounded``.
Candidates may repeat (a small pool, an unlucky draw); :mod:`.build` removes duplicates, near
duplicates and anything close to a benchmark prompt, so the builders only aim at variety. Their
wording is written for this corpus, not taken from the benchmark prompts.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import NamedTuple

from . import topics as T
from .mathgen import math_problem
from .sources import Passage, Sources, sentences

__all__ = ["FAMILIES", "Candidate", "add_typos", "everyday_text", "questions_about"]


class Candidate(NamedTuple):
    """A candidate instruction: its text and the id of the source it came from."""

    source: str
    text: str


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _doc_name(p: Passage) -> str:
    """How a prompt names where a passage comes from."""
    kind = p.source.split(":", 1)[0]
    if kind == "man":
        return f"the manual page of {p.title}"
    if kind == "pydoc":
        return f"the Python reference on {p.title.removesuffix(' (Python)')}"
    if kind == "pkg":
        return f"the description of the Python package {p.title}"
    if kind == "py":
        return f"the documentation of {p.title}"
    return f"the {p.title} documentation"


# ---------------------------------------------------------------------------------------------
# chat

_OCCASIONS = ("birthday", "retirement party", "graduation", "wedding anniversary", "farewell dinner",
              "team's end-of-year party")
_NEWS = ("the opening of a new neighbourhood bakery", "our team's move to a new office", "a new open-source library",
         "winning a local business award", "a charity run next month", "a free coding workshop for teenagers",
         "the launch of a recycling scheme at work", "a new weekend opening time for the library")


def _chat_one(src: Sources, rng: random.Random) -> Candidate:
    kind = rng.choices(("activity", "concept", "compare", "advice", "list", "debate", "email", "story", "poem",
                        "writing", "tech", "summary-tech"),
                       weights=(16, 18, 7, 7, 6, 4, 8, 5, 4, 5, 16, 4))[0]
    suffix = rng.choice(T.STYLE_SUFFIXES)
    if kind == "activity":
        a = rng.choice(T.ACTIVITIES)
        return Candidate(f"topic:{_slug(a)}", rng.choice(T.ACTIVITY_TEMPLATES).format(a=a) + suffix)
    if kind == "concept":
        c = rng.choice(T.CONCEPTS)
        if rng.random() < 0.15:
            text = f"Explain {c} to {rng.choice(T.AUDIENCES)}."
        else:
            text = rng.choice(T.CONCEPT_TEMPLATES).format(c=c)
        return Candidate(f"topic:{_slug(c)}", _cap(text) + suffix)
    if kind == "compare":
        x, y = rng.choice(T.PAIRS)
        if rng.random() < 0.5:
            x, y = y, x
        return Candidate(f"topic:{_slug(min(x, y))}-vs-{_slug(max(x, y))}",
                     rng.choice(T.COMPARE_TEMPLATES).format(x=x, y=y, X=_cap(x)) + suffix)
    if kind == "advice":
        s = rng.choice(T.SITUATIONS)
        return Candidate(f"situation:{_slug(s)[:60]}", rng.choice(T.ADVICE_TEMPLATES).format(s=s, S=_cap(s)))
    if kind == "list":
        t = rng.choice(T.LIST_TOPICS)
        n = rng.choice(("three", "five", "seven", "ten", "5", "8"))
        return Candidate(f"list:{_slug(t)}", rng.choice(T.LIST_TEMPLATES).format(n=n, t=t))
    if kind == "debate":
        d = rng.choice(T.DEBATES)
        return Candidate(f"debate:{_slug(d)}", rng.choice(T.DEBATE_TEMPLATES).format(d=d))
    if kind == "email":
        p = rng.choice(T.EMAIL_PURPOSES)
        return Candidate(f"email:{_slug(p)}", rng.choice(T.EMAIL_TEMPLATES).format(r=rng.choice(T.RECIPIENTS), p=p))
    if kind == "story":
        who = rng.choice(T.STORY_CHARACTERS)
        return Candidate(f"story:{_slug(who)}",
                     rng.choice(T.STORY_TEMPLATES).format(who=who, where=rng.choice(T.STORY_SETTINGS)))
    if kind == "poem":
        subject, form = rng.choice(T.POEM_SUBJECTS), rng.choice(T.POEM_FORMS)
        text = rng.choice(("Write {f} about {s}.", "Compose {f} about {s}.",
                           "Could you write {f} about {s} for a greeting card?",
                           "I need {f} about {s}. Make it vivid but simple."))
        return Candidate(f"poem:{_slug(subject)}", text.format(f=form, s=subject))
    if kind == "writing":
        task = rng.choice(T.WRITING_TASKS)
        product, occasion, news = rng.choice(T.PRODUCTS), rng.choice(_OCCASIONS), rng.choice(_NEWS)
        key = product if "{product}" in task else occasion if "{occasion}" in task else news
        return Candidate(f"writing:{_slug(key)}", task.format(product=product, occasion=occasion, news=news) + suffix)
    concepts = [c for c in src.concepts if c.kind in T.TECH_TEMPLATES]
    if not concepts:
        return _chat_one_everyday(rng)
    c = rng.choice(concepts)
    if kind == "summary-tech":
        text = rng.choice((
            'The documentation describes {n} ({k}) as: "{s}". What does that mean in practice? Give an example.',
            'My notes say that {n} is a {k} to "{s}". Can you explain this in more detail?',
            'What is {n}? All I know is the one-line description "{s}".',
        )).format(n=c.name, k=c.kind, s=c.summary)
        return Candidate(c.source, text)
    return Candidate(c.source, rng.choice(T.TECH_TEMPLATES[c.kind]).format(name=c.name) + suffix)


def _chat_one_everyday(rng: random.Random) -> Candidate:
    a = rng.choice(T.ACTIVITIES)
    return Candidate(f"topic:{_slug(a)}", rng.choice(T.ACTIVITY_TEMPLATES).format(a=a))


def chat(src: Sources, rng: random.Random, n: int) -> list[Candidate]:
    """Open instructions: advice, explanations, comparisons, writing, opinions, lists, and
    questions about the commands, functions and modules the sources name."""
    return [_chat_one(src, rng) for _ in range(n)]


# ---------------------------------------------------------------------------------------------
# questions about a passage (qa, rag)

_TERM = re.compile(r"(?<![\w-])(--?[a-z][a-z0-9-]{2,}|[a-z_][a-z0-9_]{2,}\(\)|[A-Z][a-z]+(?: [A-Z][a-z]+)+)")
_STARTERS = {"The", "This", "That", "These", "Since", "Before", "After", "If", "When", "In", "On", "For", "As", "By",
             "With", "From", "Note", "Use", "Some", "All", "Each", "Unlike", "Like", "See", "It", "An", "A"}
_PATTERNS = (  # (sentence pattern, question); groups are copied into the question
    (re.compile(r"^(If|When) ([^,;:()]{12,110}), "), "According to the text, what happens {0} {1}?"),
    (re.compile(r"\bUse (\S+(?: \S+){0,3}) to ([a-z][^.;:,]{8,80})"), "How can you {1}, according to the text?"),
    (re.compile(r"^(?:The )?(\S+\(\)|[a-z][\w.-]+) returns ([^.;]{5,})"), "What does {0} return?"),
    (re.compile(r"^(?!It |This |That |There )([A-Za-z][\w.-]*(?: [\w.-]+){0,3}) (is|are) used (?:to|for) "),
     "What {1} {0} used for?"),
    (re.compile(r"^(?!It |This |That |There )([A-Za-z][\w.-]*(?: [\w.-]+){0,3}) (?:allows|lets|enables) "),
     "What does {0} make possible, according to the text?"),
)


_GENERIC_Q = (
    "What is the main point of this text?",
    "What problem does this text describe, and what does it say about solving it?",
    "Name two specific details the text gives about {title}.",
    "What does {title} do, according to this text?",
    "Does the text mention any limitation, exception or warning? What is it?",
    "Who would need this information, judging from the text, and why?",
    "What is the most important instruction or fact in this text?",
    "Which sentence of the text best explains its purpose, and what does it mean?",
)


def questions_about(p: Passage) -> tuple[list[str], list[str]]:
    """``(specific, generic)`` questions about passage ``p``: specific ones come from its own
    sentences (conditions, defaults, requirements, numbers, named terms)."""
    specific = []
    for s in sentences(p.text.replace("\n\n", " ")):
        for pattern, question in _PATTERNS:
            m = pattern.search(s)
            if m:
                groups = [g for g in m.groups()]
                if question.startswith("According to the text, what happens"):
                    groups[0] = groups[0].lower()
                elif groups[0][:1].isupper() and groups[0].split()[0] in _STARTERS:
                    continue
                specific.append(question.format(*groups))
        if "by default" in s.lower() or "the default" in s.lower():
            specific.append("What is the default behaviour described in the text?")
        if re.search(r"\b(must|must not|cannot|is required|only if)\b", s):
            specific.append("What requirement or restriction does the text state?")
    nums = re.findall(r"(?<![\w.])\d{2,}(?![\w.])", p.text)
    if nums:
        specific.append(f"What does the number {nums[0]} refer to in the text?")
    terms = set()
    for m in _TERM.finditer(p.text):
        t, before = m.group(1), p.text[:m.start()].rstrip()
        if t[:1].isupper() and (t.split()[0] in _STARTERS or not before or before[-1] in ".!?:"):
            continue
        terms.add(t)
    for t in sorted(terms)[:4]:
        specific.append(f"What does the text say about {t}?")
        specific.append(f"According to the passage, what is the role of {t}?")
    title = p.title.removesuffix(" (Python)")
    generic = [q.format(title=title) for q in _GENERIC_Q]
    return specific, generic


def _pick_question(p: Passage, rng: random.Random) -> str:
    specific, generic = questions_about(p)
    if specific and rng.random() < 0.85:
        return rng.choice(specific)
    return rng.choice(generic)


# ---------------------------------------------------------------------------------------------
# qa

_QA = (
    "Here is an excerpt from {doc}.\n\n{p}\n\nBased only on this excerpt: {q}",
    "{p}\n\nQuestion: {q}\nAnswer using only the text above.",
    "Use the following text to answer my question.\n\nText:\n{p}\n\nQuestion: {q}",
    'Context:\n"""\n{p}\n"""\n\n{q} Answer in one or two sentences.',
    "I was reading {doc} and found this:\n\n{p}\n\n{q}",
    "Answer the question below from the passage. If the passage does not say, reply that it does not say.\n\n"
    "Passage:\n{p}\n\nQuestion: {q}",
    "Question: {q}\n\nRelevant text:\n{p}\n\nGive a short answer and point to the sentence that supports it.",
    "Read this and tell me: {q}\n\n{p}",
)


def _shuffled(items: Sequence, rng: random.Random) -> list:
    out = list(items)
    rng.shuffle(out)
    return out


def _cycle(pool: Sequence, rng: random.Random, n: int) -> list:
    """``n`` items: the pool in a random order, again in another order if it is too small."""
    out: list = []
    while pool and len(out) < n:
        out += _shuffled(pool, rng)
    return out[:n]


def qa(src: Sources, rng: random.Random, n: int) -> list[Candidate]:
    """One question about a passage of 80-200 words given in the prompt."""
    out = []
    for p in _cycle(src.passages(80, 200), rng, n):
        text = rng.choice(_QA).format(doc=_doc_name(p), p=p.text, q=_pick_question(p, rng))
        out.append(Candidate(p.source, text))
    return out


# ---------------------------------------------------------------------------------------------
# summarization

_SUMMARY = (
    "Write a two-to-three sentence summary of the text below.\n\n{p}",
    "Give me the gist of this passage from {doc} in 2 or 3 sentences:\n\n{p}",
    "Summarize the key points of the following text as three bullet points.\n\n{p}",
    "Condense this text into a single sentence.\n\n{p}",
    "Explain what this text says in simple words, as if to a twelve-year-old, in two or three sentences.\n\n{p}",
    "{p}\n\nTL;DR in two or three sentences, please.",
    "Here is part of {doc}.\n\n{p}\n\nWrite a short summary (2-3 sentences) for someone who has never used {title}.",
    "Please produce a brief abstract, no more than three sentences, of this text:\n\n{p}",
    "{p}\n\nSum this up in two sentences for a busy colleague.",
    "What are the three most important points of this text? Answer with a bulleted list.\n\n{p}",
    "Boil the following passage down to one or two sentences that keep the essential information.\n\n{p}",
)


def summarization(src: Sources, rng: random.Random, n: int) -> list[Candidate]:
    """Summaries of a given text of 110-250 words: 2-3 sentences, bullets, one sentence, for a child."""
    out = []
    for p in _cycle(src.passages(110, 250), rng, n):
        title = p.title.removesuffix(" (Python)")
        out.append(Candidate(p.source, rng.choice(_SUMMARY).format(doc=_doc_name(p), p=p.text, title=title)))
    return out


# ---------------------------------------------------------------------------------------------
# translation

_LANG = {"de": "German", "fr": "French", "es": "Spanish"}
_TO_EN = (
    "Translate this {L} text into English:\n\n{p}",
    "What does this {L} paragraph say? Please translate it into English.\n\n{p}",
    "Give me an English translation of the following passage from a {L} software manual.\n\n{p}",
    "{p}\n\nTranslate the text above from {L} to English.",
    "I received this in {L}. Can you put it into natural English?\n\n{p}",
    "Translate this {L} passage into English, keeping names of commands and options unchanged:\n\n{p}",
)
_FROM_EN = (
    "Translate the following paragraph into {L}:\n\n{p}",
    "How would you say this in {L}?\n\n{p}",
    "Please give a {L} version of this text.\n\n{p}",
    "{p}\n\nTranslate this into {L}.",
    "I need this in {L} for a colleague. Can you translate it?\n\n{p}",
    "Translate from English to {L}, keeping a formal tone:\n\n{p}",
    "Could you help me translate this English text into {L}? Keep it natural.\n\n{p}",
)
_EVERYDAY = (
    "{name} will arrive at the station at {time} on {day}.",
    "Could you please send me the {doc} by {day} afternoon?",
    "The {place} is closed on {day} because of a staff training day.",
    "I am going to be about {n} minutes late, because my bus has broken down.",
    "Please remember to switch off the lights before you leave the {place}.",
    "We are meeting in front of the {place} at {time}.",
    "The tickets cost {n} euros each, and children under six travel for free.",
    "My sister lives in {city} and works at a small {place}.",
    "It has been raining in {city} for three days, so the park is flooded.",
    "Thank you very much for your help with the {doc}.",
    "The {doc} is attached to this message; let me know if anything is missing.",
    "On {day} we are planning a picnic by the river, weather permitting.",
    "Our new office is on the {floor} floor, next to the lifts.",
    "Could you book a table for {n} people on {day} evening?",
    "The doctor says I should rest for a week and drink plenty of water.",
    "{name} has lost a blue umbrella somewhere near the {place}.",
    "The train to {city} leaves from platform {n} in ten minutes.",
    "We would like to thank all the volunteers who helped at the {place} last weekend.",
    "If you have any questions, you can call me at any time before {time}.",
    "I have ordered {n} new chairs for the meeting room; they should arrive on {day}.",
    "The museum offers free guided tours every {day} at {time}.",
    "Please do not park in front of the garage door.",
    "{name} is looking for a quiet flat near the {place}, with a small balcony.",
    "The concert was cancelled at the last minute because the singer was ill.",
    "Breakfast is served from seven until ten in the room next to the reception.",
    "Don't forget to water the plants while I am in {city}.",
    "The internet connection at the {place} is very slow today.",
    "We are sorry, but the item you ordered is out of stock until {day}.",
    "My grandmother makes the best apple cake in {city}.",
    "The meeting has been moved to {day} at {time}; the room stays the same.",
)
_PLACES = ("library", "bakery", "town hall", "museum", "swimming pool", "post office", "school", "hotel", "market",
           "cinema", "pharmacy", "office")
_DOCS = ("report", "invoice", "contract", "presentation", "timetable", "application form", "photos", "menu")


def everyday_text(rng: random.Random) -> tuple[str, str]:
    """``(source, text)``: two or three everyday sentences (messages, notes, plans) for
    translation and rewriting; the source names the first sentence's pattern."""
    k = rng.choice((2, 2, 3))
    idx = rng.sample(range(len(_EVERYDAY)), k)
    slots = dict(name=rng.choice(T.FIRST_NAMES), time=f"{rng.randint(7, 21)}:{rng.choice(('00', '15', '30', '45'))}",
                 day=rng.choice(T.WEEKDAYS), place=rng.choice(_PLACES), doc=rng.choice(_DOCS),
                 n=rng.randint(2, 12), city=rng.choice(T.CITIES), floor=rng.choice(("second", "third", "fifth")))
    return f"everyday:s{idx[0]:02d}", " ".join(_EVERYDAY[i].format(**slots) for i in idx)


def translation(src: Sources, rng: random.Random, n: int) -> list[Candidate]:
    """Short texts to translate between English and French / Spanish / German, both ways."""
    foreign = {lang: src.passages(12, 90, lang) for lang in _LANG}
    foreign_pool = [p for lang in sorted(foreign) for p in foreign[lang]]
    english = src.passages(20, 70)
    fq, eq = _cycle(foreign_pool, rng, n), _cycle(english, rng, n)
    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.42 and fq:
            p = fq[i]
            out.append(Candidate(p.source, rng.choice(_TO_EN).format(L=_LANG[p.lang], p=p.text)))
        elif r < 0.75 and eq:
            p = eq[i]
            out.append(Candidate(p.source, rng.choice(_FROM_EN).format(L=rng.choice(list(_LANG.values())), p=p.text)))
        else:
            source, text = everyday_text(rng)
            out.append(Candidate(source, rng.choice(_FROM_EN).format(L=rng.choice(list(_LANG.values())), p=text)))
    return out


# ---------------------------------------------------------------------------------------------
# math

def math(src: Sources, rng: random.Random, n: int) -> list[Candidate]:
    """Arithmetic and word problems to solve step by step (:mod:`.mathgen`; no answers)."""
    out = []
    for _ in range(n):
        p = math_problem(rng)
        out.append(Candidate(f"math:{p.template}", p.text))
    return out


# ---------------------------------------------------------------------------------------------
# rag

_RAG = (
    "You are given {k} search results.\n\n{docs}\n\nQuestion: {q}\nAnswer from the search results only and cite "
    "them like [2].",
    "Documents:\n{docs}\n\nUsing these documents, answer: {q} Cite every document you use by its number in brackets.",
    "{q}\n\nBase your answer on the sources below and cite them by number, e.g. (see [1]). If the sources do not "
    "contain the answer, say so.\n\n{docs}",
    "Retrieved passages from {doc}:\n\n{docs}\n\nWith citations such as [1], answer this question: {q}",
    "Here are some notes I collected:\n\n{docs}\n\n{q} Please mention which note ([1], [2], ...) supports each "
    "part of your answer.",
    "Search results:\n{docs}\n\nUser question: {q}\nWrite a short answer grounded in the results above, citing the "
    "result numbers in square brackets.",
)


_RAG_CHARS = 1500  # the documents' total length, so that a prompt stays within the corpus's length cap


def rag(src: Sources, rng: random.Random, n: int) -> list[Candidate]:
    """A question answered from 2-4 numbered documents, all from one source, with citations."""
    by_source: dict[str, list[Passage]] = defaultdict(list)
    for p in src.passages(25, 90):
        by_source[p.source].append(p)
    groups = [ps for _, ps in sorted(by_source.items()) if len(ps) >= 2]
    out = []
    for ps in _cycle(groups, rng, n):
        k = min(len(ps), rng.choice((2, 3, 3, 4)))
        start = rng.randrange(len(ps) - k + 1)
        docs = ps[start:start + k]
        while len(docs) > 2 and sum(len(d.text) for d in docs) > _RAG_CHARS:
            docs.pop()
        k = len(docs)
        if rng.random() < 0.5:
            rng.shuffle(docs)
        target = rng.choice(docs)
        listing = "\n\n".join(f"[{i}] {d.text.replace(chr(10) * 2, ' ')}" for i, d in enumerate(docs, 1))
        text = rng.choice(_RAG).format(k=k, docs=listing, q=_pick_question(target, rng), doc=_doc_name(target))
        out.append(Candidate(target.source, text))
    return out


# ---------------------------------------------------------------------------------------------
# code

_CODE_COMPLETE = (
    "Write the body of this function so that it does what its docstring says. Return the whole function in a code "
    "block.",
    "Implement the following Python function.",
    "Fill in the missing implementation below.",
    "Here is a function signature with a docstring. Please implement it in idiomatic Python.",
    "Finish this function; show the finished version.",
    "Complete this Python function according to its docstring, and briefly explain your approach.",
)
_CODE_EXPLAIN = (
    "What does this Python function do? Explain it step by step.",
    "Explain this code to a junior developer.",
    "Describe the inputs, the return value and any side effects of this function.",
    "Walk me through this function line by line.",
    "What would this function return for a typical input? Explain with an example.",
    "Is there anything subtle or surprising in this function? Explain.",
)
_CODE_EDIT = (
    "Add type annotations to this function. Return the complete function.",
    "Write pytest unit tests for this function.",
    "Refactor this function for readability without changing its behaviour. Show the new version.",
    "Add comments explaining the non-obvious parts of this function.",
    "Rewrite this function in JavaScript.",
    "What edge cases could break this function? Suggest fixes.",
    "What is the time complexity of this function? Explain.",
    "Add input validation to this function that raises ValueError for bad arguments.",
    "Write a Google-style docstring for this function and show the updated code.",
    "Can this function be simplified? Show a shorter version if so.",
)


def code(src: Sources, rng: random.Random, n: int) -> list[Candidate]:
    """Python completion, explanation and edit requests over small documented stdlib functions
    (found by :mod:`verispec.distill.chat_prompts`)."""
    out = []
    for u in _cycle(src.functions, rng, n):
        kind = rng.choices(("complete", "explain", "edit"), weights=(4, 3, 4))[0]
        if kind == "complete":
            task, body = rng.choice(_CODE_COMPLETE), u.head
        elif kind == "explain":
            task, body = rng.choice(_CODE_EXPLAIN), u.body
        else:
            body = u.body
            names = [v for v in u.names if len(v) <= 2]
            if names and rng.random() < 0.3:
                task = (f"Give `{rng.choice(names)}` a more descriptive name throughout this function and show the "
                        "result.")
            else:
                task = rng.choice(_CODE_EDIT)
        block = f"```python\n{body}\n```"
        out.append(Candidate(u.source, f"{task}\n\n{block}" if rng.random() < 0.75 else f"{block}\n\n{task}"))
    return out


# ---------------------------------------------------------------------------------------------
# grounded

_TYPO_TASKS = (
    "Correct the spelling and grammar in this paragraph and give back only the corrected version:\n\n{t}",
    "Proofread the following text. Return the corrected text, then list the changes you made.\n\n{t}",
    "There are several typos in this text. Please fix them without changing the wording otherwise.\n\n{t}",
    "{t}\n\nCan you clean up the mistakes in the paragraph above?",
)
_REWRITE_TASKS = (
    "Rewrite this paragraph in plain language for someone who is not technical:\n\n{t}",
    "Make the following text more concise, keeping every fact:\n\n{t}",
    "Rewrite the text below as a numbered list of its main points.\n\n{t}",
    "Rewrite this in a friendly, conversational tone.\n\n{t}",
    "Rewrite the following in the second person, addressing the reader as \"you\".\n\n{t}",
    "Turn this paragraph into a short FAQ with two or three questions and answers.\n\n{t}",
    "Rewrite this text so that no sentence is longer than fifteen words.\n\n{t}",
    "Rewrite the paragraph below in a formal style suitable for a report.\n\n{t}",
    "{t}\n\nRewrite the paragraph above for a beginner, explaining any jargon in brackets.",
)
_EXTRACT_TASKS = (
    "List every command, option, file or function name mentioned in this text, one per line.\n\n{t}",
    "Extract the technical terms from this text and define each one using only the text.\n\n{t}",
    "Pull out every number, limit or default value mentioned in the text, with what it applies to.\n\n{t}",
    "Write three questions that can be answered from this text, with their answers.\n\n{t}",
    "Suggest a short, descriptive title for this paragraph.\n\n{t}",
    "Identify the main claim of this paragraph and the evidence the text gives for it.\n\n{t}",
    'Convert this paragraph into a JSON object with the keys "topic", "key_points" (a list) and "warnings" '
    "(a list).\n\n{t}",
    "{t}\n\nMake a bulleted list of the actions a user can take according to this text.",
)
_JOBS = ("nurse", "carpenter", "teacher", "software developer", "baker", "pilot", "librarian", "electrician",
         "architect", "journalist", "farmer", "pharmacist")
_ITEMS = ("ceramic teapot", "wool blanket", "desk lamp", "cotton tote bag", "glass vase", "oak cutting board",
          "steel lunch box", "linen napkin set", "travel mug", "leather wallet", "bamboo tray", "scented candle")
_TOPICS = ("data privacy", "garden design", "first aid", "climate adaptation", "public speaking", "budget planning",
           "urban cycling", "photography", "the history of the town", "beekeeping")
_TASKS = ("update the project plan", "book the venue", "send the invoice", "review the draft", "order new laptops",
          "call the supplier", "prepare the slides", "test the new release", "write the newsletter",
          "collect feedback from users")


def _people(rng: random.Random) -> str:
    rows = []
    for _ in range(rng.randint(3, 5)):
        name = f"{rng.choice(T.FIRST_NAMES)} {rng.choice(T.LAST_NAMES)}"
        age, job, city = rng.randint(19, 70), rng.choice(_JOBS), rng.choice(T.CITIES)
        a = "an" if job[0] in "aeiou" else "a"
        rows.append(rng.choice((f"{name} ({age}) is {a} {job} from {city}.",
                                f"{name}, aged {age}, works as {a} {job} in {city}.",
                                f"Then there is {name}, a {age}-year-old {job} living in {city}.")))
    return " ".join(rows)


def _date(rng: random.Random) -> str:
    return f"{rng.randint(1, 28)} {rng.choice(T.MONTHS)}"


def _events(rng: random.Random) -> str:
    rows = [f"The course on {rng.choice(_TOPICS)} starts on {_date(rng)} at the {rng.choice(_PLACES)}."]
    for _ in range(rng.randint(2, 4)):
        who = f"{rng.choice(T.FIRST_NAMES)} {rng.choice(T.LAST_NAMES)}"
        rows.append(rng.choice((f"On {_date(rng)}, {who} will give a talk about {rng.choice(_TOPICS)}.",
                                f"Registration closes on {_date(rng)}.",
                                f"A field trip to {rng.choice(T.CITIES)} is planned for {_date(rng)}.",
                                f"{who} hosts a question-and-answer evening on {_date(rng)}.",
                                f"The final exam takes place on {_date(rng)}.")))
    return " ".join(rows)


def _inventory(rng: random.Random) -> str:
    cur = rng.choice(("EUR", "USD", "GBP"))
    return "\n".join(f"* {item}: {rng.randint(3, 80)}.{rng.choice(('00', '50', '95', '99'))} {cur}, "
                     f"{rng.randint(0, 60)} left" for item in rng.sample(_ITEMS, rng.randint(3, 6)))


def _notes(rng: random.Random) -> str:
    names = rng.sample(T.FIRST_NAMES, 4)
    lines = [f"Notes from the {rng.choice(T.WEEKDAYS)} meeting. Present: {', '.join(names)}."]
    for who in rng.sample(names, 3):
        lines.append(rng.choice((f"{who} agreed to {rng.choice(_TASKS)} by {rng.choice(T.WEEKDAYS)}.",
                                 f"{who} will {rng.choice(_TASKS)} before the next meeting.",
                                 f"We asked {who} to {rng.choice(_TASKS)}; it is urgent.")))
    lines.append(f"Next meeting: {_date(rng)}.")
    return " ".join(lines)


def _blunt(rng: random.Random) -> str:
    return rng.choice((
        f"The {rng.choice(_DOCS)} you sent is wrong again. Fix it today. I need it before {rng.choice(T.WEEKDAYS)}.",
        f"Nobody told me the {rng.choice(_PLACES)} was closed. I wasted my whole morning. This is not acceptable.",
        f"Your delivery is late. Again. Where is my {rng.choice(_ITEMS)}? I want an answer now.",
        f"Stop booking meetings on {rng.choice(T.WEEKDAYS)} mornings. I can't get any work done.",
        f"I still haven't got the {rng.choice(_DOCS)}. Send it. Don't make me ask a third time.",
    ))


_SYNTHETIC: dict[str, tuple[Callable[[random.Random], str], tuple[str, ...]]] = {
    "people": (_people, (
        'Convert the information below into a JSON array with one object per person and the keys "name", "age", '
        '"job" and "city".\n\n{t}',
        "Put the details of each person below into a markdown table with the columns Name, Age, Job and City.\n\n{t}",
        "Extract the names of all people mentioned and the city of each, as lines of the form name - city.\n\n{t}",
        "{t}\n\nWho is the oldest person in this text, and what is their job? Answer from the text only.",
    )),
    "events": (_events, (
        "Make a chronological list of the dates in this text and what happens on each.\n\n{t}",
        "Extract all the dates from the announcement below into a two-column table (date, event).\n\n{t}",
        "{t}\n\nWhich people are mentioned in this announcement, and what is each of them doing?",
        "Turn this announcement into a short, friendly reminder email to the participants.\n\n{t}",
    )),
    "inventory": (_inventory, (
        "Turn this inventory into JSON: a list of objects with the fields item, price and quantity.\n\n{t}",
        "Convert this list to CSV with a header row.\n\n{t}",
        "{t}\n\nWhich of these items are sold out, and which is the most expensive? Use only the list.",
        "Sort the items in this list by price, from cheapest to most expensive, and keep the same format.\n\n{t}",
    )),
    "notes": (_notes, (
        "Extract the action items from these notes as a checklist, with the person responsible for each.\n\n{t}",
        "Rewrite these meeting notes as a short, clear email to the whole team.\n\n{t}",
        "{t}\n\nWho has to do what, and by when? Answer in a table.",
    )),
    "blunt": (_blunt, (
        "Rewrite this message so it sounds polite and professional, but keep the request clear.\n\n{t}",
        "Soften the tone of the following message without changing what it asks for.\n\n{t}",
        "{t}\n\nRewrite the message above as a courteous email, with a greeting and a sign-off.",
    )),
}


_SWAPS = {"their": "there", "its": "it's", "than": "then", "affect": "effect", "your": "you're", "to": "too",
          "which": "witch", "whose": "who's", "lose": "loose", "were": "where"}


def add_typos(text: str, rng: random.Random, k: int = 4) -> str:
    """``text`` with about ``k`` spelling or grammar mistakes (swapped or doubled letters, a
    dropped letter, commonly confused words), always at least one."""
    words = text.split(" ")
    spots = [i for i, w in enumerate(words) if re.fullmatch(r"[a-z]{4,}[.,]?", w) or w in _SWAPS]
    for i in rng.sample(spots, min(k, len(spots))):
        w = words[i]
        if w in _SWAPS:
            words[i] = _SWAPS[w]
            continue
        core, tail = (w[:-1], w[-1]) if w[-1] in ".," else (w, "")
        j = rng.randrange(1, len(core) - 1)
        op = rng.randrange(3)
        if op == 0:
            core = core[:j] + core[j + 1] + core[j] + core[j + 2:]
        elif op == 1:
            core = core[:j] + core[j + 1:]
        else:
            core = core[:j] + core[j] + core[j:]
        words[i] = core + tail
    out = " ".join(words)
    if out == text:
        out = text.replace(" the ", " teh ", 1) if " the " in text else text + " Thanks you."
    return out


def grounded(src: Sources, rng: random.Random, n: int) -> list[Candidate]:
    """Edit / rewrite / extract tasks over a text given in the prompt: fix mistakes, change the
    style, pull out terms, names, dates or numbers, convert to JSON, CSV or a table."""
    pool = src.passages(40, 150)
    pq = _cycle(pool, rng, n)
    out = []
    for i in range(n):
        r = rng.random()
        if r < 0.35 and pq:
            p = pq[i]
            if rng.random() < 0.4:
                out.append(Candidate(p.source, rng.choice(_TYPO_TASKS).format(t=add_typos(p.text, rng, rng.randint(3, 6)))))
            elif rng.random() < 0.5:
                out.append(Candidate(p.source, rng.choice(_REWRITE_TASKS).format(t=p.text)))
            else:
                out.append(Candidate(p.source, rng.choice(_EXTRACT_TASKS).format(t=p.text)))
        elif r < 0.5:
            source, t = everyday_text(rng)
            task = rng.choice(("Rewrite this note in a formal register:\n\n{t}",
                               "Correct any mistakes in this message and return it:\n\n{t}",
                               "Rewrite this message in the past tense, as if it happened last week:\n\n{t}",
                               "Extract every time, day and place mentioned in this note as a list.\n\n{t}"))
            if "mistakes" in task:
                t = add_typos(t, rng, 2)
            out.append(Candidate(source.replace("everyday:", "everyday-edit:"), task.format(t=t)))
        else:
            kind = rng.choice(sorted(_SYNTHETIC))
            make, tasks = _SYNTHETIC[kind]
            j = rng.randrange(len(tasks))
            out.append(Candidate(f"synthetic:{kind}-t{j}", tasks[j].format(t=make(rng))))
    return out


FAMILIES: dict[str, Callable[[Sources, random.Random, int], list[Candidate]]] = {
    "chat": chat,
    "qa": qa,
    "summarization": summarization,
    "translation": translation,
    "math": math,
    "rag": rag,
    "code": code,
    "grounded": grounded,
}
