"""Hand-written material of the out-of-style evaluation split (:mod:`verispec.workloads.outofstyle`).

Written for this project (2026-12-03) in the way people type requests to a chat model (MT-bench,
Natural Questions, GSM8K and WMT style: varied wording, length and structure), and released with
verispec under Apache-2.0. None of it comes from, or was checked against, the sources that the
training instruction generator (:mod:`verispec.distill.instructions`) reads; the test
``tests/test_outofstyle.py`` checks that no 12-word window is shared with its output.
"""

from __future__ import annotations

__all__ = ["CHAT_PAIRS", "MATH_PROBLEMS", "QA_QUESTIONS", "TRANSLATIONS", "TRANSLATION_ASKS"]

# Two turns each (MT-bench style): the second follows the target's own first answer.
CHAT_PAIRS: tuple[tuple[str, str], ...] = (
    ("Write a short blog post about a weekend trip to Lisbon, mentioning food, trams and the view from a hill.",
     "Now rewrite it as a tweet thread of exactly three tweets."),
    ("I'm a manager and one of my best engineers keeps missing stand-up meetings. How should I bring it up "
     "without making them defensive?",
     "What if they tell me the meetings are a waste of time? How do I respond?"),
    ("Pretend you are a pirate captain giving a pep talk to your crew before a storm.",
     "Same speech, but now the crew is a group of nervous first-year university students before exams."),
    ("Compose a four-line poem about autumn leaves.",
     "Explain the imagery you used, line by line."),
    ("What is the difference between weather and climate?",
     "Give me two everyday examples that show the difference."),
    ("Draft a polite complaint email to my landlord about a heating system that has been broken for a week.",
     "Make it firmer, and mention that I will contact the local housing office if nothing happens by Friday."),
    ("If a train leaves at 3 pm going 80 km/h and another leaves the same station at 4 pm going 100 km/h "
     "in the same direction, when does the second catch the first?",
     "And how far from the station are they at that moment?"),
    ("Suggest five names for a small bakery that specialises in sourdough bread.",
     "Pick your favourite of those and write a one-sentence slogan for it."),
    ("Explain to a twelve-year-old why the sky is blue.",
     "Now explain it to a physics undergraduate, using the proper terms."),
    ("Write a Python function that checks whether a string is a palindrome, ignoring spaces and case.",
     "Can you write a few unit tests for it?"),
    ("What are some good strategies for learning a new language as an adult with a full-time job?",
     "Turn that advice into a weekly schedule for someone with about five hours a week."),
    ("Summarise the plot of Romeo and Juliet in three sentences.",
     "Retell the same story as if it happened today, with smartphones."),
    ("You are a travel agent. A customer wants a cheap, warm destination in Europe in February. What do you "
     "recommend?",
     "They just told you they hate crowds and love hiking. Adjust your recommendation."),
    ("Write a limerick about a cat who learns to use a computer.",
     "Write a second verse where the cat gets into trouble online."),
    ("What are the pros and cons of working from home?",
     "Which of those matter most for a new employee in their first year? Explain briefly."),
    ("Describe how a bill becomes a law in the United States.",
     "How is that different from the process in the United Kingdom?"),
    ("Give me a recipe for a simple vegetable soup that takes less than 30 minutes.",
     "I don't have any onions or garlic. How should I change the recipe?"),
    ("Create a short dialogue between a customer and a barista where the customer cannot decide what to order.",
     "Continue the dialogue, but now a long queue is forming behind the customer."),
    ("Explain what inflation is and why central banks raise interest rates to fight it.",
     "Are there any downsides to raising interest rates? List the main ones."),
    ("Help me write a toast for my sister's wedding. She loves mountain climbing and bad puns.",
     "It's too long. Cut it down to about 80 words and keep the best pun."),
    ("Which is heavier, a kilogram of feathers or a kilogram of steel? Explain your reasoning.",
     "Then why do people often get this question wrong?"),
    ("Write the opening paragraph of a mystery novel set in a lighthouse.",
     "Introduce the detective in the next paragraph."),
    ("I have a job interview for a junior data analyst position tomorrow. What questions should I expect?",
     "How would you answer the question 'Tell me about a time you made a mistake'?"),
    ("Explain the rules of chess for a complete beginner, briefly.",
     "What are three common opening mistakes beginners make?"),
    ("Write a product description for a reusable water bottle that keeps drinks cold for 24 hours.",
     "Rewrite it for an audience of serious mountain bikers."),
    ("What causes the seasons on Earth?",
     "Many people think it's because the Earth is closer to the Sun in summer. Why is that wrong?"),
    ("Act as a job coach. I've been a teacher for ten years and want to move into software testing. Where do "
     "I start?",
     "Which of my teaching skills will transfer best, and how should I show them on my CV?"),
    ("Write a SQL query that returns the ten customers with the highest total order value from tables "
     "customers(id, name) and orders(id, customer_id, amount).",
     "Modify it to only include orders placed in 2023, assuming orders has an order_date column."),
    ("Compare electric cars and petrol cars for someone who drives about 40 km a day.",
     "What if they live in a flat with no private parking? Does your answer change?"),
    ("Tell me a short bedtime story about a dragon who is afraid of the dark.",
     "Give the story a moral and explain it in one sentence."),
    ("What is the Pythagorean theorem, and where is it used in real life?",
     "Show me a worked example with a ladder leaning against a wall."),
    ("Write a haiku about a rainy Monday morning.",
     "Now write one about the Friday afternoon of the same week."),
    ("My tomato plants have yellow leaves at the bottom. What could be wrong?",
     "I water them every day. Could that be the problem?"),
    ("Draft a short speech for a retirement party for a colleague who worked in accounting for 35 years.",
     "Add a light-hearted story about spreadsheets."),
    ("Explain the difference between a virus and a bacterium.",
     "Why don't antibiotics work against the common cold?"),
    ("Plan a three-day itinerary for a first visit to Rome.",
     "Day two is going to rain. Suggest indoor alternatives for that day."),
    ("Give me three arguments for and three against school uniforms.",
     "Write a one-paragraph conclusion that takes a side."),
    ("What is a good way to explain recursion without using code?",
     "Give a second analogy, this time using Russian dolls."),
    ("Rewrite this sentence to sound more professional: 'hey, the report's gonna be late, sorry, stuff "
     "came up'.",
     "Now make it sound apologetic but confident, in two sentences."),
    ("Role-play as a museum guide showing visitors a painting of a stormy sea.",
     "A child in the group asks why the painter used so much dark blue. Answer in character."),
    ("What should I pack for a week-long camping trip in the mountains in early autumn?",
     "Which three items would you never leave behind, and why?"),
    ("Explain how a credit score works.",
     "What are the fastest legitimate ways to improve one?"),
)

# Real-looking text in German, French, Spanish and Italian (news, e-mail, notices, conversation).
TRANSLATIONS: tuple[tuple[str, str], ...] = (
    ("de", "Die Bundesregierung hat am Mittwoch ein neues Gesetz zur Förderung erneuerbarer Energien "
           "beschlossen. Kritiker bemängeln jedoch, dass die Maßnahmen zu spät kommen."),
    ("de", "Liebe Frau Becker, vielen Dank für Ihre schnelle Antwort. Leider kann ich am Donnerstag nicht "
           "kommen. Wäre Ihnen der nächste Montag um 10 Uhr recht?"),
    ("de", "Wegen Bauarbeiten fällt die Linie 7 zwischen Hauptbahnhof und Stadtpark bis zum 15. März aus. "
           "Bitte nutzen Sie den Ersatzverkehr mit Bussen."),
    ("de", "Der Verein feiert in diesem Jahr sein hundertjähriges Bestehen. Zum Jubiläum sind alle "
           "ehemaligen Mitglieder herzlich eingeladen."),
    ("de", "Ich habe das Buch in zwei Tagen gelesen, obwohl ich eigentlich keine Krimis mag. Die Figuren sind "
           "einfach zu gut geschrieben."),
    ("de", "Nach einem schwachen ersten Quartal rechnet das Unternehmen nun mit einem Umsatzplus von drei "
           "Prozent."),
    ("de", "Kannst du mir sagen, wo hier die nächste Apotheke ist? Mein Sohn hat Fieber und ich habe keine "
           "Tabletten mehr."),
    ("de", "Die Ausstellung zeigt über zweihundert Werke aus fünf Jahrhunderten, darunter einige, die noch "
           "nie öffentlich zu sehen waren."),
    ("de", "Bei starkem Wind bleibt die Seilbahn geschlossen. Informationen zum Betrieb erhalten Sie an der "
           "Talstation."),
    ("de", "Unsere Tochter hat gestern ihre Führerscheinprüfung bestanden, und jetzt will sie jeden Tag das "
           "Auto haben."),
    ("fr", "Le gouvernement a annoncé hier une hausse du salaire minimum à partir du premier janvier. Les "
           "syndicats jugent cette mesure insuffisante."),
    ("fr", "Bonjour Monsieur Dupont, je me permets de vous relancer au sujet de ma candidature envoyée le "
           "mois dernier. Je reste à votre disposition pour un entretien."),
    ("fr", "En raison d'une panne électrique, le musée restera fermé toute la journée de samedi. Nous nous "
           "excusons pour la gêne occasionnée."),
    ("fr", "J'ai vraiment adoré ce restaurant : le service était rapide, les plats copieux et les prix tout à "
           "fait raisonnables."),
    ("fr", "Les chercheurs ont découvert une nouvelle espèce de grenouille dans une forêt tropicale du Pérou."),
    ("fr", "Tu peux passer chercher le pain en rentrant ? Il n'en reste plus une miette à la maison."),
    ("fr", "La réunion du conseil municipal a été reportée à la semaine prochaine faute de quorum."),
    ("fr", "Après trois ans de travaux, la bibliothèque rouvre ses portes avec une salle de lecture "
           "entièrement rénovée et un espace pour les enfants."),
    ("fr", "Il pleuvait tellement que nous avons dû annuler le pique-nique et manger des sandwichs dans la "
           "voiture."),
    ("fr", "Le match s'est terminé sur un score nul, mais les supporters ont applaudi leur équipe pendant "
           "dix minutes."),
    ("es", "El ayuntamiento ha aprobado un plan para plantar diez mil árboles en la ciudad durante los "
           "próximos cinco años."),
    ("es", "Hola Marta, ¿te apetece venir a cenar el sábado? Vamos a hacer paella y vienen también Luis y "
           "Carmen."),
    ("es", "Se ruega a los pasajeros que no dejen su equipaje sin vigilancia en ningún momento."),
    ("es", "La selección ganó el partido en el último minuto gracias a un gol de cabeza del defensa central."),
    ("es", "Mi abuela siempre decía que el secreto de una buena tortilla está en la paciencia y en no tener "
           "miedo al aceite."),
    ("es", "Las ventas de coches eléctricos crecieron un cuarenta por ciento el año pasado, según un informe "
           "publicado este lunes."),
    ("es", "Disculpe, ¿sabe a qué hora sale el último autobús hacia el aeropuerto?"),
    ("es", "El festival de cine de este año contará con películas de más de treinta países y varias "
           "proyecciones al aire libre."),
    ("es", "Estimado cliente: le informamos de que su pedido ha sido enviado y llegará en un plazo de tres a "
           "cinco días laborables."),
    ("es", "Después de mudarnos, tardamos casi un mes en encontrar todas las cajas con los libros."),
    ("it", "Il consiglio comunale ha deciso di chiudere il centro storico alle auto durante i fine settimana "
           "estivi."),
    ("it", "Ciao Giulia, ti scrivo per ricordarti che domani alle nove c'è la riunione con il cliente. Porta "
           "il portatile, per favore."),
    ("it", "A causa dello sciopero dei trasporti, molti treni regionali potrebbero subire ritardi o "
           "cancellazioni."),
    ("it", "La nuova mostra al museo raccoglie fotografie inedite della città negli anni cinquanta."),
    ("it", "Secondo gli esperti, l'estate appena trascorsa è stata la più calda degli ultimi cento anni."),
    ("it", "Mi scusi, potrebbe dirmi dove si trova la farmacia più vicina?"),
    ("it", "Abbiamo passato una settimana splendida in montagna: aria pulita, lunghe passeggiate e cene "
           "deliziose."),
    ("it", "L'azienda ha annunciato l'assunzione di duecento nuovi dipendenti entro la fine dell'anno."),
    ("it", "Non dimenticare di innaffiare le piante mentre sono via, soprattutto il basilico sul balcone."),
    ("it", "Il concerto è stato rinviato a causa del maltempo; i biglietti restano validi per la nuova data."),
)

LANG_NAMES = {"de": "German", "fr": "French", "es": "Spanish", "it": "Italian"}

# How people ask for a translation (WMT's "Translate German to English:" and looser ones); {lang}, {text}.
TRANSLATION_ASKS: tuple[str, ...] = (
    "Translate {lang} to English: {text}",
    "Can you translate this into English for me?\n\n{text}",
    "What does this mean in English? \"{text}\"",
    "English translation please:\n{text}",
    "I got this message in {lang} and my {lang} is rusty. What does it say?\n\n{text}",
    "Translate the following {lang} text into natural English.\n\n{text}",
    "{text}\n\nPlease translate the above into English.",
    "Help me understand this {lang} sentence by translating it: {text}",
)

# Natural-Questions-style closed-book questions, typed the way people search.
QA_QUESTIONS: tuple[str, ...] = (
    "who painted the mona lisa",
    "how many bones are in the adult human body",
    "what is the capital of australia",
    "when did the first man land on the moon",
    "who wrote pride and prejudice",
    "what is the largest planet in our solar system",
    "how long does it take light from the sun to reach earth",
    "what language is spoken in brazil",
    "who invented the telephone",
    "what is the boiling point of water at sea level in fahrenheit",
    "which ocean is the largest",
    "what does dna stand for",
    "who was the first woman to win a nobel prize",
    "how many players are on a soccer team on the field",
    "what is the tallest mountain in africa",
    "when did the berlin wall fall",
    "what gas do plants absorb from the air",
    "who composed the four seasons",
    "what is the smallest country in the world",
    "how many hearts does an octopus have",
    "What is the main ingredient in guacamole?",
    "Who discovered penicillin?",
    "Why do we have leap years?",
    "What's the longest river in Europe?",
    "Which element has the chemical symbol Fe?",
    "How many minutes are there in a week?",
    "Who was the Roman god of war?",
    "What is the speed of sound in air, roughly?",
    "In which country did the Olympic Games originate?",
    "What instrument did Louis Armstrong play?",
    "where is the great barrier reef located",
    "what is the freezing point of water in kelvin",
    "who is known as the father of computers",
    "what causes the tides in the ocean",
    "how many strings does a standard guitar have",
    "what year did the titanic sink",
    "which planet is known as the red planet",
    "what is the currency of japan",
    "who developed the theory of general relativity",
    "what is photosynthesis in simple terms",
    "how deep is the mariana trench",
    "what is the hardest natural substance",
)

# GSM8K-style word problems (several steps, whole-number answers).
MATH_PROBLEMS: tuple[str, ...] = (
    "Lena buys 3 notebooks at $4 each and 2 pens at $1.50 each. She pays with a $20 bill. How much change "
    "does she get?",
    "A bakery makes 240 muffins a day. It sells 3/4 of them in the morning and half of the rest in the "
    "afternoon. How many muffins are left at closing time?",
    "Tom is twice as old as his sister. In 5 years the sum of their ages will be 40. How old is Tom now?",
    "My van does about 14 km on one litre of diesel and diesel is $1.75 a litre right now. We're driving 490 km "
    "to my parents' place and back again. Roughly what will the diesel cost us?",
    "A class has 28 students. 3/7 of them walk to school, 1/4 come by bus and the rest are driven. How many "
    "are driven to school?",
    "Maria reads 25 pages on weekdays and 40 pages on each day of the weekend. How many pages does she read "
    "in two weeks?",
    "A rectangle is 12 cm long and its width is one third of its length. What are its area and its "
    "perimeter?",
    "Sam saves $15 every week. He already has $60. How many weeks will it take him to afford a bike that "
    "costs $285?",
    "A farmer has chickens and cows. There are 30 heads and 80 legs in total. How many cows are there?",
    "A shop sells a jacket for $80. During a sale the price is cut by 25%, and then a further 10% is taken "
    "off the sale price at the till. What is the final price?",
    "James runs 5 km on Monday, and each day after that he runs 1.5 km more than the day before. How far "
    "does he run in total from Monday to Friday?",
    "Three friends share a pizza bill of $54. Anna pays twice as much as Ben, and Ben pays the same as "
    "Carl. How much does Anna pay?",
    "A water tank holds 1,200 litres. It is filled at 40 litres per minute while water leaks out at 10 "
    "litres per minute. How long does it take to fill the empty tank?",
    "A school orders 17 boxes of pencils with 24 pencils in each box. The pencils are shared equally among "
    "12 classes. How many pencils does each class get?",
    "Emma earns $18 an hour and works 7.5 hours a day, 4 days a week. How much does she earn in 3 weeks?",
    "A recipe for 4 people needs 300 g of flour. How much flour is needed for 10 people?",
    "A train travels 180 km in 2 hours and then 120 km in 1.5 hours. What is its average speed for the "
    "whole journey?",
    "Peter has 3 times as many marbles as Jack. After Peter gives Jack 10 marbles, they have the same "
    "number. How many marbles did Peter have at first?",
    "A garden is 15 m by 8 m. A path 1 m wide runs around the inside edge. What is the area of the garden "
    "that is not path?",
    "In a survey of 200 people, 45% prefer tea, 35% prefer coffee and the rest prefer juice. How many more "
    "people prefer tea than juice?",
    "Olivia bought a phone for $450 and sold it a year later at a 30% loss. How much money did she lose?",
    "A box contains red and blue balls in the ratio 3:5. If there are 24 red balls, how many balls are in "
    "the box altogether?",
    "A cyclist rides at 18 km/h. How many minutes does she need to cover 12 km?",
    "Ben's phone plan costs $12 a month plus $0.05 per text message. Last month his bill was $19.40. How "
    "many texts did he send?",
    "A cinema has 22 rows with 18 seats each. For one show, 3/4 of the seats were sold at $9 each. How much "
    "money did the cinema take?",
    "The average of five numbers is 14. Four of them are 10, 12, 15 and 20. What is the fifth number?",
    "Kate is making bracelets. Each bracelet needs 14 beads, and beads come in packs of 50. How many packs "
    "does she need to make 25 bracelets?",
    "A bus leaves every 12 minutes starting at 6:00 am. How many buses have left by 8:00 am, counting the "
    "one at 8:00?",
    "A store buys T-shirts for $6 each and sells them for $15. How many T-shirts must it sell to make a "
    "profit of $450?",
    "Liam is 4 years older than Noah. Five years ago Liam was twice as old as Noah. How old is Noah now?",
    "A pool is 25 m long. Mia swims 36 lengths every morning. How many kilometres does she swim in a week "
    "if she swims every day?",
    "Apples cost $0.40 each or $4 for a bag of 12. How much do you save by buying 36 apples in bags rather "
    "than one by one?",
    "A printer prints 15 pages per minute. How long does it take to print 30 copies of a 12-page report?",
    "A square has a perimeter of 36 cm. A rectangle has the same area as the square and a length of 12 cm. "
    "What is the width of the rectangle?",
    "Grace has $120. She spends 1/3 of it on a book and then 1/4 of what is left on lunch. How much money "
    "does she have now?",
    "There are 5 red, 7 green and 8 yellow sweets in a jar. If one sweet is picked at random, what is the "
    "probability that it is not green?",
    "A plumber charges a $40 call-out fee plus $35 per hour. A job costs $197.50. How many hours did the "
    "plumber work?",
    "A tree grows 30 cm in its first year, and each year it grows 10% more than the year before. How much "
    "does it grow in its third year?",
    "David's test scores are 72, 85 and 90. What score does he need on the fourth test to have an average "
    "of 85?",
    "A factory produces 1,500 bottles an hour, and 2% of them are faulty. How many good bottles does it "
    "make in an 8-hour shift?",
    "On our hiking map, 2 cm stands for 1 km. The trail from the car park to the hut measures 9 cm on the map, "
    "and we walk at 3 km per hour. How long will the walk up take?",
    "Hannah walks to school at 5 km/h and it takes her 24 minutes. How long would it take her to cycle the "
    "same distance at 15 km/h?",
)
