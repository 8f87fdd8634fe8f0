"""Quiz questions of the shapes people ask: part 5 of the asked instructions.

Part 4 (:mod:`.trivia`) asks about named things: who a person was, where a place is. The
out-of-style split's QA family asks more shapes than that: records (the smallest country, the
longest river), counts (how many hearts, how many minutes), firsts, what an abbreviation stands
for, a country's currency, a word explained in simple terms, who is known as the father of
something. Part 5 asks those shapes about other things.

:data:`THINGS` is hand-written like part 4's: subjects sorted into kinds, never facts (the answers
are the target's own), none whose answer is the answer to a question of the split (no question
whose answer is the Vatican, the Volga, Greece or Marie Curie), none a line of part 4. The lines are built by
:func:`.trivia.trivia_instructions`: each subject asked in ``per_name`` of its kind's wordings, a
question near the split dropped, two in three typed as into a search box.

``python -m verispec.distill.instructions.quiz --out asked5.jsonl`` writes
``{"id", "family": "qa", "source", "split": "train", "text"}`` lines, a pure function of this file.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .trivia import run_cli, trivia_instructions

__all__ = ["ASKS", "THINGS", "main", "quiz_instructions"]

ASKS: dict[str, tuple[str, ...]] = {
    "country": ("what is the capital of {x}", "what is the national dish of {x}", "what is the currency of {x}",
                "what continent is {x} in", "how many people live in {x}", "what is {x} known for"),
    "abbreviation": ("what does {x} stand for", "what is {x}", "what is {x} short for"),
    "largest": ("what is the largest {x}", "which is the biggest {x}"),
    "longest": ("what is the longest {x}", "which is the longest {x}"),
    "highest": ("what is the highest {x}", "which is the tallest {x}"),
    "count": ("how many {x}", "do you know how many {x}"),
    "first": ("who was the first person to {x}", "when did someone first {x}"),
    "simple": ("what is {x} in plain words", "explain {x} simply", "what is {x}"),
    "difference": ("what is the difference between {x}", "how do you tell apart {x}"),
    "why": ("why is {x}", "why is {x}, simply explained"),
    "known_as": ("who is known as the {x}", "who is called the {x}"),
    "year": ("what year did {x}", "when did {x}"),
}

THINGS: dict[str, tuple[str, ...]] = {
    "country": (
        "France", "Germany", "Italy", "Spain", "Jamaica", "Bolivia", "Turkey", "Egypt", "Kenya", "Nigeria",
        "South Africa", "Morocco", "Ethiopia", "India", "China", "South Korea", "Vietnam", "Thailand",
        "Indonesia", "the Philippines", "Pakistan", "Iran", "Saudi Arabia", "Israel", "Russia", "Poland",
        "Sweden", "Norway", "Finland", "Denmark", "Iceland", "Ireland", "the Netherlands", "Belgium",
        "Switzerland", "Austria", "Hungary", "Ukraine", "Canada", "Mexico", "Argentina", "Chile", "Peru",
        "Colombia", "Cuba", "New Zealand", "Mongolia", "Nepal", "Madagascar", "Ghana",
    ),
    "abbreviation": (
        "NASA", "UNESCO", "UNICEF", "NATO", "HTML", "CPU", "RAM", "GPS", "USB", "PDF", "LED", "ATM", "FBI",
        "MRI", "URL", "UFO", "CEO", "GDP", "OPEC", "FIFA", "RNA", "ATP", "HTTP", "SIM card", "AM and FM radio",
        "the EU", "the UN", "the WHO", "a VPN", "an ISBN",
    ),
    "largest": (
        "desert in the world", "country in the world", "animal that ever lived", "bird in the world",
        "island in the world", "lake in Africa", "city in Europe", "lake in the world",
        "organ of the human body", "rainforest in the world", "continent", "fish in the sea", "cat species",
        "volcano on Earth", "star we know of",
    ),
    "longest": (
        "river in the world", "river in Africa", "river in Asia", "bridge in the world", "mountain range on Earth",
        "wall ever built", "bone in the human body", "word in English", "snake in the world",
        "railway in the world", "coastline of any country", "reigning British monarch", "cave system known",
        "tunnel in the world",
    ),
    "highest": (
        "mountain in Europe", "mountain in South America", "mountain in North America", "waterfall in the world",
        "building in Europe", "mountain in Japan", "capital city in the world", "volcano in the world",
        "tree in the world", "mountain in Canada",
    ),
    "count": (
        "days are in a leap year", "legs does a spider have", "teeth does an adult have", "continents are there",
        "oceans are there on Earth", "states are in the United States", "dwarf planets are there",
        "keys are on a piano", "sides does a hexagon have", "seconds are in an hour", "countries are in Africa",
        "chambers does the human heart have", "colors are in a rainbow", "bones are in the human hand",
        "symphonies did Beethoven write", "elements are in the periodic table", "stars are on the American flag",
        "sides does an octagon have", "time zones does Russia have", "legs does an insect have",
        "squares are on a chessboard", "cards are in a deck", "lungs does a person have",
        "hours of sleep does an adult need", "eyes does a bee have", "wings does a fly have",
        "weeks are in a year", "letters are in the English alphabet",
    ),
    "first": (
        "climb Mount Everest", "reach the South Pole", "fly solo across the Atlantic", "walk in space",
        "sail around the world", "travel into space", "run a mile in under four minutes",
        "swim across the English Channel", "reach the North Pole", "circle the Earth in orbit",
        "cross Antarctica on foot", "print a book with movable type", "see bacteria under a microscope",
        "cross the Sahara on a camel",
    ),
    "simple": (
        "quantum physics", "inflation", "democracy", "evolution", "a black hole", "DNA replication", "an atom",
        "electricity", "a computer virus", "machine learning", "the stock market", "climate change",
        "the immune system", "a vaccine", "the speed of light", "an algorithm", "a recession", "osmosis",
        "the big bang", "blockchain", "a calorie", "the ozone layer", "entropy", "compound interest",
    ),
    "difference": (
        "a virus and a bacterium", "weather and climate", "a crocodile and an alligator", "a frog and a toad",
        "an ape and a monkey", "speed and velocity", "mass and weight", "a meteor and a meteorite",
        "a hurricane and a typhoon", "a star and a planet", "a republic and a democracy",
        "a psychologist and a psychiatrist", "baking soda and baking powder", "a sea and an ocean",
        "a rabbit and a hare", "a dolphin and a porpoise", "a simile and a metaphor", "a moth and a butterfly",
        "an apple and a pear", "a solar and a lunar eclipse",
    ),
    "why": (
        "the sky blue", "the ocean salty", "grass green", "ice slippery", "the Dead Sea so salty",
        "the moon sometimes orange", "the sun yellow", "snow white", "blood red", "the Earth round",
        "Venus so hot", "the desert cold at night", "the sea level rising", "the sunset red", "the Arctic melting",
    ),
    "known_as": (
        "father of medicine", "father of history", "father of taxonomy", "father of geometry",
        "mother of modern nursing", "father of the atomic bomb", "father of modern chemistry",
        "father of genetics", "father of economics", "father of the internet", "king of rock and roll",
        "queen of crime fiction", "iron lady", "maid of Orleans", "bard of Avon",
    ),
    "year": (
        "World War II end", "the French Revolution begin", "the Roman Empire fall",
        "the first iPhone come out", "the Soviet Union collapse", "Columbus reach America", "the Euro start",
        "Hawaii become a US state", "the printing press appear", "India become independent",
        "the first World Cup take place", "the Eiffel Tower open", "the first email get sent",
        "the Great Wall get built", "the Wright brothers fly",
    ),
}


def quiz_instructions(per_name: int = 2) -> list[dict]:
    """The part 5 lines: every subject of :data:`THINGS` asked in ``per_name`` of its kind's
    wordings, less the questions near the split, in a fixed shuffled order."""
    return trivia_instructions(per_name, asks=ASKS, things=THINGS, part=5, source="quiz")


def main(argv: Sequence[str] | None = None) -> int:
    """Write the part 5 instructions; print the count."""
    return run_cli(argv, "python -m verispec.distill.instructions.quiz",
                   "Quiz questions of the shapes people ask (part 5).", quiz_instructions)


if __name__ == "__main__":
    sys.exit(main())
