"""Closed-book questions about well-known things: part 4 of the asked instructions.

The out-of-style split's QA family asks about well-known things (who painted, how many, when did,
what causes). Parts 1-3 of :mod:`.asked` ask trivia about what installed files list (time-zone
cities, pictographs, ISO regions, units): a narrower and odder world than people's questions, and
the head trained on them is accepted least in QA. Part 4 asks about the people, works, places,
animals, elements, inventions and phenomena a general-knowledge quiz asks about.

:data:`THINGS` is hand-written: names sorted into kinds, never facts (the answers are the target's
own), and none the answer to a question of the split (no Leonardo, no Jupiter, no Titanic). Each
kind has its own question wordings; each name is asked in two of them, chosen by a stable key.
Every question is then checked against the split: one that holds most of a split question's
content words is dropped (:func:`near_split`). Two questions in three are written as typed into a
search box (:func:`searchbox`), as the split's QA family mostly is.

``python -m verispec.distill.instructions.trivia --out asked4.jsonl`` writes
``{"id", "family": "qa", "source", "split": "train", "text"}`` lines, a pure function of this file.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ...workloads.outofstyle import stable_key
from ...workloads.outofstyle_text import QA_QUESTIONS
from .build import Instruction, write_jsonl

__all__ = ["ASKS", "THINGS", "content_words", "main", "near_split", "run_cli", "searchbox", "trivia_instructions"]

ASKS: dict[str, tuple[str, ...]] = {
    "person": ("who was {x}", "what is {x} famous for", "when was {x} born", "where was {x} born",
               "what did {x} do", "why is {x} important"),
    "work": ("who wrote {x}", "what is {x} about", "when was {x} written", "who is the main character in {x}"),
    "place": ("where is {x}", "when was {x} built", "who built {x}", "how tall is {x}", "why is {x} famous"),
    "animal": ("how long does a {x} live", "what does a {x} eat", "where does the {x} live", "how big is a {x}",
               "how fast can a {x} run", "is the {x} endangered"),
    "element": ("what is the chemical symbol for {x}", "what is the atomic number of {x}", "what is {x} used for",
                "is {x} a metal", "who discovered {x}"),
    "invention": ("who invented the {x}", "when was the {x} invented", "how does a {x} work",
                  "what was the first {x}"),
    "nature": ("what causes {x}", "what is {x}", "how does {x} work", "why does {x} happen"),
    "body": ("what does the {x} do", "where is the {x} in the body", "how big is the {x}",
             "what is the {x} made of"),
    "sky": ("how far is {x} from the sun", "how many moons does {x} have", "what is {x} made of",
            "how big is {x}", "how long is a year on {x}"),
    "event": ("when did {x} happen", "what caused {x}", "how long did {x} last", "who was involved in {x}"),
    "city": ("what country is {x} in", "what is {x} famous for", "how many people live in {x}",
             "what language do people speak in {x}", "when was {x} founded"),
    "food": ("where does {x} come from", "what is {x} made of", "what is the main ingredient in {x}",
             "how is {x} made"),
    "sport": ("how many players are on a {x} team", "where did {x} originate", "how do you score in {x}",
              "how long is a game of {x}"),
    "instrument": ("how many strings does a {x} have", "how do you play the {x}", "what family of instruments is the {x} in",
                   "who invented the {x}"),
}

THINGS: dict[str, tuple[str, ...]] = {
    "person": (
        "Isaac Newton", "Galileo Galilei", "Charles Darwin", "Nikola Tesla", "Thomas Edison", "Ada Lovelace",
        "Alan Turing", "Louis Pasteur", "Gregor Mendel", "Johannes Kepler", "Nicolaus Copernicus", "Michael Faraday",
        "Rosalind Franklin", "Stephen Hawking", "Archimedes", "Aristotle", "Plato", "Socrates", "Confucius",
        "Julius Caesar", "Cleopatra", "Napoleon Bonaparte", "Alexander the Great", "Genghis Khan", "Queen Victoria",
        "Abraham Lincoln", "George Washington", "Winston Churchill", "Mahatma Gandhi", "Nelson Mandela",
        "Martin Luther King Jr.", "Christopher Columbus", "Marco Polo", "Ferdinand Magellan", "Vasco da Gama",
        "Amelia Earhart", "the Wright brothers", "Vincent van Gogh", "Pablo Picasso", "Claude Monet", "Rembrandt",
        "Michelangelo", "Frida Kahlo", "Salvador Dali", "Johannes Vermeer", "Wolfgang Amadeus Mozart",
        "Ludwig van Beethoven", "Johann Sebastian Bach", "Frederic Chopin", "Pyotr Tchaikovsky", "William Shakespeare",
        "Charles Dickens", "Mark Twain", "Leo Tolstoy", "Homer", "Dante Alighieri", "Miguel de Cervantes",
        "Agatha Christie", "Elvis Presley", "the Beatles", "Florence Nightingale", "Joan of Arc", "Hippocrates",
        "Pythagoras", "Euclid", "Leonhard Euler", "Carl Linnaeus", "Dmitri Mendeleev", "Sigmund Freud",
    ),
    "work": (
        "Hamlet", "Romeo and Juliet", "Macbeth", "Don Quixote", "War and Peace", "Moby-Dick", "the Odyssey",
        "the Iliad", "Great Expectations", "Oliver Twist", "Frankenstein", "Dracula", "1984", "Animal Farm",
        "The Great Gatsby", "To Kill a Mockingbird", "The Hobbit", "Alice's Adventures in Wonderland",
        "The Adventures of Tom Sawyer", "Les Miserables", "Crime and Punishment", "The Divine Comedy",
        "The Origin of Species", "Gulliver's Travels", "Robinson Crusoe", "Treasure Island", "Jane Eyre",
        "Wuthering Heights", "The Little Prince", "Anne of Green Gables",
    ),
    "place": (
        "the Eiffel Tower", "the Colosseum", "the Great Wall of China", "the Taj Mahal", "Machu Picchu",
        "the Statue of Liberty", "Big Ben", "Stonehenge", "the Parthenon", "the Leaning Tower of Pisa",
        "the Sydney Opera House", "the Golden Gate Bridge", "Mount Rushmore", "the Kremlin", "Angkor Wat",
        "Petra", "Chichen Itza", "the Alhambra", "the Burj Khalifa", "the Empire State Building",
        "Buckingham Palace", "the Louvre", "Notre-Dame de Paris", "the Forbidden City", "the Sagrada Familia",
        "Neuschwanstein Castle", "the Panama Canal", "the Suez Canal", "Niagara Falls", "the Grand Canyon",
        "Mount Everest", "the Sahara Desert", "the Amazon rainforest", "Yellowstone National Park",
        "the Dead Sea", "Lake Baikal", "Victoria Falls", "the Galapagos Islands", "Mount Fuji", "the Alps",
    ),
    "animal": (
        "cheetah", "elephant", "giraffe", "blue whale", "dolphin", "polar bear", "penguin", "kangaroo", "koala",
        "panda", "tiger", "lion", "wolf", "gorilla", "chimpanzee", "hippopotamus", "rhinoceros", "zebra", "camel",
        "crocodile", "sea turtle", "shark", "bald eagle", "owl", "hummingbird", "honeybee", "ant", "butterfly",
        "bat", "sloth", "platypus", "ostrich", "peacock", "jellyfish", "starfish", "salmon", "frog", "snail",
        "horse", "cow",
    ),
    "element": (
        "gold", "silver", "copper", "oxygen", "hydrogen", "helium", "carbon", "nitrogen", "sodium", "potassium",
        "calcium", "aluminium", "uranium", "mercury", "lead", "zinc", "tin", "neon", "chlorine", "sulfur",
        "platinum", "titanium", "lithium", "silicon", "magnesium", "radium", "plutonium", "tungsten",
    ),
    "invention": (
        "light bulb", "printing press", "steam engine", "airplane", "radio", "television", "computer", "internet",
        "camera", "microscope", "telescope", "bicycle", "car", "compass", "clock", "battery", "refrigerator",
        "typewriter", "sewing machine", "vaccine", "x-ray machine", "phonograph", "jet engine", "helicopter",
        "paper", "wheel", "lightning rod", "barometer",
    ),
    "nature": (
        "rainbows", "thunder", "lightning", "earthquakes", "volcanic eruptions", "hurricanes", "tornadoes",
        "the northern lights", "the seasons", "day and night", "wind", "rain", "snow", "fog", "erosion",
        "a solar eclipse", "a lunar eclipse", "global warming", "the greenhouse effect", "evaporation",
        "magnetism", "gravity", "rust", "fermentation", "tsunamis", "the water cycle", "static electricity",
        "echoes",
    ),
    "body": (
        "heart", "liver", "kidney", "lungs", "brain", "stomach", "pancreas", "spleen", "skin", "small intestine",
        "appendix", "thyroid", "spinal cord", "retina", "eardrum", "tongue", "red blood cells", "white blood cells",
        "femur", "gallbladder",
    ),
    "sky": ("Mercury", "Venus", "Saturn", "Uranus", "Neptune", "Pluto", "the Sun", "Halley's Comet",
            "the Milky Way", "the Andromeda Galaxy", "Sirius", "Polaris", "the asteroid belt", "Ceres"),
    "event": (
        "the French Revolution", "the American Revolution", "the Industrial Revolution", "the Renaissance",
        "the Black Death", "the fall of the Roman Empire", "the Battle of Waterloo", "the Battle of Hastings",
        "World War I", "World War II", "the Great Depression", "the Cold War", "the Russian Revolution",
        "the signing of the Magna Carta", "the California Gold Rush", "the Reformation", "the Crusades",
        "the Apollo 13 mission", "the discovery of America", "the Boston Tea Party", "the American Civil War",
        "the Chernobyl disaster", "the Great Fire of London", "the eruption of Vesuvius",
    ),
    "city": (
        "Paris", "London", "Rome", "Tokyo", "New York City", "Cairo", "Istanbul", "Moscow", "Beijing", "Mumbai",
        "Rio de Janeiro", "Buenos Aires", "Mexico City", "Toronto", "Sydney", "Athens", "Venice", "Amsterdam",
        "Vienna", "Prague", "Barcelona", "Dubai", "Singapore", "Bangkok", "Nairobi", "Lisbon", "Stockholm",
        "Kyoto", "Jerusalem", "Havana",
    ),
    "food": (
        "sushi", "pizza", "pasta", "chocolate", "cheese", "bread", "tofu", "hummus", "paella", "kimchi",
        "croissants", "tea", "coffee", "wine", "beer", "butter", "yogurt", "honey", "maple syrup", "ketchup",
        "mayonnaise", "curry", "tortillas", "falafel",
    ),
    "sport": ("basketball", "baseball", "volleyball", "rugby", "cricket", "ice hockey", "tennis", "golf",
              "handball", "water polo", "badminton", "table tennis", "American football", "lacrosse"),
    "instrument": ("violin", "cello", "piano", "harp", "ukulele", "banjo", "double bass", "sitar", "mandolin",
                   "flute", "saxophone", "drum", "bagpipes", "harpsichord"),
}

_WORDS = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an the of in on at to for from by with and or is are was were be been do does did what who whom whose "
    "which when where why how many much long far old there their this that these those it its into about as "
    "called known name first most one can could would will you".split())


def content_words(text: str) -> frozenset[str]:
    """The lower-cased words of ``text`` that are not question or function words."""
    return frozenset(w for w in _WORDS.findall(text.lower()) if w not in _STOP)


def near_split(question: str, split: Iterable[str] = QA_QUESTIONS, share: float = 0.6) -> bool:
    """Whether ``question`` holds at least ``share`` of some split question's content words (and
    two or more of them, or its only one): "who wrote pride and prejudice, and when" is near
    "who wrote pride and prejudice"."""
    words = content_words(question)
    for s in split:
        theirs = content_words(s)
        common = len(words & theirs)
        if theirs and common >= min(2, len(theirs)) and common >= share * len(theirs):
            return True
    return False


def searchbox(question: str, key: str) -> str:
    """``question`` as typed into a search box (lower-case, no question mark) for two keys in three,
    a stable function of ``key``; the third is capitalised with a question mark."""
    question = question.rstrip("?").rstrip()
    if int(stable_key("trivia-case", key)[:8], 16) % 3:
        return question.lower()
    return question[:1].upper() + question[1:] + "?"


def trivia_instructions(per_name: int = 2, asks: dict[str, tuple[str, ...]] | None = None,
                        things: dict[str, tuple[str, ...]] | None = None, part: int = 4,
                        source: str = "trivia") -> list[dict]:
    """The part ``part`` lines: every name of ``things`` (default :data:`THINGS`) asked in
    ``per_name`` of its kind's wordings in ``asks`` (default :data:`ASKS`), less the questions near
    the split, in a fixed shuffled order; ids ``asked{part}-NNNNN``, sources ``{source}:{kind}``."""
    if per_name < 1:
        raise ValueError(f"per_name must be positive, got {per_name}")
    asks, things = asks or ASKS, things or THINGS
    rows = []
    for kind, names in things.items():
        wordings = asks[kind]
        for name in names:
            start = int(stable_key("trivia-ask", kind, name)[:8], 16) % len(wordings)
            for j in range(min(per_name, len(wordings))):
                question = wordings[(start + j) % len(wordings)].format(x=name)
                if not near_split(question):
                    rows.append((kind, searchbox(question, question)))
    rows.sort(key=lambda r: stable_key("trivia-order", r[1]))
    return [{"id": f"asked{part}-{i:05d}", "family": "qa", "source": f"{source}:{kind}", "split": "train",
             "text": text} for i, (kind, text) in enumerate(rows)]


def run_cli(argv: Sequence[str] | None, prog: str, description: str,
            build: Callable[[int], list[dict]]) -> int:
    """The command of a part: ``--out FILE [--per-name N]``; writes ``build(N)``, prints the count."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--out", required=True, help="output .jsonl file (its folder must exist)")
    parser.add_argument("--per-name", type=int, default=2, help="wordings asked of each name (default 2)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.is_dir() or not out.parent.is_dir():
        parser.error(f"--out {str(out)!r}: give a file name in an existing folder")
    if args.per_name < 1:
        parser.error(f"--per-name must be positive, got {args.per_name}")
    lines = build(args.per_name)
    write_jsonl((Instruction(**d) for d in lines), out)
    print(f"{len(lines)} instructions -> {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Write the part 4 instructions; print the count."""
    return run_cli(argv, "python -m verispec.distill.instructions.trivia",
                   "Closed-book questions about well-known things (part 4).", trivia_instructions)


if __name__ == "__main__":
    sys.exit(main())
