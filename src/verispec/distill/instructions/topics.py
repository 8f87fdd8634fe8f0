"""What people ask a chat assistant about: subjects and phrasings for open (``chat``) instructions,
plus the names, places and things the synthetic texts of other families are made of.

Each subject list goes with templates that fit its grammar (an activity is a gerund phrase that
completes "tips for ..."; a concept is a noun phrase that completes "explain ..."). The lists are
written for this corpus, independently of the benchmark prompts, and kept broad: everyday life,
work, health, science, history, technology, money, language, arts.
"""

from __future__ import annotations

__all__ = [
    "ACTIVITIES", "ACTIVITY_TEMPLATES", "ADVICE_TEMPLATES", "AUDIENCES", "CITIES", "COMPARE_TEMPLATES", "CONCEPTS",
    "CONCEPT_TEMPLATES", "DEBATES", "DEBATE_TEMPLATES", "EMAIL_PURPOSES", "EMAIL_TEMPLATES", "FIRST_NAMES",
    "LAST_NAMES", "LIST_TEMPLATES", "LIST_TOPICS", "PAIRS", "POEM_FORMS", "POEM_SUBJECTS", "PRODUCTS",
    "RECIPIENTS", "SITUATIONS", "STORY_CHARACTERS", "STORY_SETTINGS", "STORY_TEMPLATES", "STYLE_SUFFIXES",
    "TECH_TEMPLATES", "WEEKDAYS", "MONTHS", "WRITING_TASKS",
]

ACTIVITIES = (
    "learning to swim as an adult", "baking sourdough bread", "starting to run", "learning a second language",
    "saving for a holiday", "cooking for one person", "growing tomatoes on a balcony", "writing a personal budget",
    "meditating for the first time", "learning to draw", "keeping a journal", "training a puppy",
    "moving to a new city", "negotiating a salary", "giving a wedding speech", "studying for a driving test",
    "learning to touch type", "decluttering a small flat", "making friends as an adult", "getting up earlier",
    "reducing screen time", "cycling to work", "hosting a dinner party", "planning a camping trip",
    "learning chess", "writing a novel", "practising the piano", "brewing coffee with a French press",
    "painting a room", "fixing a leaking tap", "caring for a cat", "choosing running shoes", "starting a podcast",
    "learning to juggle", "travelling with a toddler", "packing for a long flight", "preparing a job application",
    "managing a remote team", "running an effective meeting", "writing a research paper", "learning SQL",
    "learning to code in Python", "building a personal website", "backing up family photos",
    "protecting an online account", "buying a used car", "renting a first apartment", "composting kitchen waste",
    "reducing food waste", "eating more vegetables", "drinking more water", "stretching after exercise",
    "learning to ski", "climbing at an indoor wall", "knitting a scarf", "making pizza dough", "grilling fish",
    "teaching a child to read", "helping a teenager with homework", "preparing for a marathon",
    "recovering after a long run", "learning to meditate with an app", "writing thank-you notes",
    "organising a bookshelf", "taking notes in lectures", "reading faster", "memorising vocabulary",
    "speaking up in meetings", "handling criticism at work", "asking for a promotion", "switching careers",
    "volunteering locally", "planning a garden", "keeping bees", "birdwatching", "stargazing in a city",
    "taking portrait photos", "editing a home video", "learning sign language", "practising calligraphy",
    "making candles", "baking gluten-free cakes", "cooking rice without a rice cooker", "sharpening kitchen knives",
    "cleaning a cast-iron pan", "ironing a shirt", "sewing on a button", "planning a week of meals",
    "shopping on a tight budget", "paying off a credit card", "investing for retirement",
    "filing taxes for the first time",
    "preparing for a power cut", "childproofing a home", "caring for an elderly parent", "walking a dog in hot weather",
    "learning to sail", "hiking in the mountains", "kayaking on a lake", "preparing for a job interview abroad",
    "writing a eulogy", "learning to dance salsa", "doing a digital detox", "keeping a plant alive in winter",
    "starting a book club", "organising a neighbourhood clean-up", "selling things online",
    "writing a product review", "learning to use a spreadsheet", "making a family tree",
    "learning basic first aid", "sleeping on a night train", "beating jet lag", "staying warm in a cold house",
)

ACTIVITY_TEMPLATES = (
    "What are the most useful tips for {a}?",
    "I'm interested in {a}. Where should I start?",
    "Give me a simple plan for {a} over the next four weeks.",
    "What mistakes do beginners usually make when {a}, and how can I avoid them?",
    "List the things I need before {a}.",
    "How can I stay motivated when {a} gets hard?",
    "Explain the first three steps of {a} for someone who has never tried it.",
    "What should I know about {a} before I spend any money on it?",
    "My friend wants to try {a}. What advice would you give them?",
    "How long does it usually take to get reasonably good at {a}?",
    "Write a short checklist for {a}.",
    "Is {a} expensive? Give me some ways to keep the cost down.",
    "What are the safety considerations for {a}?",
    "Can you break {a} into small daily habits?",
    "Tell me three surprising facts or lesser-known tips about {a}.",
    "I tried {a} once and gave up. What could I do differently this time?",
    "How would you explain the basics of {a} in under 100 words?",
    "What questions should I ask an expert about {a}?",
)

CONCEPTS = (
    "inflation", "compound interest", "photosynthesis", "the greenhouse effect", "plate tectonics", "black holes",
    "natural selection", "vaccines", "the immune system", "antibiotic resistance", "supply and demand",
    "opportunity cost", "the stock market", "index funds", "a mortgage", "credit scores", "blockchain",
    "machine learning", "neural networks", "encryption", "public-key cryptography", "a DNS lookup", "cloud computing",
    "an operating system", "virtual memory", "a compiler", "an API", "version control", "unit testing",
    "the Big O notation", "recursion in programming", "a database index", "a linked list", "garbage collection",
    "the Pythagorean theorem", "probability", "standard deviation", "the central limit theorem", "prime numbers",
    "the number pi", "exponential growth", "the speed of light", "gravity", "electric current", "magnetism",
    "nuclear fusion", "renewable energy", "solar panels", "wind turbines", "the water table", "erosion",
    "the ozone layer", "ocean currents", "tides", "the seasons", "lunar eclipses", "the Doppler effect",
    "sound waves", "rainbows", "DNA", "genes and heredity", "cells and mitochondria", "the human heart",
    "how muscles grow", "sleep cycles", "dopamine", "stress hormones", "the placebo effect", "cognitive biases",
    "confirmation bias", "the scientific method", "peer review", "democracy", "the separation of powers",
    "the Industrial Revolution", "the printing press", "the Renaissance", "the Silk Road", "the Roman Empire",
    "the French Revolution", "the Cold War", "the Space Race", "globalisation", "urbanisation", "minimum wage",
    "universal basic income", "trade deficits", "central banks", "interest rates", "taxes on income",
    "copyright", "open-source software", "net neutrality", "privacy by design", "two-factor authentication",
    "phishing", "a firewall", "Wi-Fi", "5G networks", "GPS", "how a touchscreen works", "how a refrigerator works",
    "how an electric car works", "how a jet engine flies", "how bread rises", "fermentation", "caffeine",
    "metabolism", "calories", "protein", "hydration", "posture", "mindfulness", "habit formation",
    "procrastination", "time management", "the Pomodoro technique", "active listening", "negotiation",
    "leadership", "emotional intelligence", "impostor syndrome", "critical thinking", "logical fallacies",
    "metaphors", "the passive voice", "haiku", "the sonnet", "perspective in drawing", "colour theory",
    "the rule of thirds", "jazz improvisation", "musical scales", "rhythm and tempo", "opera", "impressionism",
    "abstract art", "architecture in Gothic cathedrals", "biodiversity", "coral reefs", "rainforests",
    "desert ecosystems", "migration of birds", "how bees make honey", "volcanoes", "earthquakes", "hurricanes",
    "climate versus weather", "carbon footprints", "recycling plastic", "the circular economy", "composting",
    "the placebo and nocebo effects", "statistics in the news", "correlation and causation", "sampling bias",
    "game theory", "the prisoner's dilemma", "entropy", "quantum computing", "semiconductors", "Moore's law",
)

CONCEPT_TEMPLATES = (
    "Explain {c} in simple terms.",
    "What is {c}, and why does it matter?",
    "Can you explain {c} to a ten-year-old?",
    "Describe {c} using an everyday analogy.",
    "What are the most common misconceptions about {c}?",
    "Give me a one-paragraph introduction to {c}.",
    "How would a teacher introduce {c} in a first lesson?",
    "Write three quiz questions about {c}, with answers.",
    "What is a good real-world example of {c}?",
    "Summarise what experts agree on about {c}.",
    "What should every adult know about {c}?",
    "How has our understanding of {c} changed over time?",
    "Explain {c} in exactly three sentences.",
    "I keep hearing about {c}. What is it, briefly?",
    "What are the pros and cons of {c}?",
    "Explain {c} as if I were a university student in another field.",
    "Write a short, friendly blog introduction about {c}.",
    "What key terms do I need to understand {c}? Define each one.",
    "How does {c} affect everyday life?",
    "Give me a mnemonic or trick to remember how {c} works.",
)

PAIRS = (
    ("weather", "climate"), ("a virus", "a bacterium"), ("stocks", "bonds"), ("a debit card", "a credit card"),
    ("renting", "buying a home"), ("RAM", "storage"), ("HTTP", "HTTPS"), ("a compiler", "an interpreter"),
    ("Python", "JavaScript"), ("SQL", "NoSQL databases"), ("a process", "a thread"), ("TCP", "UDP"),
    ("machine learning", "traditional programming"), ("affect", "effect"), ("who", "whom"), ("its", "it's"),
    ("empathy", "sympathy"), ("a crocodile", "an alligator"), ("a frog", "a toad"), ("baking soda", "baking powder"),
    ("butter", "margarine"), ("tea", "coffee"), ("running", "swimming for fitness"), ("yoga", "pilates"),
    ("aerobic", "anaerobic exercise"), ("a hurricane", "a tornado"), ("a meteor", "a meteorite"),
    ("mass", "weight"), ("speed", "velocity"), ("heat", "temperature"), ("an atom", "a molecule"),
    ("mitosis", "meiosis"), ("a democracy", "a republic"), ("a recession", "a depression"), ("a loan", "a lease"),
    ("a resume", "a cover letter"), ("a manager", "a leader"), ("e-books", "paper books"),
    ("trains", "planes for short trips"), ("electric cars", "petrol cars"), ("solar power", "wind power"),
    ("LED bulbs", "incandescent bulbs"), ("a laptop", "a desktop computer"), ("Linux", "Windows"),
    ("git merge", "git rebase"), ("a Python list", "a Python set"), ("unit tests", "integration tests"),
    ("agile", "waterfall project management"), ("a latte", "a cappuccino"), ("a violin", "a viola"),
    ("jazz", "blues"), ("baroque", "classical music"), ("a novel", "a novella"), ("a simile", "a metaphor"),
    ("British English", "American English"), ("a hobby", "a side business"), ("saving", "investing"),
    ("term life insurance", "whole life insurance"), ("a fixed-rate mortgage", "a variable-rate mortgage"),
    ("a cold", "the flu"), ("an allergy", "an intolerance"), ("a psychologist", "a psychiatrist"),
    ("introverts", "extroverts"), ("deductive", "inductive reasoning"), ("a hypothesis", "a theory"),
)

COMPARE_TEMPLATES = (
    "What is the difference between {x} and {y}?",
    "Compare {x} and {y} in a short table.",
    "{X} or {y}: which is better for a beginner, and why?",
    "Explain how {x} differs from {y}, with one example of each.",
    "What do {x} and {y} have in common, and where do they differ?",
    "People often confuse {x} with {y}. How can I tell them apart?",
    "Give me three key differences between {x} and {y}.",
    "When would you choose {x} over {y}?",
)

SITUATIONS = (
    "my neighbour plays loud music late at night", "my roommate never does the dishes",
    "a coworker keeps taking credit for my work", "I forgot my best friend's birthday",
    "I have two job offers and cannot decide", "my team missed an important deadline",
    "my teenager spends all evening on their phone", "I feel nervous before every presentation",
    "I lent money to a friend and they have not paid it back", "my landlord will not fix the heating",
    "I want to quit my job but I am afraid of the risk", "my parents disagree with my choice of university",
    "I keep procrastinating on a big project", "my dog barks whenever I leave the house",
    "I moved abroad and feel lonely", "my manager gives vague feedback", "I was rejected after a final interview",
    "my online order arrived damaged", "I have too many meetings to get real work done",
    "my friend always cancels plans at the last minute", "I need to tell my boss I made a costly mistake",
    "my sibling and I argue about caring for our parents", "I cannot fall asleep on Sunday nights",
    "I spend more money than I earn each month", "a customer left an angry review of my small shop",
    "I got lost in a foreign city without mobile data", "my plants keep dying even though I water them",
    "I feel stuck learning a language after six months", "my child is being teased at school",
    "my partner and I want different holidays", "I have been asked to lead a team for the first time",
    "my laptop has become very slow", "I have to give feedback to a friend who is also my employee",
    "a project I care about was cancelled", "I disagree with a decision made by my whole team",
    "I want to ask someone out but I am shy", "my flight was cancelled and the airline offers no help",
    "I received a suspicious email asking for my password", "I need to cut my grocery bill in half",
    "I have a week to prepare for an exam I have barely studied for", "my elderly neighbour seems isolated",
    "a friend asked me to be a reference but I have doubts about their work",
)

ADVICE_TEMPLATES = (
    "{S}. What should I do?",
    "I need some advice: {s}. How should I handle it?",
    "{S}. How can I talk about this calmly?",
    "What would you suggest if {s}?",
    "{S}. Give me two or three options and the trade-offs of each.",
    "Help me write what I could say in this situation: {s}.",
)

LIST_TOPICS = (
    "board games for a family evening", "books for someone who wants to start reading history",
    "healthy snacks for work", "indoor activities for a rainy weekend", "ways to save energy at home",
    "questions to ask at the end of a job interview", "icebreakers for a team meeting",
    "things to do in a city on a free afternoon", "gift ideas for a grandparent", "habits of productive people",
    "classic films everyone should see", "easy vegetarian dinners", "podcast topics about science",
    "ways to practise English every day", "skills that are useful in any job", "names for a bakery",
    "names for a black cat", "themes for a birthday party", "ways to make a small room look bigger",
    "signs that a website might be a scam", "things to check before a long car trip",
    "good habits for a healthy back", "ways to be kinder to the environment", "questions for a first date",
    "tips for writing clear documentation", "reasons to learn a musical instrument", "low-cost hobbies",
    "houseplants that need little light", "ways to reduce stress before an exam", "ideas for a school science fair",
    "rules for a polite group chat", "ways to welcome a new colleague", "features to look for in a bicycle",
    "things to pack for a beach holiday", "exercises that need no equipment", "breakfast ideas without eggs",
    "ways to keep a conversation going", "topics for a short speech at school", "hobbies you can do alone",
    "questions to ask a landlord before renting", "ideas for a rainy day with children",
    "essential kitchen tools for a first flat", "ways to make a long train journey pleasant",
)

LIST_TEMPLATES = (
    "Give me {n} {t}.",
    "List {n} {t}, with a one-line reason for each.",
    "Can you suggest {n} {t}?",
    "What are {n} good {t}? Keep each one short.",
    "Brainstorm {n} {t} and mark your favourite.",
)

DEBATES = (
    "homework should be banned in primary schools", "cities should be car-free in the centre",
    "everyone should learn to code", "social media does more harm than good", "remote work is here to stay",
    "university education should be free", "voting should be compulsory", "zoos should be closed",
    "a four-day working week is a good idea", "tipping in restaurants should be abolished",
    "children should learn a second language from age five", "space exploration is worth the cost",
    "printed newspapers will disappear", "video games can be educational", "plastic bags should be banned",
    "artificial intelligence will create more jobs than it destroys", "school uniforms are a good idea",
    "people should retire later", "cash will disappear within twenty years", "nuclear power is necessary",
    "reality television is harmful", "every city needs more parks", "online learning is as good as the classroom",
    "public transport should be free", "e-books are better than paper books", "competitive sport is good for children",
    "fast fashion should be taxed", "cooking should be taught at school", "open-plan offices are a mistake",
    "tourists should pay a fee to visit popular cities",
)

DEBATE_TEMPLATES = (
    "Give me the strongest arguments for and against the claim that {d}.",
    "Do you think {d}? Explain both sides before giving a view.",
    "Write a short, balanced opinion piece on whether {d}.",
    "Some people say {d}. What evidence would help settle the question?",
    "Prepare three talking points for a debate arguing that {d}.",
)

EMAIL_PURPOSES = (
    "ask for a deadline extension", "thank them for their help on a project", "request a day off next week",
    "apologise for missing a meeting", "follow up on an unanswered invoice", "invite them to a team lunch",
    "announce a change in office hours", "ask for feedback on a draft report", "introduce a new team member",
    "politely decline a job offer", "accept a job offer and confirm the start date", "complain about a late delivery",
    "ask for a refund for a faulty product", "request a meeting to discuss a raise", "cancel a subscription",
    "ask a professor for a recommendation letter", "remind them about tomorrow's workshop",
    "propose a new weekly meeting time", "share the minutes of yesterday's meeting", "welcome them to the club",
    "congratulate them on a promotion", "ask to reschedule a dentist appointment", "report a broken heater",
    "confirm a hotel reservation", "ask about the status of a job application",
    "say goodbye before leaving the company",
    "ask a neighbour to keep an eye on the house during a holiday", "offer help with a move",
    "request access to a shared folder", "warn them about a planned server outage",
)

RECIPIENTS = (
    "my manager", "a colleague", "a client", "my landlord", "a teacher", "a customer service team", "a professor",
    "a new employee", "the whole team", "a supplier", "a neighbour", "an old friend", "a hiring manager",
)

EMAIL_TEMPLATES = (
    "Write an email to {r} to {p}.",
    "Draft a short and polite message to {r} to {p}.",
    "Help me write a friendly email to {r}: I want to {p}.",
    "Write a formal email to {r} in which I {p}.",
    "Compose a brief text message to {r} to {p}. Keep it under 60 words.",
)

STORY_CHARACTERS = (
    "a retired lighthouse keeper", "a young baker", "a lost robot", "a shy dragon", "a detective who hates rain",
    "a girl who can talk to birds", "an astronaut on her last mission", "a grandfather learning to skate",
    "a cat who runs a bookshop", "a time traveller with a broken watch", "two rival chefs",
    "a ghost who is afraid of the dark",
    "a farmer who finds a strange seed", "a musician who lost her voice", "a boy who collects maps",
    "a postman in a mountain village", "a translator at a peace conference", "an inventor whose machines never work",
)

STORY_SETTINGS = (
    "on a night train", "in a flooded city", "at a village fair", "on a space station", "in a snowed-in hotel",
    "during a power cut", "at the bottom of the sea", "in a library that never closes", "on the first day of school",
    "in a desert oasis", "at a wedding that goes wrong", "in a small harbour town", "inside a giant clock",
    "in a market in the year 2300",
)

STORY_TEMPLATES = (
    "Write a short story about {who} {where}.",
    "Tell a bedtime story about {who} {where}. Keep it gentle and under 300 words.",
    "Write the opening paragraph of a novel about {who} {where}.",
    "Write a funny story, about 200 words long, about {who} {where}.",
    "Write a short story about {who} {where} that ends with a twist.",
    "Describe a scene with {who} {where}, focusing on sounds and smells.",
)

POEM_SUBJECTS = (
    "the first snow", "a city at dawn", "an old bicycle", "the sea in winter", "a cup of coffee", "autumn leaves",
    "a grandmother's kitchen", "the moon over a motorway", "a lost umbrella", "learning to code", "a thunderstorm",
    "friendship", "moving house", "a quiet library", "the last day of summer", "a garden after rain", "a train station",
    "homesickness", "a cat asleep in the sun", "the stars in the desert",
)

POEM_FORMS = ("a haiku", "a limerick", "a four-line poem", "a short free-verse poem", "a rhyming poem of two stanzas",
              "an acrostic poem", "a sonnet")

WRITING_TASKS = (
    "Write a product description for {product}.",
    "Write a catchy slogan for {product}.",
    "Write a short customer review of {product}, mentioning one good and one bad point.",
    "Write an advertisement for {product} aimed at students.",
    "Write a short toast for a friend's {occasion}.",
    "Write a two-minute speech for {occasion}.",
    "Write a LinkedIn post announcing {news}.",
    "Write a short press release announcing {news}.",
    "Write a tweet announcing {news}.",
)

PRODUCTS = (
    "a reusable water bottle", "noise-cancelling headphones", "a folding bicycle", "a smart thermostat",
    "an ergonomic office chair", "a solar phone charger", "a handmade ceramic mug", "a language-learning app",
    "a weekly vegetable box", "a waterproof hiking jacket", "a beginner's chess set", "a portable projector",
    "a bamboo toothbrush", "an electric kettle with temperature control", "a kids' science kit",
)

AUDIENCES = ("a beginner", "a child", "a busy manager", "a retired engineer", "a high-school student", "a tourist")

STYLE_SUFFIXES = (
    "", "", "", "", "", " Please be brief.", " Use bullet points.", " Answer in a friendly tone.",
    " Keep the answer under 150 words.", " Explain your reasoning.", " Use plain language, no jargon.",
    " Include one concrete example.", " Answer in two short paragraphs.",
)

TECH_TEMPLATES = {
    "command": (
        "What does the `{name}` command do? Give an example.",
        "How do I use `{name}` on Linux? Show a typical invocation.",
        "I found `{name}` on my system. What is it for?",
        "Explain the `{name}` command to someone new to the terminal.",
        "When would I use `{name}`, and what are its most common options?",
    ),
    "system administration command": (
        "What is `{name}` used for in Linux system administration?",
        "Explain what `{name}` does and when an administrator would run it.",
        "Is `{name}` safe to run on a production server? What does it do?",
    ),
    "system call": (
        "What does the `{name}` system call do?",
        "Explain the Linux system call `{name}` with a short C example.",
        "When would a C program call `{name}`, and what errors should it handle?",
    ),
    "C library function": (
        "What does the C function `{name}` do? Show how to call it.",
        "Explain `{name}` from the C library and its common pitfalls.",
        "Write a small C program that uses `{name}` and explain it.",
    ),
    "file format": (
        "What is the `{name}` file and what goes in it?",
        "Explain the format of `{name}` with a short example.",
    ),
    "topic": (
        "Give me an overview of {name} on Linux.",
        "What should a developer know about {name}?",
    ),
    "Python module": (
        "What is the Python module `{name}` used for? Show a short example.",
        "Explain the main functions of Python's `{name}` module.",
        "When should I use `{name}` from the Python standard library?",
    ),
    "Python package": (
        "What is the Python package `{name}` for? Give a short example of using it.",
        "Should I use `{name}` in my Python project? What does it do?",
        "Explain what `{name}` does and how to install it.",
    ),
    "Python language topic": (
        "Explain {name} in Python with a short example.",
        "What should a beginner understand about {name} in Python?",
        "What are common mistakes related to {name} in Python?",
    ),
    "Perl module": (
        "What is the Perl module `{name}` used for?",
    ),
    "SQL command": (
        "What does the SQL command {name} do in PostgreSQL? Give an example.",
    ),
}

FIRST_NAMES = (
    "Anna", "Ben", "Chloe", "David", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Liam", "Mei",
    "Nadia", "Oscar", "Priya", "Quentin", "Rosa", "Samir", "Tara", "Umar", "Vera", "Wei", "Ximena", "Yusuf", "Zoe",
    "Marta", "Pedro", "Sofia", "Tomasz", "Aiko", "Kwame", "Leila", "Noah", "Olga", "Rahul",
)

LAST_NAMES = (
    "Garcia", "Novak", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Schneider", "Rossi", "Kowalski", "Haddad",
    "Fischer", "Dubois", "Silva", "Jensen", "Patel", "Murphy", "Costa", "Weber", "Nguyen", "Almeida",
)

CITIES = (
    "Lisbon", "Leeds", "Lyon", "Leipzig", "Valencia", "Bologna", "Krakow", "Ghent", "Porto", "Aarhus", "Graz",
    "Seville", "Toulouse", "Bristol", "Utrecht", "Gdansk", "Bergen", "Tallinn", "Cork", "Brno",
)

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
