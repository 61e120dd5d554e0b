"""(h) Forgetting quality on logged conversations: a second workload, built unlike (g).

Suite (g) stores one-line third-person statements ("Alice moved to Osaka"),
each typed as what it is (fact, preference, chatter), and asks every day.
This suite stores what an agent that logs its dialogue stores: every turn of
a multi-session conversation between a user and an assistant, user and
assistant alike, as its own ``conversation`` memory with the raw turn text.
Facts are never stored as facts; they surface inside turns:

* **changing attributes** — a project's deadline, the user's manager, diet,
  home address and a team tool — first stated in the opening weeks and
  changed one to three times later ("they pushed the Tamarack billing
  rewrite to the 3rd of April"); later turns restate the current value in
  passing, paraphrase it or near-duplicate an earlier statement, and the
  assistant often echoes it;
* **old details** stated once in the first weeks — a pet (its kind, and
  its name a little later), the town the user grew up in, a diagnosis and
  its medication (two turns), the degree they studied;
* **passing details** mentioned once, mid-sentence, in a turn about
  something else (a plumber's name, a locker number, a restaurant tip);
* small talk, task requests with the assistant's answers, and distractor
  turns that share words with the facts without stating them.

Questions come at the end of each user's ~60 days (and a few at day 30
about the attributes that had changed by then), each with its ground truth:
the evidence turn ids (for a changed attribute, the turns stating its
current value; the turns stating an earlier value are *stale*), in groups
when the answer needs two turns (the pet's kind and name; the diagnosis and
the medication).

The workload is seeded and fixed before any tierstore policy is scored
against it (issues 15 and 16: a default is never tuned to one workload).

Scorers, on the same vectors (MiniLM with the ``embed`` extra, else the
synthetic hashing embedder on the words alone): plain cosine similarity over
every turn said so far, and real :class:`TierStore` replays (nightly sweeps
on a :class:`ManualClock`, ``search(k=10)`` at question time), one row per
:class:`TierVariant` in :data:`TIERSTORE_ROWS`. Metrics per category:
evidence recall@10, all-evidence@10 for two-turn answers, evidence@1 and
stale-hit@1 for changed attributes, tier counts at the end, and the tier the
evidence of every missed question was in.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from tierstore.bench.common import BenchConfig, SuiteResult, sweep_until_done, workdir
from tierstore.bench.forgetting import Hashing, former_weights, make_embedder
from tierstore.progress import Progress

DAY = 86400.0
HOUR = 3600.0
MINUTE = 60.0
# Day 0 of the simulation is a Monday, so that weekdays and weekends differ
# and deadlines are real calendar dates.
T0 = datetime(2026, 2, 2, tzinfo=UTC).timestamp()
MID_DAY = 30  # the day of the mid-way questions
MAX_ITEMS = 6  # fact-bearing exchanges per session at most; more wait for the next session

# ------------------------------------------------------------------ vocabulary
# Own names, values and templates; nothing is shared with suite (g).

USER_NAMES = [
    "Ingrid",
    "Tobias",
    "Saoirse",
    "Kwame",
    "Mei",
    "Rafael",
    "Anouk",
    "Dmitri",
    "Leilani",
    "Oskar",
    "Yara",
    "Benedikt",
    "Amara",
    "Thiago",
    "Noor",
    "Felix",
    "Ayesha",
    "Ruben",
    "Signe",
    "Pablo",
    "Keiko",
    "Lars",
    "Zainab",
    "Matthias",
    "Chiara",
    "Obi",
    "Helga",
    "Sanjay",
    "Marisol",
    "Teo",
    "Astrid",
    "Jamal",
    "Elif",
    "Corentin",
    "Nkechi",
    "Viggo",
    "Rania",
    "Ewan",
    "Sakura",
    "Bastian",
]
PROJECTS = [
    "Halvard migration",
    "Bluefin dashboard",
    "Orchid onboarding revamp",
    "Tamarack billing rewrite",
    "Nimbus mobile app",
    "Quarry data pipeline",
    "Sparrow API",
    "Lodestar reporting tool",
    "Marlin launch",
    "Copperleaf redesign",
    "Wren search upgrade",
    "Basalt compliance audit",
]
MANAGERS = [
    ("Teodora", "she"),
    ("Baptiste", "he"),
    ("Marguerite", "she"),
    ("Declan", "he"),
    ("Ottilie", "she"),
    ("Ravi", "he"),
    ("Henrike", "she"),
    ("Caspian", "he"),
    ("Wanjiru", "she"),
    ("Lorcan", "he"),
    ("Beatriz", "she"),
    ("Emil", "he"),
    ("Priyanka", "she"),
    ("Gideon", "he"),
]
DIETS = ["vegetarian", "vegan", "pescatarian", "keto", "dairy-free", "low-FODMAP", "low-carb", "paleo"]
STREETS = [
    "Wexford Road",
    "Pembury Street",
    "Hawthorn Avenue",
    "Quayside Mews",
    "Birchwood Lane",
    "Tannery Yard",
    "Gull Terrace",
    "Saltmarsh Close",
    "Orchard Rise",
    "Canal Walk",
    "Lantern Street",
    "Heron Court",
    "Foundry Row",
    "Millpond Drive",
]
# (category, what it is used for, the tools a team switches between)
TOOL_KINDS = [
    ("task tracker", "for tickets", ["Jira", "Linear", "Asana", "Trello", "ClickUp", "YouTrack"]),
    ("frontend framework", "for the frontend", ["React", "Vue", "Svelte", "Angular", "SolidJS"]),
    ("dataframe library", "for data wrangling", ["pandas", "Polars", "DuckDB", "Dask"]),
    ("CI system", "for builds and CI", ["Jenkins", "GitHub Actions", "GitLab CI", "CircleCI", "Buildkite"]),
    ("note-taking app", "for meeting notes", ["Notion", "Obsidian", "Logseq", "OneNote", "Bear"]),
]
PETS = [
    ("a rescue greyhound", "dog"),
    ("a tabby cat", "cat"),
    ("a border collie puppy", "dog"),
    ("a lop-eared rabbit", "rabbit"),
    ("a corn snake", "snake"),
    ("a ginger kitten", "cat"),
    ("a wire-haired dachshund", "dog"),
    ("a pair of budgies", "budgies"),
]
PET_NAMES = [
    "Pippin",
    "Biscuit",
    "Mochi",
    "Pickle",
    "Waffles",
    "Sputnik",
    "Clementine",
    "Bramble",
    "Noodle",
    "Marzipan",
    "Figaro",
    "Tofu",
]
TOWNS = [
    "Ballycastle",
    "Tobermory",
    "Ribe",
    "Comrie",
    "Aljezur",
    "Kinsale",
    "Portree",
    "Dinant",
    "Colmar",
    "Hallstatt",
    "Giethoorn",
    "Whitby",
    "Sigtuna",
    "Cesky Krumlov",
]
CONDITIONS = [
    ("hypothyroidism", "levothyroxine"),
    ("asthma", "a steroid inhaler"),
    ("migraines", "sumatriptan"),
    ("high blood pressure", "amlodipine"),
    ("type 2 diabetes", "metformin"),
    ("acid reflux", "omeprazole"),
    ("iron-deficiency anaemia", "iron tablets"),
    ("eczema", "a hydrocortisone cream"),
]
SUBJECTS = [
    "marine biology",
    "medieval history",
    "civil engineering",
    "linguistics",
    "music composition",
    "agricultural science",
    "philosophy",
    "materials science",
    "astrophysics",
    "art history",
]
PLUMBERS = ["Stanislav", "Bjorn", "Tomasz", "Gareth", "Idris", "Lucien", "Mehmet", "Fergus"]
RESTAURANTS = [
    "Kinoko",
    "Casa Ondina",
    "The Brass Pelican",
    "Saffron Lane",
    "Little Hanoi Kitchen",
    "Osteria Vela",
    "Smokehouse 42",
    "Dumpling Republic",
]
BOOKS = [
    "The Overstory",
    "Piranesi",
    "A Gentleman in Moscow",
    "The Remains of the Day",
    "Circe",
    "Klara and the Sun",
    "Station Eleven",
    "The Left Hand of Darkness",
]
GIFTS = [
    "a cast-iron skillet",
    "a pair of hiking poles",
    "a record player",
    "noise-cancelling headphones",
    "a sourdough starter kit",
    "a telescope",
    "a fancy chess set",
    "a leather notebook",
]
PODCASTS = [
    "Deep Field",
    "Slow Burn Kitchen",
    "The Long Commute",
    "Tidewater Tales",
    "Quiet Machines",
    "Borrowed Time",
    "Half Past History",
]


# ------------------------------------------------------------------ templates
# Placeholders: {v} the value, {old} the previous value, {p} the project, {pr} a pronoun,
# {cat} a tool category, {use} what the tool is used for, {sp} the pet's species, {x} a random other value.

CHANGING: dict[str, dict[str, list[str]]] = {
    "deadline": {
        "first": [
            "I'm leading the {p} now and it has to be done by {v}, which already feels tight.",
            "So the {p} finally got a date: we ship on {v}.",
            "Work stuff: the {p} is due {v}, and I haven't even started the test plan.",
            "The kickoff for the {p} was today, the deadline they gave us is {v}.",
        ],
        "change": [
            "Bad news, the {p} got pushed back to {v} because the vendor is late.",
            "They moved the {p} deadline again, it's now {v} instead of {old}.",
            "Update on the {p}: the new date is {v}, so the whole plan shifts.",
            "The steering group met and the {p} is now due {v}, not {old} anymore.",
        ],
        "echo": [
            "Noted, the {p} is now due on {v}.",
            "Got it. I've updated my notes: {p}, deadline {v} (it was {old}).",
            "Okay, {v} for the {p}. Want me to help re-plan the remaining work?",
        ],
        "echo_first": [
            "Noted: the {p} is due on {v}. Shout if you want help with the test plan.",
            "{v} for the {p}, got it. That's a good amount of work to fit in.",
        ],
        "restate": [
            "I need the test plan done well before {v}, that's when the {p} ships.",
            "With the {p} due {v}, I really can't take on anything else this month.",
            "Can you help me split the {p} into weekly milestones up to {v}?",
            "Reminder to self: the {p} deadline is {v}.",
        ],
        "restate_echo": [
            "Working back from {v}: testing the week before, a feature freeze the week before that.",
            "Sure. If the {p} is due {v}, the last two weeks should be buffer and testing.",
        ],
        "distractor": [
            "My friend's thesis deadline got moved too, everybody's deadlines are slipping this year.",
            "How do people even estimate deadlines for software projects? Ours are always wrong.",
            "The {x} team missed their date again, glad I'm not on that one.",
            "Is it normal that every project at work gets a launch date before anyone has scoped it?",
        ],
        "ask": [
            "When is the {p} due now?",
            "What's the current deadline for the {p}?",
            "Remind me, when do we have to ship the {p}?",
        ],
    },
    "manager": {
        "first": [
            "My manager, {v}, wants weekly status notes from now on, so that's a new chore.",
            "I report to {v}; {pr}'s nice but very detail-oriented.",
            "{v} is my manager, and {pr} just asked me to run the Friday demo.",
        ],
        "change": [
            "Big news at work: {old} is leaving and my new manager is {v}.",
            "After the reorg I report to {v} now instead of {old}.",
            "Had my first one-on-one with {v}, my new boss, {pr} seems sharp.",
            "So they shuffled the teams again and {v} is my manager as of Monday.",
        ],
        "echo": [
            "Congratulations on the change, so {v} is your manager now.",
            "Noted: you report to {v} now.",
            "Got it, {v} is your new manager. Want help preparing for your next one-on-one?",
        ],
        "echo_first": [
            "Noted, {v} is your manager. Weekly notes are easier with a template, want one?",
            "Thanks for the context about {v}. Detail-oriented managers love a clear summary.",
        ],
        "restate": [
            "My manager {v} asked for the quarterly numbers by Friday, so I'm swamped.",
            "Can you help me prep talking points for my one-on-one with {v}, my manager?",
            "{v}, my boss, wants the roadmap as a one-pager. Any structure you'd suggest?",
        ],
        "restate_echo": [
            "For a one-pager for {v}: goals, three milestones, risks, and what you need from them.",
            "For your one-on-one with {v}, start with wins, then blockers, then one ask.",
        ],
        "distractor": [
            "My manager's manager sent a two-thousand-word email about synergy today.",
            "How do I politely tell a manager that a deadline is unrealistic?",
            "A friend's new boss sounds like a nightmare, makes me appreciate mine.",
            "Our team lead role is open again, nobody seems to want it.",
        ],
        "ask": ["Who is my manager at the moment?", "Who do I report to these days?", "What's my current boss's name?"],
    },
    "diet": {
        "first": [
            "I've been eating {v} for a few weeks now, so please keep that in mind when you suggest recipes.",
            "Just so you know, I'm {v}, it's a health thing mostly.",
            "My doctor suggested trying a {v} diet, so that's what I'm doing now.",
        ],
        "change": [
            "I gave up on being {old}, it wasn't working for me; I'm doing {v} now.",
            "New food rules: my nutritionist switched me to a {v} diet.",
            "Okay, confession: I'm not {old} anymore, I've switched to {v}.",
            "From this week I'm eating {v}, the {old} thing is over.",
        ],
        "echo": [
            "Thanks for telling me, I'll suggest {v} recipes from now on.",
            "Noted, {v} it is. No more {old} suggestions.",
            "Good to know you're {v} now, I'll adjust the meal ideas.",
        ],
        "echo_first": ["Thanks, I'll keep my suggestions {v}.", "Noted, {v} recipes only. Any favourite ingredients?"],
        "restate": [
            "Can you find me a {v} lunch I can prep on Sundays?",
            "Since I'm {v} these days, what's a good quick dinner?",
            "Going to a barbecue on Saturday, any tips for staying {v} there?",
        ],
        "restate_echo": [
            "A {v} option that keeps well: a big tray bake you portion out for the week.",
            "Here's a quick {v} idea: a stir-fry with whatever vegetables you have, ready in 15 minutes.",
        ],
        "distractor": [
            "My sister tried going {x} for a month and gave up after a week.",
            "Is {x} actually healthy or just a trend?",
            "The canteen at work finally has decent salads, took them long enough.",
            "Why is every diet book so confident and so different from the last one?",
        ],
        "ask": [
            "What diet am I following these days?",
            "What should you keep in mind about my eating when you suggest recipes?",
            "Am I on any particular diet right now?",
        ],
    },
    "home": {
        "first": [
            "We live at {v}, it's a small place but the light is lovely.",
            "My address is {v}, in case you need it for grocery orders.",
            "Home is {v}; the neighbours are nice but the walls are thin.",
        ],
        "change": [
            "We finally moved! The new place is at {v}.",
            "Moving day is done, new address is {v}, and the old flat at {old} is handed back.",
            "Please update my address to {v}, we signed the lease last week.",
            "Surrounded by boxes at {v}, our new home, can't find the kettle anywhere.",
        ],
        "echo": [
            "Congrats on the move! I've noted your new address: {v}.",
            "Updated: your address is now {v}.",
            "Got it, {v} from now on instead of {old}. Need a change-of-address checklist?",
        ],
        "echo_first": ["Thanks, I've noted {v} as your address.", "Noted: {v}. Lovely light sounds like a win."],
        "restate": [
            "Can you draft a note to the post office to forward my mail to {v}?",
            "The grocery delivery should go to {v} now, remember that.",
            "What's the fastest way to get from {v} to the airport, roughly?",
        ],
        "restate_echo": [
            "Here's a draft: 'Please forward all post addressed to me to {v}, starting immediately.'",
            "I'll use {v} as the delivery address then.",
        ],
        "distractor": [
            "Our old street had the worst parking, I don't miss that at all.",
            "A colleague just moved to {x}, apparently the rents there are crazy.",
            "Is it normal for a landlord to ask for three months' deposit?",
            "The street party on our block was loud but fun.",
        ],
        "ask": ["What's my current address?", "Where do I live now?", "Which street is my place on these days?"],
    },
    "tool": {
        "first": [
            "At work we use {v} {use}, and honestly I'm not a fan.",
            "Our team runs everything {use} through {v}.",
            "Our whole team is on {v} {use}, it's been that way since before I joined.",
        ],
        "change": [
            "We finally switched from {old} to {v} {use}.",
            "The team moved everything {use} over to {v} this sprint, bye {old}.",
            "Heads up: we dropped {old}, it's {v} {use} now.",
            "After months of arguing we moved to {v}; {old} is gone.",
        ],
        "echo": [
            "Nice, so it's {v} {use} now. Want a quick cheat sheet?",
            "Noted: your team moved to {v}.",
            "Got it, {v} instead of {old}. The first weeks after a switch are always bumpy.",
        ],
        "echo_first": ["Noted, your team uses {v} {use}.", "Ah, {v}. I can help with the annoying parts."],
        "restate": [
            "Can you give me a cheat sheet for {v}? It's what we use {use} now.",
            "I'm still getting used to {v}, any tips for the first few weeks?",
            "What mistakes do people usually make with {v}? It's our {cat} these days.",
        ],
        "restate_echo": [
            "For {v}, the best first step is the official getting-started guide, end to end.",
            "A short cheat sheet for {v}: learn the core ideas first, the shortcuts later.",
        ],
        "distractor": [
            "Have you heard of {x}? A friend keeps raving about it.",
            "Is {x} any good, in general? People online argue about it constantly.",
            "Every team I know has a different {cat} and they all complain about it.",
        ],
        "ask": [
            "Which {cat} is my team using now?",
            "What do we use {use} at work these days?",
            "What's our current {cat} at work?",
        ],
    },
}
# restatements that repeat an earlier statement almost word for word (near-duplicates)
RESTATE_PREFIX = [
    "Like I said the other day, ",
    "As I mentioned, ",
    "Just repeating this so it sticks: ",
    "In case I didn't say: ",
]

OLD: dict[str, dict[str, list[str]]] = {
    "pet.kind": {
        "say": [
            "We adopted {v} from the shelter on Saturday, the flat feels different already.",
            "Big weekend: we brought home {v}, so I'm a bit sleep-deprived.",
            "Guess what, we got {v}! I've wanted one for years.",
        ],
        "echo": [
            "How exciting, {v}! Let me know if you want tips for the first weeks.",
            "Congratulations on {v}! The first few days are all about routine.",
        ],
    },
    "pet.name": {
        "say": [
            "Oh, and we named the {sp} {v}, the kids chose it.",
            "The {sp} is called {v} by the way, it really suits them.",
            "We settled on a name for the {sp}: {v}.",
        ],
        "echo": ["{v} is a great name for a {sp}!", "{v}, love it."],
    },
    "hometown": {
        "say": [
            "Smelled wood smoke on the way home and it took me straight back to {v}, the village where I grew up.",
            "I grew up in {v}, a tiny place where everyone knew everyone.",
            "My mum still lives in {v}, where I spent my whole childhood, and she called today.",
        ],
        "echo": [
            "{v} sounds lovely. Do you still go back often?",
            "Childhood places stay with you. {v} sounds special.",
        ],
    },
    "medical.condition": {
        "say": [
            "Got my test results: the doctor says it's {v}, which explains a lot.",
            "So it turns out I have {v}; at least now I know why I've been feeling off.",
            "The specialist confirmed {v} today, so that's what I'm dealing with.",
        ],
        "echo": [
            "I'm sorry to hear about the {v} diagnosis, I hope the treatment helps.",
            "Thanks for sharing that. Having a name for it ({v}) is a first step.",
        ],
    },
    "medical.medication": {
        "say": [
            "I started on {v} this week, the doctor wants me to take it every morning.",
            "The pharmacist explained how to use {v}, it's a daily thing now.",
            "New routine: {v} every day, doctor's orders.",
        ],
        "echo": [
            "Noted: {v} every morning. I can remind you if you like.",
            "A daily routine with {v}, got it. A pill box or phone alarm helps.",
        ],
    },
    "studies": {
        "say": [
            "Funny, this reminds me of my degree: I studied {v} at university, feels like a lifetime ago.",
            "Before all this office work I did a degree in {v}, believe it or not.",
            "I spent four years on a {v} degree and now I make spreadsheets, life is strange.",
        ],
        "echo": ["A {v} degree! That's a great background to have.", "{v} is a fascinating field. Do you miss it?"],
    },
}
OLD_DISTRACTORS: dict[str, list[str]] = {
    "pet": [
        "The neighbour's dog barked all night again.",
        "My sister's cat just had kittens, she's trying to give them away.",
        "Why do pet shops charge so much for a bag of food?",
    ],
    "hometown": [
        "A friend is going on holiday to {x}, she asked me for tips.",
        "Watched a documentary about small villages last night, made me a bit nostalgic.",
    ],
    "medical": [
        "My dad has {x} too, apparently it runs in families.",
        "The pharmacy queue this morning was ridiculous.",
    ],
    "studies": ["My niece wants to study {x}, any advice I can pass on?", "University fees these days are insane."],
}
OLD_ASK: dict[str, list[str]] = {
    "pet": [
        "What kind of pet do I have, and what's its name?",
        "Remind me what my pet is called and what kind of animal it is.",
    ],
    "hometown": ["Where did I grow up?", "What's the name of the village I'm from?"],
    "medical": [
        "What health condition do I have, and what medication am I taking for it?",
        "Remind me of my diagnosis and what I take for it.",
    ],
    "studies": ["What did I study at university?", "What was my degree in?"],
}
# passing details: (values, the sentence that carries one in passing, questions)
PASSING: dict[str, tuple[Sequence[Any], list[str], list[str]]] = {
    "plumber": (
        PLUMBERS,
        [
            "The kitchen tap is leaking again and a plumber called {v} is coming on Thursday, "
            "but that's not why I'm here: {task}",
            "Long morning, waited ages for the plumber, a guy named {v}, who fixed the boiler in ten "
            "minutes. Anyway, {task}",
        ],
        ["What was the name of the plumber who came round?", "Who was the plumber I mentioned?"],
    ),
    "locker": (
        [str(n) for n in range(104, 399, 17)],
        [
            "I'm at the gym, left everything in locker {v}, so I'll be quick: {task}",
            "Writing this from the pool, my stuff is in locker {v}. Quick question: {task}",
        ],
        ["Which locker number did I say my things were in at the gym?", "What was my gym locker number?"],
    ),
    "restaurant": (
        RESTAURANTS,
        [
            "My cousin swears by a little place called {v} near the station, I should try it. Anyway, {task}",
            "Someone at work said {v} does the best lunch deal in town, noted. But first, {task}",
        ],
        ["What was the restaurant someone recommended to me?", "Which place did my cousin recommend?"],
    ),
    "book": (
        BOOKS,
        [
            "A colleague lent me {v}, it's sitting on my desk. But first, {task}",
            "Got {v} from a coworker to borrow, no idea when I'll read it. Anyway, {task}",
        ],
        ["What book did my colleague lend me?", "Which book was I lent at work?"],
    ),
    "gift": (
        GIFTS,
        [
            "My brother dropped a hint that he'd love {v} for his birthday, good to know. Now, {task}",
            "Birthday season again, my brother wants {v} apparently. Anyway, {task}",
        ],
        ["What did my brother say he wanted for his birthday?", "What gift was my brother hinting at?"],
    ),
    "podcast": (
        PODCASTS,
        [
            "Someone at lunch recommended a podcast called {v}, I'll check it out later. Anyway, {task}",
            "Started listening to {v} on the commute, a podcast a friend suggested. Okay, {task}",
        ],
        ["Which podcast did someone recommend to me?", "What was the name of that podcast I mentioned?"],
    ),
    "parking": (
        [f"level {lv}, bay {b}{n}" for lv in (2, 3, 4, 5) for b in "ACDF" for n in (7, 12, 19)],
        [
            "Parked on {v} at the hospital garage, writing it here so I don't forget. Okay, {task}",
            "Note to self, the car is on {v} of the airport car park. Right, {task}",
        ],
        ["Where did I say I parked the car?", "What level and bay was my car on?"],
    ),
}

# task exchanges: (user request, assistant answer); the request also serves in passing-detail turns
TASKS: list[tuple[str, str]] = [
    (
        "can you help me write a SQL query that counts orders per day for the last month?",
        "Sure: SELECT date(created_at) AS day, COUNT(*) FROM orders WHERE created_at >= date('now', '-30 days') "
        "GROUP BY day ORDER BY day;",
    ),
    (
        "what's a polite way to decline a meeting invite without sounding rude?",
        "Something like: 'Thanks for including me, I can't make this one, but I'm happy to review the notes "
        "afterwards.'",
    ),
    (
        "can you give me a quick stretching routine? My back is killing me from sitting all day.",
        "Try cat-cow for a minute, child's pose for 30 seconds, a standing hamstring stretch on each side, then slow "
        "neck rolls. Repeat twice.",
    ),
    (
        "how long should I boil an egg for a jammy yolk?",
        "About six and a half minutes from boiling, then straight into cold water.",
    ),
    (
        "what's a good way to start a cover letter?",
        "Open with the role and one concrete reason you fit it, e.g. 'I've spent three years building exactly the "
        "kind of reports your team describes.'",
    ),
    (
        "how do I say 'where is the train station' in Portuguese?",
        "'Onde fica a estação de comboios?' in Portugal, or 'Onde fica a estação de trem?' in Brazil.",
    ),
    (
        "why does my Python script say 'list index out of range'?",
        "You're reading past the end of a list; check the loop bounds, or iterate over the items directly.",
    ),
    (
        "can you suggest a title for a slide about quarterly results?",
        "'The quarter in one slide: growth, risks, next steps', or simply 'Where we are and where we're going'.",
    ),
    (
        "how do I get red wine out of a carpet?",
        "Blot it (don't rub), dab with dish soap, white vinegar and warm water, then blot again with a dry cloth.",
    ),
    ("what's 18 percent of 240?", "43.2."),
    (
        "can you draft a two-line message to my landlord about the broken heater?",
        "Hi, the heater in the living room stopped working yesterday. Could you arrange for someone to look at it "
        "this week? Thanks!",
    ),
    (
        "can you recommend a board game for four people that takes under an hour?",
        "Try Azul or Ticket to Ride: both are easy to learn and take about 45 minutes.",
    ),
    (
        "I keep waking up at 4am, any tips?",
        "Keep the room cool and dark, no screens or caffeine late, and if you're awake for more than 20 minutes, get "
        "up and read until you feel sleepy.",
    ),
    (
        "how do I undo the last git commit but keep the changes?",
        "git reset --soft HEAD~1 keeps them staged; git reset HEAD~1 keeps them unstaged.",
    ),
    (
        "give me three icebreaker questions for a team meeting.",
        "1) What's a small win from this week? 2) What's the best thing you ate recently? 3) Which skill would you "
        "master overnight if you could?",
    ),
    ("how many grams is a cup of flour?", "Roughly 120 to 125 grams, depending on how you scoop it."),
    (
        "can you make this less passive: 'mistakes were made in the report'?",
        "'We made mistakes in the report', or more specific: 'I miscalculated the totals in section two.'",
    ),
    (
        "what's a houseplant that survives neglect?",
        "A snake plant or a ZZ plant: low light is fine and they need water only every few weeks.",
    ),
    (
        "can you explain what a p-value is like I'm five?",
        "It's how surprised you'd be by your data if nothing interesting were going on. Very surprised (small "
        "p-value) hints that something is going on.",
    ),
    (
        "what time works for a call with people in Singapore and Chicago?",
        "Try 8 pm in Chicago, which is 9 am the next morning in Singapore.",
    ),
    (
        "can you write a short birthday message for a coworker I barely know?",
        "Happy birthday! Hope you get a relaxing evening and plenty of cake.",
    ),
    (
        "how do I make a pivot table in Excel?",
        "Select your data, Insert > PivotTable, then drag fields into Rows, Columns and Values.",
    ),
    (
        "any ideas for a cheap weekend activity?",
        "A long walk with a picnic, a free museum day, a board-game night, or a big library haul.",
    ),
    (
        "what's the difference between affect and effect?",
        "'Affect' is usually the verb (the rain affected us), 'effect' the noun (the rain had an effect).",
    ),
    (
        "can you plan me a 30-minute workout with no equipment?",
        "Warm up for 5 minutes, then 4 rounds of squats, push-ups, lunges, plank and jumping jacks, 40 seconds each "
        "with 20 seconds rest, and a 5-minute cool-down.",
    ),
    (
        "my laptop fan is really loud, should I worry?",
        "Usually it means heavy load or dust: look for a runaway process and clean the vents.",
    ),
    (
        "what's a quick way to learn people's names at a new place?",
        "Repeat the name when you're introduced, use it once in conversation, and jot down a detail afterwards.",
    ),
    (
        "can you give me a rough regex for an email address?",
        r"A rough one: [^@\s]+@[^@\s]+\.[^@\s]+ — fine for a sanity check, not for real validation.",
    ),
    (
        "how do I tell a friend I can't lend them money without making it weird?",
        "Be short and kind: 'I'm not able to lend money, but I'd love to help you think it through.'",
    ),
    (
        "what should I pack for a three-day work trip?",
        "Two outfits you can mix, one smart layer, chargers, toiletries in a small bag, and a book for the train.",
    ),
    (
        "can you turn these notes into a tidy agenda: budget, hiring, offsite?",
        "Agenda: 1. Budget review (15 min) 2. Hiring update (15 min) 3. Offsite planning (20 min) 4. AOB.",
    ),
    (
        "what's a good vegetable to grow on a balcony?",
        "Cherry tomatoes, chillies or salad leaves: they like pots and give you a lot for little space.",
    ),
    ("how do I split a bill of 187 between five people?", "37.40 each."),
    (
        "is it better to pay off a credit card or save first?",
        "Usually pay off the card first: its interest is almost always higher than what savings earn.",
    ),
]
# more requests, built from parts, so that a user rarely repeats one word for word
TASK_PARTS: dict[str, list[Any]] = {
    "sql": [
        ("orders", "orders"),
        ("signups", "users"),
        ("support tickets", "tickets"),
        ("page views", "page_views"),
        ("refunds", "refunds"),
        ("failed logins", "login_events"),
    ],
    "period": ["day", "week", "month"],
    "recipient": [
        "my landlord",
        "a client",
        "my kid's teacher",
        "the gym",
        "my team",
        "a neighbour",
        "the dentist's office",
        "our IT desk",
    ],
    "issue": [
        "the broken heater",
        "a late invoice",
        "next week's schedule change",
        "the noise last night",
        "a missed delivery",
        "the shared calendar",
        "a double charge on my account",
        "a cancelled booking",
    ],
    "cook": [
        ("boil an egg for a jammy yolk", "About six and a half minutes from boiling, then into cold water."),
        (
            "roast a whole chicken",
            "Roughly 20 minutes per 500 g plus 20 minutes at 190 °C, until the juices run clear.",
        ),
        ("steam broccoli", "Four to five minutes, until it's bright green and just tender."),
        ("cook basmati rice", "Rinse it, simmer covered for about 12 minutes, then rest it for 5."),
        ("bake a sweet potato", "About 45 minutes at 200 °C, until a knife slides in easily."),
        ("rest a steak", "About half its cooking time, loosely covered."),
        ("poach salmon", "Ten minutes or so in barely simmering water, until it flakes."),
    ],
    "diff": [
        ("affect", "effect", "'Affect' is usually the verb, 'effect' the noun."),
        (
            "latency",
            "throughput",
            "Latency is how long one request takes; throughput is how many you finish per second.",
        ),
        ("baking soda", "baking powder", "Baking powder is baking soda with the acid already mixed in."),
        ("TCP", "UDP", "TCP guarantees order and delivery; UDP just sends, faster and with no promises."),
        (
            "precision",
            "recall",
            "Precision: how many of your hits are right. Recall: how many of the right ones you found.",
        ),
        ("a mutex", "a semaphore", "A mutex lets one holder in; a semaphore lets up to N."),
        ("weather", "whether", "'Weather' is rain and sun; 'whether' introduces a choice."),
    ],
    "agenda": ["budget", "hiring", "offsite", "Q3 goals", "onboarding", "tooling", "customer feedback", "retro"],
    "trip": [
        ("work", "two outfits you can mix, one smart layer, chargers and a notebook"),
        ("camping", "a warm layer, a head torch, a rain jacket, and more socks than you think"),
        ("beach", "sunscreen, a hat, sandals, a book and a refillable bottle"),
        ("city", "comfortable shoes, a light jacket, a power bank and a small day bag"),
        ("ski", "thermals, goggles, gloves, lip balm and something for sore muscles"),
    ],
    "friendlier": [
        ("Send me the file.", "Could you send me the file when you get a chance? Thanks!"),
        ("This is wrong.", "I think something might be off here, could we take another look?"),
        ("Why is this late?", "Just checking in on this, is there anything blocking it?"),
        ("Stop booking meetings at lunch.", "Would it be possible to keep lunchtime free of meetings?"),
    ],
    "convert": [
        ("miles", "kilometres", 1.609344),
        ("pounds", "kilograms", 0.45359237),
        ("inches", "centimetres", 2.54),
        ("litres", "US cups", 4.22675),
        ("kilometres", "miles", 0.621371),
    ],
}


def make_task(rng: np.random.Generator) -> tuple[str, str]:
    """A user request and the assistant's answer (a fixed one, or one built from parts)."""
    r = int(rng.integers(10))
    P = TASK_PARTS

    def one(key: str) -> Any:
        return P[key][int(rng.integers(len(P[key])))]

    if r < 3:
        return TASKS[int(rng.integers(len(TASKS)))]
    if r == 3:
        (thing, table), per, n = one("sql"), one("period"), int(rng.choice([7, 30, 60, 90]))
        return (
            f"can you help me write a SQL query that counts {thing} per {per} over the last {n} days?",
            f"Sure: SELECT date_trunc('{per}', created_at) AS {per}, COUNT(*) FROM {table} WHERE created_at >= "
            f"now() - interval '{n} days' GROUP BY 1 ORDER BY 1;",
        )
    if r == 4:
        pct, n = int(rng.choice([5, 12, 15, 18, 20, 23, 35])), int(rng.integers(4, 130)) * 10
        if rng.random() < 0.5:
            return f"what's {pct} percent of {n}?", f"{pct * n / 100:g}."
        k = int(rng.integers(2, 8))
        return f"how do I split a bill of {n} between {k} people?", f"{n / k:.2f} each."
    if r == 5:
        who, issue = one("recipient"), one("issue")
        return (
            f"can you draft a short message to {who} about {issue}?",
            f"Here's a draft: 'Hi, just a quick note about {issue}. Could we sort it out this week? Thanks!'",
        )
    if r == 6:
        food, how = one("cook")
        return f"how long should I {food}?", how
    if r == 7:
        a, b, ans = one("diff")
        return f"what's the difference between {a} and {b}?", ans
    if r == 8:
        items = [str(x) for x in rng.choice(P["agenda"], 3, replace=False)]
        kind, pack = one("trip")
        if rng.random() < 0.5:
            return (
                f"can you turn these notes into a tidy agenda: {', '.join(items)}?",
                "Agenda: "
                + " ".join(f"{i + 1}. {x.capitalize()} (15 min)" for i, x in enumerate(items))
                + f" {len(items) + 1}. Any other business.",
            )
        days = int(rng.integers(2, 8))
        return f"what should I pack for a {days}-day {kind} trip?", f"For {days} days: {pack}."
    if rng.random() < 0.5:
        blunt, nice = one("friendlier")
        return f"can you rewrite this to sound friendlier: '{blunt}'", f"'{nice}'"
    a, b, f = one("convert")
    n = int(rng.integers(2, 60))
    return f"how many {b} is {n} {a}?", f"About {n * f:.1f} {b}."


FOLLOW_UPS: list[tuple[str, str]] = [
    ("That works, thanks.", "Glad it helped!"),
    ("Great, that's exactly what I needed.", "Anytime."),
    ("Can you make it a bit shorter?", "Sure, short version: keep it simple and direct."),
    (
        "Hmm, and what if that doesn't work?",
        "Then try the steps again slowly, and if it still fails, tell me what you see and we'll dig in.",
    ),
    ("Perfect. One more thing on that: is there a catch?", "Not really, just don't overthink it."),
]
GREET_USER = {
    "morning": [
        "Morning!",
        "Good morning, got a minute?",
        "Hey, early start today.",
        "Morning. Coffee hasn't kicked in yet.",
    ],
    "day": ["Hey, quick one.", "Hi again.", "Lunch break, so I have a few minutes.", "Hello hello."],
    "evening": ["Evening. Long day.", "Hey, are you around?", "Hi, finally home.", "Ugh, what a day."],
}
GREET_ASSISTANT = [
    "Good to see you{nm}! What's on your plate today?",
    "Hi{nm}! What can I do for you?",
    "Hey{nm}, I'm here. What's up?",
    "Of course. Fire away.",
]
SMALL_TALK: list[tuple[str, str]] = [
    ("It's pouring with rain here, perfect weather to stay in.", "Sounds cosy. A good day for getting things done."),
    ("I finally slept eight hours last night.", "That's great, it makes such a difference."),
    ("My football team lost again, I don't know why I keep watching.", "Ouch. There's always next week!"),
    ("The train was forty minutes late this morning.", "That's frustrating, I hope the rest of the day is smoother."),
    ("I'm trying to drink more water, day three and going strong.", "Nice streak! Keep a bottle on your desk."),
    ("Made pancakes this morning, they were a disaster.", "The first pancake is always a test run, right?"),
    ("I think spring is finally coming, saw some crocuses today.", "Lovely, the first flowers always lift the mood."),
    ("Watched a great film last night, still thinking about it.", "Those are the best ones. What was it about?"),
]
CLOSE_USER = [
    "That's all for now, thanks!",
    "Great, talk later.",
    "Thanks, you're a lifesaver.",
    "Okay, I need to run. Bye!",
    "Cheers, that's me done for today.",
]
CLOSE_ASSISTANT = [
    "Anytime. Good luck today!",
    "Talk soon!",
    "Happy to help, have a good evening.",
    "Bye! Good luck with everything.",
]
ACK_ASSISTANT = [
    "Thanks for letting me know!",
    "Oh wow, that's a lot going on.",
    "Understood.",
    "Good to know, thanks.",
    "That sounds like a big change.",
]
FACT_PREFIX = ["", "", "Oh, before I forget: ", "Random update: ", "Bit of news: ", "Okay so, "]
FRAMED = (
    "Oh",
    "So ",
    "Okay",
    "Funny",
    "Guess",
    "Big",
    "Bad",
    "Smelled",
    "Surrounded",
    "Heads",
    "After",
    "Moving",
    "New",
    "Had ",
)
FACT_SUFFIX = ["", "", " Anyway.", " Just so you know.", " Can you keep that in mind?", " Long story."]


# ------------------------------------------------------------------ data


@dataclass(frozen=True)
class Turn:
    """One logged turn: what the agent stores as a ``conversation`` memory."""

    id: str
    user: int
    session: int
    t: float
    speaker: str  # "user" or "assistant"
    text: str
    role: str  # greeting, small_talk, task, fact, echo, restate, passing, distractor, closing
    attribute: str | None = None  # the attribute whose value the turn states, if any
    version: int = 0  # for a changing attribute: which of its values (0 = the first)


@dataclass(frozen=True)
class Question:
    """A question asked at ``t`` (not stored), with its ground truth."""

    id: str
    user: int
    t: float
    text: str
    category: str  # "current" (end), "current_mid" (day 30), "old", "passing"
    attribute: str
    evidence: tuple[frozenset[str], ...]  # groups: the answer needs one turn of each group
    stale: frozenset[str] = frozenset()  # turns stating an earlier value (changing attributes only)


@dataclass
class ConversationWorkload:
    users: int
    days: int
    seed: int
    turns: list[Turn]
    questions: list[Question]
    events: list[tuple[float, int, str, int]] = field(default_factory=list)  # (t, order, "add"/"ask", index)


# ------------------------------------------------------------------ generator


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _date(day: int, style: int) -> str:
    """A calendar day in one of three spellings (people write dates differently)."""
    d = datetime.fromtimestamp(T0 + day * DAY, tz=UTC)
    if style == 0:
        return f"the {_ordinal(d.day)} of {d.strftime('%B')}"
    if style == 1:
        return f"{d.strftime('%B')} {d.day}"
    return f"{d.strftime('%A')}, {d.day} {d.strftime('%B')}"


@dataclass
class _Item:
    """A fact-bearing exchange planned for the first session on or after ``day``."""

    day: int
    kind: str  # first, change, restate, old, passing, distractor
    attribute: str
    version: int = 0
    value: Any = None
    old: Any = None


class _UserGen:
    """The timeline of one user; its own random stream, so that a user's
    conversations do not depend on how many users are generated."""

    def __init__(self, u: int, days: int, seed: int) -> None:
        self.u = u
        self.days = days
        self.rng = np.random.default_rng([seed, 7919, u])
        self.name = USER_NAMES[u % len(USER_NAMES)]
        self.turns: list[Turn] = []
        self.statements: dict[str, list[tuple[str, int, float]]] = {}  # attribute -> (turn id, version, t)
        self.asked: set[str] = set()
        self.user_said: dict[tuple[str, int], list[str]] = {}  # (attribute, version) -> the user's statements

    # -- helpers
    def pick(self, seq: Sequence[Any], avoid: Any = None) -> Any:
        while True:
            v = seq[int(self.rng.integers(len(seq)))]
            if v != avoid or len(seq) == 1:
                return v

    def task(self) -> tuple[str, str]:
        """A request this user has not made yet, when one is found in a few draws."""
        for _ in range(20):
            ask, answer = make_task(self.rng)
            if ask not in self.asked:
                break
        self.asked.add(ask)
        return ask, answer

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    # -- plan
    def plan(self) -> list[_Item]:
        rng, days = self.rng, self.days
        items: list[_Item] = []
        self.project = self.pick(PROJECTS)
        self.other_project = self.pick(PROJECTS, avoid=self.project)
        self.tool_kind = TOOL_KINDS[int(rng.integers(len(TOOL_KINDS)))]
        self.values: dict[str, list[Any]] = {}
        # changing attributes: first statement early, then 1-3 changes, each value restated now and then
        # (first day from, to, changes from, to, days at least between two values): nobody moves house twice a week
        spans = {
            "deadline": (0, 6, 1, 3, 5),
            "manager": (0, 10, 1, 2, 10),
            "diet": (0, 14, 1, 3, 7),
            "home": (0, 14, 1, 2, 18),
            "tool": (0, 10, 1, 2, 10),
        }
        for attr, (lo, hi, cmin, cmax, gap) in spans.items():
            first = int(rng.integers(lo, hi + 1))
            n_changes = int(rng.integers(cmin, cmax + 1))
            # a short timeline has room for fewer changes (checked without drawing, so that the
            # draws, hence the workload, are the same whenever they fit)
            room = days - 2 - (first + gap)
            while n_changes > 1 and room < gap * (n_changes - 1) + 1:
                n_changes -= 1
            while True:
                change_days = sorted(rng.choice(np.arange(first + gap, days - 2), n_changes, replace=False).tolist())
                if all(b - a >= gap for a, b in zip(change_days, change_days[1:])):
                    break
            vals = self._values(attr, first, change_days)
            self.values[attr] = vals
            starts = [first, *change_days]
            for ver, start in enumerate(starts):
                items.append(
                    _Item(
                        start, "first" if ver == 0 else "change", attr, ver, vals[ver], vals[ver - 1] if ver else None
                    )
                )
                end = starts[ver + 1] if ver + 1 < len(starts) else days
                for _ in range(int(rng.integers(0, 3))):  # 0-2 restatements while the value holds
                    if end - start > 1:
                        items.append(_Item(int(rng.integers(start + 1, end)), "restate", attr, ver, vals[ver]))
        # old details: in the first two weeks, once
        kind, species = PETS[int(rng.integers(len(PETS)))]
        pet_day = int(rng.integers(0, 9))
        self.species = species
        items.append(_Item(pet_day, "old", "pet.kind", value=kind))
        items.append(_Item(pet_day + int(rng.integers(0, 4)), "old", "pet.name", value=self.pick(PET_NAMES)))
        items.append(_Item(int(rng.integers(0, 11)), "old", "hometown", value=self.pick(TOWNS)))
        cond, med = CONDITIONS[int(rng.integers(len(CONDITIONS)))]
        cond_day = int(rng.integers(0, 10))
        items.append(_Item(cond_day, "old", "medical.condition", value=cond))
        items.append(_Item(cond_day + int(rng.integers(2, 6)), "old", "medical.medication", value=med))
        items.append(_Item(int(rng.integers(0, 13)), "old", "studies", value=self.pick(SUBJECTS)))
        # passing details: three of them, mid-timeline
        for attr in rng.choice(sorted(PASSING), 3, replace=False).tolist():
            items.append(
                _Item(
                    int(rng.integers(15, min(51, days - 1))),
                    "passing",
                    "passing." + attr,
                    value=self.pick(PASSING[attr][0]),
                )
            )
        # distractors: about one every other session, on any attribute
        for _ in range(int(days * 0.3)):
            items.append(
                _Item(
                    int(rng.integers(0, days)),
                    "distractor",
                    self.pick([*CHANGING, "pet", "hometown", "medical", "studies"]),
                )
            )
        return items

    def _values(self, attr: str, first: int, change_days: list[int]) -> list[Any]:
        n = 1 + len(change_days)
        if attr == "deadline":  # a calendar day, moved by one to four weeks (later, now and then earlier)
            out = [first + int(self.rng.integers(35, 71))]
            for d in change_days:
                shift = int(self.rng.integers(7, 29)) * (1 if self.chance(0.8) else -1)
                nxt = out[-1] + shift
                while nxt <= d + 5 or nxt in out:  # a deadline in the past, or a date that was already stated
                    nxt = out[-1] + int(self.rng.integers(7, 29))
                out.append(nxt)
            return out
        pools: dict[str, Sequence[Any]] = {
            "manager": MANAGERS,
            "diet": DIETS,
            "tool": self.tool_kind[2],
            "home": STREETS,
        }
        pool = pools[attr]
        vals = []
        for _ in range(n):
            # values never come back (no "we went back to Jira"): a stale turn could then say the very words
            # of a current one
            v = self.pick(pool)
            while v in vals:
                v = self.pick(pool)
            vals.append(v)
        if attr == "home":
            vals = [f"{int(self.rng.integers(2, 90))} {s}" for s in vals]
        return vals

    # -- text
    def _fill(self, template: str, attr: str, value: Any, old: Any = None) -> str:
        def show(v: Any) -> str:
            if attr == "deadline":
                return _date(int(v), int(self.rng.integers(3)))
            if attr == "manager":
                return str(v[0])
            return str(v)

        pr = value[1] if attr == "manager" and isinstance(value, tuple) else "they"
        # a distractor's other value: never the user's own street or tool ("have you heard of X?" about the
        # team's own tool would not be said); a relative's diet may well be the user's
        mine = {str(v).split(" ", 1)[-1] for v in getattr(self, "values", {}).get(attr, [])}
        others = {
            "home": [x for x in STREETS if x not in mine],
            "tool": [x for x in self.tool_kind[2] if x not in mine],
        }.get(attr) or [""]
        x = {
            "deadline": self.other_project,
            "diet": self.pick(DIETS),
            "home": self.pick(others),
            "tool": self.pick(others),
            "manager": "",
        }.get(attr, "")
        text = template.format(
            v=show(value) if value is not None else "",
            old=show(old) if old is not None else "",
            p=self.project,
            pr=pr,
            cat=self.tool_kind[0],
            use=self.tool_kind[1],
            sp=getattr(self, "species", ""),
            x=x,
        )
        return text[0].upper() + text[1:]

    def _with_frame(self, sentence: str, template: str) -> str:
        """A statement inside the small talk that carries it."""
        pre = self.pick(FACT_PREFIX)
        if ":" in template or template.startswith(FRAMED):
            pre = ""  # the template already has its own lead-in
        # lower-case the first word after a prefix, unless it is a name, a value or "I"
        if pre and not template.startswith(("{", "I ", "I'")):
            sentence = sentence[0].lower() + sentence[1:]
        return (pre + sentence + self.pick(FACT_SUFFIX)).strip()

    def exchange(self, item: _Item) -> list[tuple[str, str, str, str | None, int]]:
        """The turns of one planned item: (speaker, text, role, attribute, version)."""
        a, ver = item.attribute, item.version
        out: list[tuple[str, str, str, str | None, int]] = []
        if item.kind in ("first", "change"):
            spec = CHANGING[a]
            tpl = self.pick(spec[item.kind])
            said = self._with_frame(self._fill(tpl, a, item.value, item.old), tpl)
            out.append(("user", said, "fact", a, ver))
            self.user_said.setdefault((a, ver), []).append(said)
            if self.chance(0.65):
                echo = spec["echo"] if item.kind == "change" else spec["echo_first"]
                out.append(("assistant", self._fill(self.pick(echo), a, item.value, item.old), "echo", a, ver))
            else:
                out.append(("assistant", self.pick(ACK_ASSISTANT), "ack", None, 0))
        elif item.kind == "restate":
            spec = CHANGING[a]
            earlier = self.user_said.get((a, ver), [])
            if earlier and self.chance(0.3):  # the user repeats an earlier statement of the same value
                said = self.pick(earlier)
                if self.chance(0.5):  # near-duplicate; otherwise word for word, as pasted
                    said = self.pick(RESTATE_PREFIX) + said[0].lower() + said[1:]
            else:
                said = self._fill(self.pick(spec["restate"]), a, item.value)
            out.append(("user", said, "restate", a, ver))
            if self.chance(0.6):
                out.append(("assistant", self._fill(self.pick(spec["restate_echo"]), a, item.value), "echo", a, ver))
            else:
                out.append(("assistant", self.pick(ACK_ASSISTANT), "ack", None, 0))
        elif item.kind == "old":
            spec = OLD[a]
            tpl = self.pick(spec["say"])
            out.append(("user", self._with_frame(self._fill(tpl, a, item.value), tpl), "fact", a, 0))
            if self.chance(0.6):
                out.append(("assistant", self._fill(self.pick(spec["echo"]), a, item.value), "echo", a, 0))
            else:
                out.append(("assistant", self.pick(ACK_ASSISTANT), "ack", None, 0))
        elif item.kind == "passing":
            values, says, _ = PASSING[a.split(".", 1)[1]]
            ask, answer = self.task()
            out.append(("user", self.pick(says).format(v=item.value, task=ask), "passing", a, 0))
            out.append(("assistant", answer, "task", None, 0))  # the assistant answers the request, not the aside
        else:  # distractor: shares words with a fact, states none of the user's
            if a in CHANGING:
                said = self._fill(self.pick(CHANGING[a]["distractor"]), a, None)
            else:
                x = {
                    "hometown": self.pick(TOWNS),
                    "medical": self.pick(CONDITIONS)[0],
                    "studies": self.pick(SUBJECTS),
                }.get(a, "")
                said = self.pick(OLD_DISTRACTORS[a]).format(x=x)
            out.append(("user", said, "distractor", None, 0))
            out.append(
                ("assistant", self.pick(ACK_ASSISTANT + ["Ha, I hear that a lot.", "That's fair."]), "ack", None, 0)
            )
        return out

    # -- sessions
    def session_days(self) -> list[tuple[int, float]]:
        """(day, start hour) of every session: a few a week, at realistic times."""
        out: list[tuple[int, float]] = []
        for d in range(self.days):
            weekend = d % 7 >= 5
            if d != 0 and not self.chance(0.3 if weekend else 0.45):
                continue
            slots = [(10.0, 21.5)] if weekend else [(7.5, 9.5), (12.0, 13.5), (18.0, 22.5)]
            weights = None if weekend else [0.35, 0.2, 0.45]
            n = 2 if self.chance(0.15) and not weekend else 1
            chosen = sorted(self.rng.choice(len(slots), n, replace=False, p=weights).tolist()) if not weekend else [0]
            for c in chosen:
                lo, hi = slots[c]
                out.append((d, float(self.rng.uniform(lo, hi))))
        return out

    def generate(self) -> None:
        items = sorted(self.plan(), key=lambda it: it.day)
        sessions = self.session_days()
        per_session: list[list[_Item]] = [[] for _ in sessions]
        si = 0
        room = [MAX_ITEMS] * len(sessions)
        for it in items:  # each item goes to the first session on or after its day with room left
            while si < len(sessions) and (sessions[si][0] < it.day or room[si] <= 0):
                si += 1
            at = min(si, len(sessions) - 1)
            per_session[at].append(it)
            room[at] -= it.kind != "distractor"  # distractors are small talk: they take no fact's place
        for s, ((day, hour), its) in enumerate(zip(sessions, per_session)):
            self._session(s, day, hour, its)

    def _session(self, s: int, day: int, hour: float, its: list[_Item]) -> None:
        rng = self.rng
        part = "morning" if hour < 11 else "day" if hour < 17 else "evening"
        blocks: list[list[tuple[str, str, str, str | None, int]]] = []
        nm = f", {self.name}" if self.chance(0.4) else ""
        blocks.append(
            [
                ("user", self.pick(GREET_USER[part]), "greeting", None, 0),
                ("assistant", self.pick(GREET_ASSISTANT).format(nm=nm), "greeting", None, 0),
            ]
        )
        if self.chance(0.3):
            u_line, a_line = self.pick(SMALL_TALK)
            blocks.append([("user", u_line, "small_talk", None, 0), ("assistant", a_line, "small_talk", None, 0)])
        # an attribute's statements keep their planned order: a change never comes before its first statement
        for it in its:
            blocks.append(self.exchange(it))
        target = int(rng.integers(6, 21))
        closing = self.chance(0.75)
        used = sum(len(b) for b in blocks) + 2 * closing
        tasks: list[list[tuple[str, str, str, str | None, int]]] = []
        while used + 2 <= target or not tasks:
            ask, answer = self.task()
            block: list[tuple[str, str, str, str | None, int]] = [
                ("user", ask[0].upper() + ask[1:], "task", None, 0),
                ("assistant", answer, "task", None, 0),
            ]
            if used + 4 <= target and self.chance(0.35):
                fu, fa = self.pick(FOLLOW_UPS)
                block += [("user", fu, "task", None, 0), ("assistant", fa, "task", None, 0)]
            tasks.append(block)
            used += len(block)
        # facts come up between the tasks, not always first, but in their planned order
        others = blocks[1:]
        n_body = len(others) + len(tasks)
        other_at = set(rng.choice(n_body, len(others), replace=False).tolist())
        it_other, it_task = iter(others), iter(tasks)
        merged = [blocks[0], *(next(it_other) if pos in other_at else next(it_task) for pos in range(n_body))]
        if closing:
            merged.append(
                [
                    ("user", self.pick(CLOSE_USER), "closing", None, 0),
                    ("assistant", self.pick(CLOSE_ASSISTANT), "closing", None, 0),
                ]
            )
        t = T0 + day * DAY + hour * HOUR
        n = 0
        for block in merged:
            for speaker, text, role, attr, ver in block:
                tid = f"u{self.u}-s{s}-t{n}"
                self.turns.append(Turn(tid, self.u, s, t, speaker, text, role, attr, ver))
                if attr is not None:
                    self.statements.setdefault(attr, []).append((tid, ver, t))
                n += 1
                # people type for a while; the assistant answers in seconds
                t += float(rng.uniform(3, 12)) if speaker == "user" else float(rng.uniform(15, 120))

    # -- questions
    def questions(self) -> list[Question]:
        out: list[Question] = []
        mid_t = T0 + MID_DAY * DAY + 7 * HOUR  # before any session of that day (they start at 7:30 at the earliest)
        end_t = T0 + self.days * DAY + 9 * HOUR  # the morning after the last day
        j = 0

        def ask(
            t: float,
            text: str,
            cat: str,
            attr: str,
            groups: tuple[frozenset[str], ...],
            stale: frozenset[str] = frozenset(),
        ) -> None:
            nonlocal j
            out.append(Question(f"u{self.u}-q{j}", self.u, t + j * MINUTE, text, cat, attr, groups, stale))
            j += 1

        for attr, spec in CHANGING.items():
            for t, cat in ((mid_t, "current_mid"), (end_t, "current")):
                said = [(tid, ver) for tid, ver, ts in self.statements.get(attr, []) if ts < t]
                if not said:
                    continue
                cur = max(ver for _, ver in said)
                if cat == "current_mid" and cur == 0:
                    continue  # mid-way questions only about attributes that have changed by then
                text = self._fill(self.pick(spec["ask"]), attr, None)
                ask(
                    t,
                    text,
                    cat,
                    attr,
                    (frozenset(tid for tid, ver in said if ver == cur),),
                    frozenset(tid for tid, ver in said if ver < cur),
                )

        def ids(attr: str) -> frozenset[str]:
            return frozenset(tid for tid, _, ts in self.statements.get(attr, []) if ts < end_t)

        for group, parts in (
            ("pet", ["pet.kind", "pet.name"]),
            ("hometown", ["hometown"]),
            ("medical", ["medical.condition", "medical.medication"]),
            ("studies", ["studies"]),
        ):
            ask(end_t, self.pick(OLD_ASK[group]), "old", group, tuple(ids(p) for p in parts))
        for attr in sorted(a for a in self.statements if a.startswith("passing.")):
            ask(end_t, self.pick(PASSING[attr.split(".", 1)[1]][2]), "passing", attr, (ids(attr),))
        return out


def conversation_workload(users: int = 30, days: int = 60, seed: int = 0) -> ConversationWorkload:
    """The logged conversations of ``users`` users over ``days`` days and the
    questions asked about them (seeded, reproducible; user ``u`` is the same
    whatever ``users`` is)."""
    if days < MID_DAY + 8:
        raise ValueError(f"days must be at least {MID_DAY + 8} (the mid-way questions are on day {MID_DAY})")
    turns: list[Turn] = []
    questions: list[Question] = []
    for u in range(users):
        g = _UserGen(u, days, seed)
        g.generate()
        turns += g.turns
        questions += g.questions()
    ev = [(tr.t, 0, "add", i) for i, tr in enumerate(turns)] + [(q.t, 1, "ask", i) for i, q in enumerate(questions)]
    ev.sort()
    return ConversationWorkload(users, days, seed, turns, questions, ev)


# ------------------------------------------------------------------ embeddings


def embed_conversations(
    wl: ConversationWorkload, emb: Any, cfg: BenchConfig | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Vectors of every turn and question; each distinct text is embedded once
    (greetings and acknowledgements repeat a lot). No topics: the synthetic
    embedder sees the words only, like the real model."""
    keys: dict[str, int] = {}
    for tr in wl.turns:
        keys.setdefault(tr.text, len(keys))
    for q in wl.questions:
        keys.setdefault(q.text, len(keys))
    texts = list(keys)
    out = np.empty((len(texts), 384), np.float32)
    step = 256
    with Progress(len(texts), "(h) embed", enabled=None if cfg is None else cfg.progress) as bar:
        for s in range(0, len(texts), step):
            part = texts[s : s + step]
            out[s : s + len(part)] = emb.embed(part, [()] * len(part))
            bar.update(len(part))
    tv = out[[keys[tr.text] for tr in wl.turns]]
    qv = out[[keys[q.text] for q in wl.questions]]
    return tv, qv


def embedder_label(emb: Any) -> str:
    if isinstance(emb, Hashing):
        return "HashingEmbedder (synthetic: hashed bag of words, no topics)"
    return str(emb.name)


# ------------------------------------------------------------------ scoring

CATEGORIES = ("current", "current_mid", "old", "passing")
TIER_ORDER = ("hot", "warm", "cold", "gone")


@dataclass
class Score:
    """What one scorer achieved on the questions."""

    name: str
    n: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CATEGORIES})
    any_at_k: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CATEGORIES})
    first_at_1: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CATEGORIES})
    stale_at_1: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CATEGORIES})
    stale_questions: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CATEGORIES})
    multi: int = 0  # questions whose answer needs two turns
    multi_all_at_k: int = 0
    misses_by_tier: dict[str, dict[str, int]] = field(default_factory=lambda: {c: {} for c in CATEGORIES})
    tiers_end: dict[str, int] = field(default_factory=dict)
    sweeps: dict[str, int] = field(default_factory=dict)
    per_question: list[dict[str, Any]] = field(default_factory=list)
    hits: int = 0  # hits returned over all questions
    cold_hits: int = 0  # of which found in the cold tier
    reactivations: int = 0  # archived turns brought back because a search used them
    elapsed_s: float = 0.0
    memories: int = 0  # distinct memories the turns were stored as (fewer than the turns when deduplicated)
    retired: dict[str, Any] = field(default_factory=dict)  # supersession outcome: see retirement()

    def record(
        self, q: Question, ranked: list[str], stored: dict[str, str], k: int, miss_tier: str | None = None
    ) -> bool:
        """Score one answer (``ranked``: the returned ids, best first; ``stored``: turn id -> the id
        the store gave it). Returns whether any evidence was in the top ``k``."""
        top = ranked[:k]
        groups = [{stored[t] for t in g} for g in q.evidence]
        ev = set().union(*groups)
        stale = {stored[t] for t in q.stale} - ev  # a stored id that is also evidence is never stale
        c = q.category
        self.n[c] += 1
        hit = bool(ev & set(top))
        self.any_at_k[c] += hit
        first = top[0] if top else None
        self.first_at_1[c] += first in ev
        if stale:
            self.stale_questions[c] += 1
            self.stale_at_1[c] += first in stale
        if len(groups) > 1:
            self.multi += 1
            self.multi_all_at_k += all(g & set(top) for g in groups)
        rank = next((i + 1 for i, mid in enumerate(top) if mid in ev), None)
        if not hit:
            tier = miss_tier or "hot"  # a scorer without tiers holds everything: the evidence was outranked
            self.misses_by_tier[c][tier] = self.misses_by_tier[c].get(tier, 0) + 1
        self.per_question.append(
            {
                "q": q.id,
                "category": c,
                "attribute": q.attribute,
                "rank": rank,
                "stale_at_1": bool(stale) and first in stale,
                **({"miss_tier": miss_tier} if not hit and miss_tier else {}),
            }
        )
        return hit

    def row(self) -> dict[str, Any]:
        def rate(num: int, den: int) -> float | None:
            return num / den if den else None

        out: dict[str, Any] = {
            "scorer": self.name,
            "questions": sum(self.n.values()),
            "recall_at_10": rate(sum(self.any_at_k.values()), sum(self.n.values())),
        }
        for c in CATEGORIES:
            out[f"recall_at_10_{c}"] = rate(self.any_at_k[c], self.n[c])
            out[f"evidence_at_1_{c}"] = rate(self.first_at_1[c], self.n[c])
            out[f"n_{c}"] = self.n[c]
        for c in ("current", "current_mid"):
            out[f"stale_hit_at_1_{c}"] = rate(self.stale_at_1[c], self.stale_questions[c])
        out["all_evidence_at_10"] = rate(self.multi_all_at_k, self.multi)
        out["multi_evidence_questions"] = self.multi
        out.update(
            hot=self.tiers_end.get("hot", 0),
            warm=self.tiers_end.get("warm", 0),
            cold=self.tiers_end.get("cold", 0),
            misses_by_tier=self.misses_by_tier,
            sweeps=self.sweeps,
            cold_hit_share=rate(self.cold_hits, self.hits),
            reactivations=self.reactivations,
            elapsed_s=self.elapsed_s,
            memories=self.memories,
            wrongly_retired=self.retired.get("wrong_share") if self.retired else None,
            retired=self.retired,
        )
        return out


def _stored_identity(wl: ConversationWorkload) -> dict[str, str]:
    return {tr.id: tr.id for tr in wl.turns}


def score_plain(wl: ConversationWorkload, tv: np.ndarray, qv: np.ndarray, k: int = 10) -> Score:
    """Cosine similarity over every turn the user had said before the question: no forgetting."""
    t0 = time.perf_counter()
    sc = Score("plain similarity (no forgetting)")
    by_user: dict[int, list[int]] = {}
    for i, tr in enumerate(wl.turns):
        by_user.setdefault(tr.user, []).append(i)
    stored = _stored_identity(wl)
    for j, q in enumerate(wl.questions):
        idx = np.asarray([i for i in by_user.get(q.user, []) if wl.turns[i].t < q.t], np.int64)
        sims = tv[idx] @ qv[j]
        order = np.argsort(-sims, kind="stable")[:k]
        sc.record(q, [wl.turns[int(idx[o])].id for o in order], stored, k)
    sc.tiers_end = {"hot": len(wl.turns), "warm": 0, "cold": 0}  # keeps everything, in memory
    sc.memories = len(wl.turns)
    sc.elapsed_s = time.perf_counter() - t0
    return sc


@dataclass(frozen=True)
class TierVariant:
    """One tierstore row: how the agent stores turns and searches.

    policy: a dict for :meth:`Policy.from_dict` (``None``: the default policy).
    search_kwargs: passed to every ``search`` as they are (for options the
    store has, e.g. ``include_warm``; a keyword the store does not know fails
    loudly rather than being emulated here).
    add_kwargs: passed to every ``add`` besides the turn's text, vector and id.
    """

    name: str
    memory_type: str = "conversation"
    policy: dict[str, Any] | None = None
    search_kwargs: dict[str, Any] = field(default_factory=dict)
    add_kwargs: dict[str, Any] = field(default_factory=dict)
    text_query: bool = False  # search(..., text=question): the keyword signal (issue 28) beside the vector


# The rows of the suite: what a new agent gets by default, and the default
# before deduplication (issue 16) for comparison.
TIERSTORE_ROWS: list[TierVariant] = [
    TierVariant("tierstore, default policy, turns as conversation"),
    TierVariant("tierstore, default policy, turns as fact", memory_type="fact"),
    # the cold tier (issue 15): never searched (the behaviour before it), always, and "auto" at other bars
    TierVariant("tierstore, turns as conversation, include_cold=false", search_kwargs={"include_cold": False}),
    TierVariant("tierstore, turns as conversation, include_cold=true", search_kwargs={"include_cold": True}),
    *(
        TierVariant(f"tierstore, turns as conversation, cold bar {b}", policy={"scoring": {"cold_similarity_bar": b}})
        for b in (0.3, 0.4, 0.5, 0.7)
    ),
    TierVariant(
        "tierstore, turns as conversation, similar_first=false (merge by score alone)",
        policy={"scoring": {"similar_first": False}},
    ),
    TierVariant("tierstore, turns as conversation, dedupe off", policy={"dedupe": "off"}),
    # issue 15's second round: the recency weight, cold hits reactivated by search, the cold order
    TierVariant(
        "tierstore, turns as conversation, the scoring before this run (recency weight 0.15, record_access_cold=true)",
        policy={"scoring": {"weights": former_weights(0.15), "record_access_cold": True}},
    ),
    *(
        TierVariant(
            f"tierstore, turns as conversation, recency weight {r}", policy={"scoring": {"weights": former_weights(r)}}
        )
        for r in (0.15, 0.10, 0.08, 0.02)
    ),
    TierVariant(
        "tierstore, turns as conversation, record_access_cold=true", policy={"scoring": {"record_access_cold": True}}
    ),
    TierVariant(
        "tierstore, turns as conversation, cold_order=relevance", policy={"scoring": {"cold_order": "relevance"}}
    ),
]

# The supersession bar sweep (``--set h.sweep=true``): turns as fact (automatic
# supersession is off for conversation), the default policy with each bar.
SWEEP_BARS: tuple[float | str, ...] = ("off", 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55)


def sweep_rows() -> list[TierVariant]:
    return [
        TierVariant(
            f"turns as fact, supersede_above={b}",
            memory_type="fact",
            policy={"types": {"fact": {"supersede_above": b, "supersede_above_shared_tag": "off"}}},
        )
        for b in SWEEP_BARS
    ]


def retirement(
    wl: ConversationWorkload, stored: dict[str, str], superseded_by: dict[str, str | None]
) -> dict[str, Any]:
    """How supersession went against the ground truth (see suite g's
    ``retirement``). *Facts*: the memories holding a turn that states an
    attribute's value (statements, echoes, restatements, old and passing
    details). A fact is **wrongly retired** if it was marked superseded while
    still true: no turn stating a newer value of its attribute had been said
    by the time the superseding turn was; of those, **by a restatement**: the
    superseding turn states the same value (nothing is lost: the newer turn
    says it). **Stale retired**: of the facts a newer value replaced by the
    end, the share that were marked."""
    turn = {tr.id: tr for tr in wl.turns}
    said: dict[tuple[int, str], list[tuple[float, int]]] = {}  # (user, attribute) -> (t, version)
    holders: dict[str, list[Turn]] = {}
    for tr in wl.turns:
        if tr.attribute is not None:
            said.setdefault((tr.user, tr.attribute), []).append((tr.t, tr.version))
            holders.setdefault(stored[tr.id], []).append(tr)

    def newer_by(tr: Turn, t: float) -> bool:
        return any(ts <= t and v > tr.version for ts, v in said[(tr.user, tr.attribute)])  # type: ignore[index]

    wrong = restated = stale = stale_marked = marked = 0
    for mid, trs in holders.items():
        replaced = all(newer_by(tr, float("inf")) for tr in trs)
        stale += replaced
        by = superseded_by.get(mid)
        if by is None:
            continue
        marked += 1
        stale_marked += replaced
        y = turn.get(by)
        t = y.t if y is not None else float("inf")
        if not all(newer_by(tr, t) for tr in trs):
            wrong += 1
            if y is not None and any(y.attribute == tr.attribute and y.version == tr.version for tr in trs):
                restated += 1
    n = len(holders)
    return {
        "facts": n,
        "marked": marked,
        "wrong": wrong,
        "wrong_share": wrong / max(1, n),
        "wrong_by_restatement": restated,
        "wrong_other": wrong - restated,
        "wrong_other_share": (wrong - restated) / max(1, n),
        "stale": stale,
        "stale_retired": stale_marked,
        "stale_retired_share": stale_marked / max(1, stale),
    }


def score_tierstore(
    wl: ConversationWorkload, tv: np.ndarray, qv: np.ndarray, cfg: BenchConfig, variant: TierVariant, k: int = 10
) -> Score:
    """Replay the conversations into a real :class:`TierStore` on a
    :class:`ManualClock`: one namespace per user, every turn added when it is
    said, a ``sweep()`` every midnight until nothing is due, ``search(k)`` at
    question time. A missed question records the best tier its evidence was
    in at that moment (``get`` reads without counting an access)."""
    from tierstore import ManualClock, Policy, TierStore

    t0 = time.perf_counter()
    sc = Score(variant.name)
    sweeps = {"demoted": 0, "archived": 0, "deleted": 0}
    stored: dict[str, str] = {}
    nights = [T0 + (d + 1) * DAY for d in range(wl.days)]
    ni = 0
    policy = Policy.from_dict(variant.policy) if variant.policy is not None else None
    with workdir(cfg, "conversation") as d:
        clock = ManualClock(T0)
        store = TierStore.open(d / "store", dim=tv.shape[1], clock=clock, policy=policy)
        try:

            def night() -> None:
                sweep_until_done(store, sweeps)

            with Progress(len(wl.events), f"(h) {variant.name}", enabled=cfg.progress) as bar:
                for t, _, kind, i in wl.events:
                    while ni < len(nights) and nights[ni] <= t:
                        clock.set(nights[ni])
                        night()
                        ni += 1
                    clock.set(max(t, clock.now()))
                    if kind == "add":
                        tr = wl.turns[i]
                        stored[tr.id] = store.add(
                            f"u{tr.user}",
                            tr.text,
                            tv[i],
                            memory_type=variant.memory_type,
                            id=tr.id,
                            **variant.add_kwargs,
                        )
                    else:
                        q = wl.questions[i]
                        ns = f"u{q.user}"
                        extra: dict[str, Any] = {"text": q.text} if variant.text_query else {}
                        hits = store.search(ns, qv[i], k=k, **variant.search_kwargs, **extra)
                        ranked = [h.id for h in hits]
                        sc.hits += len(hits)
                        sc.cold_hits += sum(h.memory.tier == "cold" for h in hits)
                        ev = {stored[t] for g in q.evidence for t in g}
                        miss_tier = None
                        if not ev & set(ranked[:k]):
                            tiers = set()
                            for mid in ev:
                                m = store.get(ns, mid)
                                tiers.add("gone" if m is None else m.tier)
                            miss_tier = min(tiers, key=TIER_ORDER.index)
                        sc.record(q, ranked, stored, k, miss_tier)
                    bar.update()
                while ni < len(nights):
                    clock.set(nights[ni])
                    night()
                    ni += 1
            end = store.stats()
            sc.tiers_end = dict(end.by_tier)
            sc.reactivations = end.lifecycle["events"]["by_kind"]["reactivate"]
            marks: dict[str, str | None] = {}
            for tr in wl.turns:
                mid = stored[tr.id]
                if tr.attribute is not None and mid not in marks:
                    got = store.get(f"u{tr.user}", mid)
                    marks[mid] = None if got is None else got.superseded_by
        finally:
            store.close()
    sc.memories = len(set(stored.values()))
    sc.retired = retirement(wl, stored, marks)
    sc.sweeps = sweeps
    sc.elapsed_s = time.perf_counter() - t0
    return sc


# ------------------------------------------------------------------ the suite

HEADER = [
    "scorer",
    "recall@10",
    "current",
    "current day 30",
    "old",
    "passing",
    "all-evidence@10",
    "current evidence@1",
    "stale-hit@1",
    "stale-hit@1 day 30",
    "hot",
    "warm",
    "cold",
    "memories",
    "cold-hit share",
    "reactivations",
    "wrongly retired",
]
SWEEP_HEADER = [
    "supersede_above",
    "recall@10",
    "current",
    "current day 30",
    "old",
    "passing",
    "all-evidence@10",
    "current evidence@1",
    "stale-hit@1",
    "stale-hit@1 day 30",
    "wrongly retired",
    "of which restated",
    "stale retired",
]
MISS_HEADER = [
    "scorer",
    "category",
    "questions",
    "missed",
    "best evidence hot (outranked)",
    "in warm (outranked)",
    "in cold (not reached, or outranked)",
    "deleted",
]


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def _cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            r["scorer"],
            _f(r["recall_at_10"]),
            _f(r["recall_at_10_current"]),
            _f(r["recall_at_10_current_mid"]),
            _f(r["recall_at_10_old"]),
            _f(r["recall_at_10_passing"]),
            _f(r["all_evidence_at_10"]),
            _f(r["evidence_at_1_current"]),
            _f(r["stale_hit_at_1_current"]),
            _f(r["stale_hit_at_1_current_mid"]),
            str(r["hot"]),
            str(r["warm"]),
            str(r["cold"]),
            str(r["memories"]),
            _f(r.get("cold_hit_share")),
            str(r.get("reactivations", 0)),
            _retired(r),
        ]
        for r in rows
    ]


def _retired(r: dict[str, Any]) -> str:
    ret = r.get("retired") or {}
    return f"{ret['wrong_share']:.3f} ({ret['wrong']}/{ret['facts']})" if ret else "—"


def _sweep_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            str(r["supersede_above"]),
            *_cells([r])[0][1:10],
            _retired(r),
            str(r["retired"]["wrong_by_restatement"]),
            f"{r['retired']['stale_retired_share']:.3f}",
        ]
        for r in rows
    ]


def _miss_cells(rows: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for r in rows:
        for c in CATEGORIES:
            m = r["misses_by_tier"][c]
            out.append(
                [
                    r["scorer"],
                    c,
                    str(r[f"n_{c}"]),
                    str(sum(m.values())),
                    str(m.get("hot", 0)),
                    str(m.get("warm", 0)),
                    str(m.get("cold", 0)),
                    str(m.get("gone", 0)),
                ]
            )
    return out


def run(cfg: BenchConfig) -> SuiteResult:
    users = int(cfg.size("h.users", 30, 8))
    days = int(cfg.size("h.days", 60, 60))
    k = int(cfg.size("h.k", 10, 10))
    kind = str(cfg.sizes.get("h.embedder", "auto"))
    res = SuiteResult("h", "forgetting quality on logged conversations")
    wl = conversation_workload(users, days, seed=cfg.seed + 83)
    emb = make_embedder(kind)
    t0 = time.perf_counter()
    tv, qv = embed_conversations(wl, emb, cfg)
    embed_s = time.perf_counter() - t0
    scores = [score_plain(wl, tv, qv, k)] + [score_tierstore(wl, tv, qv, cfg, v, k) for v in TIERSTORE_ROWS]
    rows = [s.row() for s in scores]
    if cfg.size("h.sweep", False, False):
        srows = []
        for v in sweep_rows():
            r = score_tierstore(wl, tv, qv, cfg, v, k).row()
            r["supersede_above"] = v.policy["types"]["fact"]["supersede_above"]  # type: ignore[index]
            srows.append(r)
        res.data["sweep_rows"] = srows
        res.tables.append(
            (
                "automatic supersession: bar sweep, turns as fact (default policy otherwise)",
                SWEEP_HEADER,
                _sweep_cells(srows),
            )
        )
    res.data["rows"] = rows
    res.data["per_question"] = {s.name: s.per_question for s in scores}
    res.data["variants"] = [
        {
            "name": v.name,
            "memory_type": v.memory_type,
            "policy": v.policy,
            "search_kwargs": v.search_kwargs,
            "add_kwargs": v.add_kwargs,
        }
        for v in TIERSTORE_ROWS
    ]
    label = embedder_label(emb)
    res.tables.append(
        (
            f"forgetting quality on logged conversations — {users} users x {days} days, {len(wl.turns)} "
            f"turns, {len(wl.questions)} questions, k={k}, embedder: {label}",
            HEADER,
            _cells(rows),
        )
    )
    res.tables.append(
        ("where the evidence of the missed questions was, at question time", MISS_HEADER, _miss_cells(rows))
    )
    cats = {c: sum(q.category == c for q in wl.questions) for c in CATEGORIES}
    res.extra.update(
        embedder=label,
        users=users,
        days=days,
        turns=len(wl.turns),
        distinct_texts=len({tr.text for tr in wl.turns}),
        questions=len(wl.questions),
        questions_by_category=cats,
        embed_s=round(embed_s, 1),
        scorer_s={s.name: round(s.elapsed_s, 1) for s in scores},
    )
    res.notes.append(
        "recall@10: any evidence turn among the 10 hits (current: the value an attribute has at the end, its "
        "earlier values are stale; current day 30: the same asked on day 30 about attributes changed by then; old: "
        "details stated once in the first weeks; passing: details mentioned once in a turn about something else); "
        "all-evidence@10: questions whose answer needs two turns (pet kind and name, diagnosis and medication) with "
        "both among the 10; current evidence@1: the first hit states the current value; stale-hit@1: the first hit "
        "states an earlier value (0 also when nothing about the attribute is found: read it beside recall); "
        "hot/warm/cold: memories per tier after the last night and the questions (plain similarity keeps all); "
        "memories: the distinct memories the turns were stored as (a re-said turn is deduplicated); wrongly "
        "retired: the share of fact-bearing memories marked superseded while still true (see retirement()); of "
        "which restated: superseded by a turn stating the same value; stale retired: the share of replaced "
        "values that were marked."
    )
    return res
