"""More closed-book questions about well-known things: part 7 of the asked instructions.

Parts 4 and 5 (:mod:`.trivia`, :mod:`.quiz`) ask about 650 hand-written names and moved the head's
QA family more than any other data; part 6 (:mod:`.vocabnames`) asks about 1,714 names taken from
the tokenizer and moved it a quarter as much per answer (many of those names are obscure, and the
target's answers about them are thin). Where the head misses in the split's QA answers is mostly
where an answer names something the target knows and the head does not (a name's second token, a
date, a place), so part 7 asks about 764 more well-known things, none a name of parts 4 and 5: people,
works, paintings and pieces of music, places, animals, elements, inventions, phenomena, organs,
planets and stars, events, cities, foods, games and sports, instruments and countries.

:data:`THINGS` is hand-written as part 4's is: names sorted into kinds, never facts (the answers
are the target's own), none the answer to a question of the split nor a subject whose answers lead
there (no Jupiter's moons, no Berlin, no Austen). Part 4's kinds keep part 4's wordings; the kinds
new here (paintings, music, stars, games, countries) have their own, and countries part 5's. The
lines are built by :func:`.trivia.trivia_instructions`: each name asked in ``per_name`` of its
kind's wordings, a question near the split dropped, two in three typed as into a search box.

``python -m verispec.distill.instructions.famous --out asked7.jsonl`` writes
``{"id", "family": "qa", "source", "split": "train", "text"}`` lines, a pure function of this file.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from . import quiz, trivia
from .trivia import run_cli, trivia_instructions

__all__ = ["ASKS", "THINGS", "famous_instructions", "main"]

ASKS: dict[str, tuple[str, ...]] = {
    **{k: trivia.ASKS[k] for k in ("person", "work", "place", "animal", "element", "invention", "nature", "body",
                                   "sky", "event", "city", "food", "instrument")},
    "painting": ("who painted {x}", "where can I see {x}", "what does {x} show", "when was {x} painted",
                 "why is {x} famous"),
    "music": ("who composed {x}", "when was {x} written", "what is {x} about", "why is {x} famous"),
    "star": ("how far away is {x}", "what kind of star is {x}", "where is {x} in the night sky",
             "how bright is {x}"),
    "game": ("what are the rules of {x}", "where did {x} come from", "how do you win at {x}",
             "when was {x} invented", "how popular is {x}"),
    "country": quiz.ASKS["country"],
}

THINGS: dict[str, tuple[str, ...]] = {
    "person": (
        "Benjamin Franklin", "James Watt", "Max Planck", "Niels Bohr", "Ernest Rutherford", "James Clerk Maxwell",
        "Richard Feynman", "Enrico Fermi", "Werner Heisenberg", "Erwin Schrodinger", "Edwin Hubble", "Carl Sagan",
        "Jane Goodall", "Rachel Carson", "Tim Berners-Lee", "Grace Hopper", "John von Neumann", "Blaise Pascal",
        "Rene Descartes", "Immanuel Kant", "Friedrich Nietzsche", "Karl Marx", "Adam Smith", "John Locke",
        "Voltaire", "Jean-Jacques Rousseau", "Thomas Jefferson", "Theodore Roosevelt", "Franklin D. Roosevelt",
        "John F. Kennedy", "Queen Elizabeth I", "Henry VIII", "Louis XIV", "Peter the Great",
        "Catherine the Great", "Charlemagne", "Attila the Hun", "Hannibal", "Augustus", "Nero", "Ramses II",
        "Tutankhamun", "Saladin", "Simon Bolivar", "Otto von Bismarck", "Mao Zedong", "Vladimir Lenin",
        "James Cook", "Ernest Shackleton", "Roald Amundsen", "Hernan Cortes", "Francis Drake", "Zheng He",
        "Ibn Battuta", "Leif Erikson", "Yuri Gagarin", "Edmund Hillary", "Raphael", "Donatello",
        "Sandro Botticelli", "Caravaggio", "Diego Velazquez", "Francisco Goya", "Edgar Degas",
        "Pierre-Auguste Renoir", "Paul Cezanne", "Henri Matisse", "Gustav Klimt", "Edvard Munch", "Andy Warhol",
        "Jackson Pollock", "Georgia O'Keeffe", "Katsushika Hokusai", "Auguste Rodin", "Franz Schubert",
        "George Frideric Handel", "Joseph Haydn", "Richard Wagner", "Giuseppe Verdi", "Giacomo Puccini",
        "Claude Debussy", "Igor Stravinsky", "Antonin Dvorak", "Franz Liszt", "Johannes Brahms", "Bob Dylan",
        "Michael Jackson", "Frank Sinatra", "Ella Fitzgerald", "Bob Marley", "Freddie Mercury", "David Bowie",
        "John Lennon", "Victor Hugo", "Jules Verne", "Alexandre Dumas", "Fyodor Dostoevsky", "Anton Chekhov",
        "Franz Kafka", "Ernest Hemingway", "F. Scott Fitzgerald", "George Orwell", "Virginia Woolf",
        "Charlotte Bronte", "Emily Dickinson", "Edgar Allan Poe", "Oscar Wilde", "J. R. R. Tolkien",
        "C. S. Lewis", "Lewis Carroll", "Hans Christian Andersen", "the Brothers Grimm", "Geoffrey Chaucer",
        "John Milton", "Johann Wolfgang von Goethe", "Gabriel Garcia Marquez", "Rabindranath Tagore",
        "Arthur Conan Doyle", "H. G. Wells", "Mary Shelley", "Walt Whitman", "Robert Frost", "Muhammad Ali",
        "Pele", "Michael Jordan", "Usain Bolt", "Serena Williams", "Babe Ruth", "Jesse Owens", "Diego Maradona",
        "Roger Federer", "Michael Phelps", "Walt Disney", "Henry Ford", "Steve Jobs", "Bill Gates",
        "Alfred Hitchcock", "Charlie Chaplin", "Marilyn Monroe", "Coco Chanel", "Sun Tzu",
    ),
    "work": (
        "The Catcher in the Rye", "Brave New World", "Fahrenheit 451", "Lord of the Flies", "Of Mice and Men",
        "The Grapes of Wrath", "The Old Man and the Sea", "Little Women", "The Scarlet Letter",
        "Uncle Tom's Cabin", "Heart of Darkness", "The Picture of Dorian Gray", "A Christmas Carol",
        "A Tale of Two Cities", "David Copperfield", "The Three Musketeers", "The Count of Monte Cristo",
        "Twenty Thousand Leagues Under the Seas", "Around the World in Eighty Days", "The Time Machine",
        "The War of the Worlds", "The Jungle Book", "Peter Pan", "The Wind in the Willows", "Anna Karenina",
        "The Brothers Karamazov", "The Metamorphosis", "One Hundred Years of Solitude", "The Lord of the Rings",
        "The Chronicles of Narnia", "Charlotte's Web", "The Canterbury Tales", "Paradise Lost", "Faust",
        "the Aeneid", "Beowulf", "the Epic of Gilgamesh", "The Art of War", "The Prince", "Othello",
        "King Lear", "A Midsummer Night's Dream", "The Tempest", "The Call of the Wild",
    ),
    "painting": (
        "The Starry Night", "The Scream", "Girl with a Pearl Earring", "The Night Watch", "Guernica",
        "The Birth of Venus", "The Persistence of Memory", "The Kiss by Klimt", "Water Lilies", "American Gothic",
        "The Great Wave off Kanagawa", "Sunflowers", "Las Meninas", "The Garden of Earthly Delights",
        "Liberty Leading the People", "The Creation of Adam", "Impression, Sunrise", "Nighthawks",
        "The School of Athens", "Campbell's Soup Cans",
    ),
    "music": (
        "Swan Lake", "The Nutcracker", "The Magic Flute", "the Moonlight Sonata", "Eine kleine Nachtmusik",
        "The Blue Danube", "Bolero", "The Rite of Spring", "Carmen", "La Traviata", "Ride of the Valkyries",
        "Canon in D", "Handel's Messiah", "Clair de Lune", "Ode to Joy", "The Barber of Seville",
        "the New World Symphony", "Rhapsody in Blue", "The Planets suite", "Madama Butterfly",
    ),
    "place": (
        "the Pyramids of Giza", "the Great Sphinx", "the Brandenburg Gate", "the Arc de Triomphe",
        "the Tower of London", "Westminster Abbey", "the Pantheon in Rome", "the Trevi Fountain", "Hagia Sophia",
        "the Blue Mosque", "Mont Saint-Michel", "the Palace of Versailles", "the Matterhorn", "Mont Blanc",
        "the Rock of Gibraltar", "Table Mountain", "the CN Tower", "the Space Needle", "the Hollywood Sign",
        "Times Square", "Central Park", "the Alamo", "the White House", "the Lincoln Memorial", "Alcatraz",
        "the Hoover Dam", "Mount Vesuvius", "Mount Etna", "Lake Titicaca", "Lake Victoria", "the Atacama Desert",
        "the Gobi Desert", "the Serengeti", "the Great Rift Valley", "the Dolomites", "Ha Long Bay",
        "the Terracotta Army", "the Potala Palace", "Borobudur", "the Golden Temple", "the Red Fort",
        "the Western Wall", "the Petronas Towers", "Christ the Redeemer", "Iguazu Falls", "Easter Island",
        "the Nazca Lines", "Tikal", "Teotihuacan", "the Acropolis", "Pompeii", "Loch Ness", "the Cliffs of Moher",
        "the Bay of Fundy", "Death Valley",
    ),
    "animal": (
        "leopard", "jaguar", "cougar", "lynx", "hyena", "meerkat", "armadillo", "anteater", "orangutan", "lemur",
        "walrus", "seal", "sea otter", "beaver", "raccoon", "skunk", "porcupine", "hedgehog", "badger", "moose",
        "reindeer", "bison", "yak", "llama", "alpaca", "donkey", "goat", "pig", "flamingo", "pelican",
        "albatross", "parrot", "crow", "swan", "woodpecker", "vulture", "peregrine falcon", "komodo dragon",
        "chameleon", "iguana", "king cobra", "rattlesnake", "alligator", "giant tortoise", "axolotl", "seahorse",
        "squid", "lobster", "crab", "clownfish", "manta ray", "killer whale", "humpback whale", "narwhal",
        "mosquito", "dragonfly", "ladybug", "scorpion", "earthworm", "termite",
    ),
    "element": (
        "nickel", "cobalt", "chromium", "manganese", "argon", "krypton", "xenon", "radon", "fluorine", "iodine",
        "bromine", "phosphorus", "boron", "beryllium", "arsenic", "bismuth", "cesium", "gallium", "germanium",
        "palladium", "iridium", "osmium", "thorium", "polonium", "neodymium", "cadmium", "vanadium", "selenium",
        "strontium", "barium",
    ),
    "invention": (
        "steam locomotive", "electric motor", "transistor", "laser", "smartphone", "washing machine",
        "vacuum cleaner", "air conditioner", "dishwasher", "microwave oven", "elevator", "escalator", "parachute",
        "submarine", "hot air balloon", "zipper", "safety pin", "ballpoint pen", "pencil", "eyeglasses",
        "thermometer", "stethoscope", "pacemaker", "dynamite", "barcode", "credit card", "calculator",
        "3D printer", "solar panel", "wind turbine", "nuclear reactor", "diesel engine", "rocket", "satellite",
        "telegraph", "radar", "sonar", "loudspeaker", "video game console", "digital camera",
    ),
    "nature": (
        "hail", "dew", "frost", "monsoons", "droughts", "floods", "avalanches", "landslides", "sandstorms",
        "geysers", "hot springs", "coral bleaching", "acid rain", "ocean currents", "the jet stream", "El Nino",
        "condensation", "sublimation", "combustion", "friction", "buoyancy", "refraction", "the Doppler effect",
        "radioactivity", "nuclear fusion", "plate tectonics", "continental drift", "the carbon cycle",
        "bioluminescence", "hibernation", "bird migration", "metamorphosis", "pollination", "decomposition",
        "sound waves", "ultraviolet light", "mirages", "shooting stars", "the phases of the moon", "sunburn",
    ),
    "body": (
        "large intestine", "bladder", "esophagus", "larynx", "trachea", "diaphragm", "cornea", "pupil", "iris",
        "cochlea", "hypothalamus", "pituitary gland", "adrenal glands", "tonsils", "lymph nodes", "bone marrow",
        "platelets", "cartilage", "tendons", "ligaments", "rib cage", "pelvis", "kneecap", "collarbone",
        "sweat glands", "fingernails", "tooth enamel", "cerebellum", "hippocampus", "neurons",
    ),
    "sky": ("the Moon", "Titan", "Enceladus", "Triton", "Charon", "Eris", "Makemake", "the Kuiper Belt",
            "the Oort Cloud", "the International Space Station", "the Hubble Space Telescope", "Comet Hale-Bopp"),
    "star": ("Betelgeuse", "Rigel", "Vega", "Alpha Centauri", "Proxima Centauri", "Arcturus", "Aldebaran",
             "Antares", "Canopus", "the Pleiades", "the Orion Nebula", "the Crab Nebula", "the Big Dipper",
             "Orion's Belt", "Cassiopeia"),
    "event": (
        "the Hundred Years' War", "the Thirty Years' War", "the Wars of the Roses", "the Norman Conquest",
        "the Spanish Armada", "the Glorious Revolution", "the Napoleonic Wars", "the Seven Years' War",
        "the War of 1812", "the Irish Potato Famine", "the Emancipation Proclamation", "the Meiji Restoration",
        "the Opium Wars", "the Boxer Rebellion", "the Treaty of Versailles", "the Spanish flu",
        "the Wall Street Crash of 1929", "D-Day", "the bombing of Hiroshima", "the Korean War", "the Vietnam War",
        "the Cuban Missile Crisis", "the Space Race", "the fall of Constantinople", "the Enlightenment",
        "the Age of Exploration", "the Trojan War", "the Peloponnesian War", "the Punic Wars",
        "the Battle of Thermopylae", "the Battle of Gettysburg", "the 2008 financial crisis",
        "the storming of the Bastille", "the Salem witch trials", "the Great Plague of London",
    ),
    "city": (
        "Madrid", "Milan", "Florence", "Naples", "Munich", "Hamburg", "Zurich", "Geneva", "Brussels",
        "Copenhagen", "Oslo", "Helsinki", "Dublin", "Edinburgh", "Budapest", "Warsaw", "Krakow",
        "St. Petersburg", "Seoul", "Shanghai", "Hong Kong", "Osaka", "Delhi", "Kolkata", "Karachi", "Tehran",
        "Baghdad", "Damascus", "Marrakesh", "Casablanca", "Cape Town", "Lagos", "Addis Ababa", "Los Angeles",
        "Chicago", "San Francisco", "Washington, D.C.", "Boston", "New Orleans", "Las Vegas", "Montreal",
        "Vancouver", "Lima", "Santiago", "Bogota",
    ),
    "food": (
        "ramen", "dumplings", "tacos", "burritos", "lasagna", "risotto", "pesto", "mozzarella", "parmesan",
        "feta", "baguettes", "pretzels", "bagels", "sauerkraut", "goulash", "borscht", "pierogi", "couscous",
        "tagine", "injera", "jollof rice", "biryani", "naan", "samosas", "pad thai", "pho", "dim sum",
        "miso soup", "tempura", "soy sauce", "vinegar", "mustard", "popcorn", "ice cream", "pancakes", "waffles",
        "peanut butter", "tiramisu", "baklava", "churros", "marzipan", "caviar", "olive oil", "quinoa",
        "oatmeal", "cider", "sake", "whisky", "vodka", "champagne",
    ),
    "game": (
        "chess", "checkers", "go", "backgammon", "poker", "bridge", "mahjong", "dominoes", "Monopoly",
        "Scrabble", "sudoku", "field hockey", "softball", "netball", "curling", "bowling", "squash", "fencing",
        "archery", "judo", "sumo wrestling", "Formula One", "the Tour de France", "snooker", "darts",
        "figure skating", "polo", "rock paper scissors",
    ),
    "instrument": (
        "viola", "clarinet", "oboe", "bassoon", "trombone", "tuba", "French horn", "accordion", "harmonica",
        "xylophone", "pipe organ", "synthesizer", "tambourine", "didgeridoo", "lute", "lyre", "balalaika",
        "bongo drums", "marimba", "piccolo", "recorder", "steel drum", "zither", "koto", "erhu", "oud", "kalimba",
    ),
    "country": (
        "the United Kingdom", "the United States", "Scotland", "Wales", "Czechia", "Slovakia", "Romania",
        "Bulgaria", "Serbia", "Croatia", "Slovenia", "Albania", "Estonia", "Latvia", "Lithuania", "Belarus",
        "Georgia", "Armenia", "Azerbaijan", "Kazakhstan", "Uzbekistan", "Afghanistan", "Iraq", "Syria", "Jordan",
        "Lebanon", "Qatar", "the United Arab Emirates", "Oman", "Yemen", "Bangladesh", "Sri Lanka", "Myanmar",
        "Cambodia", "Laos", "Malaysia", "North Korea", "Taiwan", "Bhutan", "the Maldives", "Algeria", "Tunisia",
        "Libya", "Sudan", "Tanzania", "Uganda", "Rwanda", "Senegal", "Mali", "Cameroon", "Angola", "Zimbabwe",
        "Zambia", "Botswana", "Namibia", "Mozambique", "Venezuela", "Ecuador", "Paraguay", "Uruguay",
        "Costa Rica", "Panama", "Guatemala", "Honduras", "Haiti", "the Dominican Republic", "Fiji",
        "Papua New Guinea", "Luxembourg", "Monaco", "Malta", "Cyprus",
    ),
}


def famous_instructions(per_name: int = 3) -> list[dict]:
    """The part 7 lines: every name of :data:`THINGS` asked in ``per_name`` of its kind's wordings,
    less the questions near the split, in a fixed shuffled order; ids ``asked7-NNNNN``."""
    return trivia_instructions(per_name, asks=ASKS, things=THINGS, part=7, source="famous")


def main(argv: Sequence[str] | None = None) -> int:
    """Write the part 7 instructions; print the count."""
    return run_cli(argv, "python -m verispec.distill.instructions.famous",
                   "More closed-book questions about well-known things (part 7).", famous_instructions)


if __name__ == "__main__":
    sys.exit(main())
