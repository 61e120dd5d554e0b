"""A chat log full of names, places, dates and objects: the second workload
of the keyword signal (issue 28), built unlike suite h.

Suite h (:mod:`tierstore.bench.conversation`) follows a handful of
attributes per user (a deadline, a manager, a diet) through changes,
restatements and echoes. This log is what a personal assistant hears over
two months of short daily chats: **many one-off episodes**, each about
*someone or something with a name* — a friend's flight, an appointment
with a named doctor, where an object was left, a gift and who gave it, a
dinner at a named place, a phone number, a plate number, a booking
reference — told in a few turns (the user's statement, the assistant's
acknowledgement, sometimes a follow-up a few days later that changes the
date or the place). Every episode type is used many times per user with
different names, so the *templates* are alike (meaning alone cannot tell one
friend's flight from another's) and the *names* are what differ; the
same names also turn up in small talk that states nothing ("ran into Ilse at
the bakery"), so a name alone does not answer either.

Questions are asked the way people ask: about the name, in other words than
the statement ("When does Ilse get in?", "Which doctor am I seeing on the
eye thing?" is avoided: every question names its person, place or object).
Categories (those of :class:`~tierstore.bench.conversation.Score`):

* ``current`` — an episode whose date or place was changed by a follow-up,
  asked at the end; the evidence is the follow-up (and its echo), the first
  statement is stale;
* ``current_mid`` — the same asked on day 30 about changes made by then;
* ``old`` — an episode told in the first three weeks, asked at the end;
* ``passing`` — an episode told in the last five weeks, asked at the end.

The generator is seeded, independent of suite h's, and was fixed (committed)
before any weight was tried on it. (Its first version had one or two short
one-sentence episodes a day; every scorer, cosine alone included, found
0.999-1.000 of the evidence. The second had five a day, each template ~35
times per user: cosine alone 0.995. In this third version each statement
sits in a long message among two to four other sentences of the day (the
assistant's acknowledgement likewise), as people write. The versions were
judged by the cosine-alone and BM25-alone rows only; no TierStore weight ran
on the first two; docs/benchmarks.md has every version's rows.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tierstore.bench.conversation import (
    CATEGORIES,
    DAY,
    HOUR,
    MID_DAY,
    MINUTE,
    T0,
    ConversationWorkload,
    Question,
    Turn,
    _date,
)

FIRST_NAMES = """Ilse Thorvald Oksana Priyanka Bartholomew Xiomara Leopold Svetlana Chidi Anouk Matthias Yuki Radek Ines
Ottilie Kwame Linnea Dagny Ignatius Zofia Amadou Henrike Rafferty Solveig Teodor Marisol Casimir Nkechi Wilhelmina Jarek
Eulalia Benedikt Sunniva Florian Adaeze Perpetua Lorcan Hyacinth Ezekiel Mirela Ansel Philippa Tobiah Genoveva Kasimir
Ondine Barnaby Rosalind Evander Liesel Caspian Imogen Dragomir Aurelie Fintan Oriane Lysander Margit Ptolemy Seraphina
Augustin Henrietta Bronislav Clementine Desmond Elspeth Gottfried Isadora Jovan Klementyna Ludovic Mireille""".split()
SURNAMES = """Okafor Lindqvist Petrovic Abernathy Nakamura Castellanos Brzezinski Haverkamp Oyelaran Villeneuve Strand
Kowalczyk Marchetti Oduya Halvorsen Takahashi Delacroix Szymanski Achterberg Mbeki Fairweather Quintero Rasmussen
Yilmaz Vasquez Eriksen Dubois Moretti Sandoval Lindgren""".split()
CITIES = """Trondheim Valparaiso Ljubljana Tbilisi Cartagena Bratislava Hobart Tromso Bergamo Kraków Antwerp Oaxaca
Gdansk Salzburg Porto Brno Bilbao Zagreb Aarhus Tallinn Plovdiv Nantes Leipzig Cluj Girona Split Lyon Utrecht Graz
Malmo""".split()
VENUES = [
    "Smorgasburg",
    "Osteria Bellavista",
    "Café Lumière",
    "Bistro Nordlys",
    "Trattoria Marcella",
    "Kafana Zora",
    "Brasserie Colette",
    "Taverna Eleni",
    "Izakaya Hoshi",
    "Cantina Solana",
    "Gasthaus Linde",
    "Mezze Pasha",
    "Noodle Bar Kaiyo",
    "Bodega Rosalita",
]
OBJECTS = """umbrella charger passport tripod thermos scarf headphones keyring sketchbook drill blender kayak paddle
telescope ukulele backpack stroller bike-pump camera-lens raincoat laptop-stand yoga-mat toolbox""".split()
OBJECTS = [o.replace("-", " ") for o in OBJECTS]
SPECIALTIES = ["dentist", "eye doctor", "dermatologist", "physiotherapist", "cardiologist", "allergist"]
EVENTS = ["wedding", "birthday party", "housewarming", "graduation", "retirement dinner", "engagement party"]

SMALL_TALK = [
    "morning! slept badly, the neighbours had a party",
    "it's raining again, typical",
    "ok thanks",
    "sounds good",
    "can you remind me what we talked about yesterday?",
    "nothing much today, just work",
    "I'm so tired this week",
    "the train was late again this morning",
    "had a nice walk at lunch",
    "what's a good recipe for a quick dinner?",
    "lol",
    "thanks, that helps",
    "I need a holiday",
    "coffee first, then emails",
    "can you draft a polite reply declining the meeting?",
    "good night",
]
ASSISTANT_TALK = [
    "Good morning! Sorry to hear that — want me to keep today light?",
    "Got it.",
    "You're welcome!",
    "Here's a quick one: pasta with garlic, lemon and spinach, ready in fifteen minutes.",
    "Sure — here's a short, polite decline you can send.",
    "Sleep well!",
    "Happy to help.",
]


# What a long message says besides its news: people write several things in one message, so the
# sentence that matters is one of three to five (the assistant answers them all).
LIFE = [
    "ugh, what a day",
    "the printer at work jammed again and my manager wants the slides by noon",
    "I finally finished that novel, the ending was a letdown",
    "the kids have a cold so nobody slept",
    "traffic on the ring road was a nightmare this morning",
    "I'm trying to cut down on coffee, day three",
    "my sister sent photos of the new puppy, it's adorable",
    "the heating in the flat is broken again",
    "we're thinking about repainting the kitchen, maybe a pale green",
    "I signed up for a pottery class",
    "the quarterly report is finally done",
    "I keep forgetting to water the plants",
    "work is calm this week",
    "my knee has been bothering me after the runs",
    "I need to renew the car insurance soon",
    "the new neighbours are very friendly",
    "I started learning Spanish on an app",
    "it's been raining all week",
    "we watched a great documentary about octopuses",
    "I'm behind on my emails, as usual",
    "the landlord finally fixed the window",
    "thinking of getting a standing desk",
    "anyway, any ideas for dinner tonight?",
    "also, remind me to call the bank tomorrow",
    "what a week it's been",
    "I should really go to bed earlier",
    "my phone battery dies by lunch now",
]
HELP = [
    "For dinner, a quick stir-fry with whatever vegetables you have works well.",
    "I'll remind you about the bank tomorrow morning.",
    "Sorry about the rough night — hope everyone feels better.",
    "Pale green sounds lovely for a kitchen.",
    "Congratulations on finishing the report!",
    "A standing desk can help; alternate sitting and standing through the day.",
    "Good luck with the pottery class!",
    "If the knee keeps hurting, it may be worth seeing a physio.",
]


class _Log:
    """One user's two months of chats."""

    def __init__(self, user: int, days: int, seed: int) -> None:
        self.u = user
        self.days = days
        self.rng = np.random.default_rng([seed, 28, user])
        self.turns: list[Turn] = []
        self.questions: list[Question] = []
        self.n = 0
        self.used_names: dict[int, set[str]] = {}  # per episode kind: a question names its person once per kind
        self.used: set[str] = set()  # objects and cities a question asks by: each once per user

    def name(self, kind: int = -1) -> str:
        used = self.used_names.setdefault(kind, set())
        left = [n for n in FIRST_NAMES if n not in used] or FIRST_NAMES
        n = str(self.rng.choice(left))
        used.add(n)
        return n

    def pick(self, xs: list[str]) -> str:
        return str(self.rng.choice(xs))

    def fresh(self, xs: list[str]) -> str:
        left = [x for x in xs if x not in self.used] or xs
        x = str(self.rng.choice(left))
        self.used.add(x)
        return x

    def say(
        self,
        day: int,
        minute: float,
        speaker: str,
        text: str,
        role: str,
        attribute: str | None = None,
        version: int = 0,
    ) -> str:
        tid = f"c{self.u}-{self.n}"
        self.n += 1
        self.turns.append(
            Turn(tid, self.u, 0, T0 + day * DAY + 8 * HOUR + minute * MINUTE, speaker, text, role, attribute, version)
        )
        return tid

    # an episode: its statement (and echo), maybe a change later, and the question about it
    def episode(self, day: int, kind: int, slot: int) -> list[tuple[int, Any]]:
        r = self.rng
        who = self.name(kind)
        d1, d2 = int(day + r.integers(5, 25)), int(day + r.integers(26, 40))
        city, city2 = (self.fresh(CITIES) if kind == 7 else self.pick(CITIES)), self.pick(CITIES)
        obj = self.fresh(OBJECTS) if kind == 2 else self.pick(OBJECTS)
        venue = self.pick(VENUES)
        doc = self.fresh(SURNAMES) if kind == 1 else self.pick(SURNAMES)
        spec = self.pick(SPECIALTIES)
        ev = self.pick(EVENTS)
        style = int(r.integers(0, 3))
        digits = f"{int(r.integers(10, 99))} {int(r.integers(100, 999))} {int(r.integers(1000, 9999))}"
        ref = "".join(r.choice(list("ABCDEFGHJKLMNPQRSTUVWXYZ23456789"), 6))
        # (statement, echo, change or None, changed echo, question)
        table = [
            (
                f"{who} is flying in from {city} on {_date(d1, style)}, I said I'd pick them up",
                f"Noted: {who} arrives from {city} on {_date(d1, (style + 1) % 3)}.",
                f"change of plans, {who} now lands on {_date(d2, style)} instead",
                f"Updated: {who} now arrives {_date(d2, (style + 1) % 3)}.",
                f"When does {who} get here?",
            ),
            (
                f"booked the {spec}, Dr. {doc}, for {_date(d1, style)}",
                f"I'll remember your appointment with Dr. {doc} on {_date(d1, style)}.",
                f"Dr. {doc}'s office called, the appointment is moved to {_date(d2, style)}",
                f"Got it, Dr. {doc} is now on {_date(d2, (style + 2) % 3)}.",
                f"When is my appointment with Dr. {doc}?",
            ),
            (
                f"I think I left my {obj} at {who}'s flat in {city}",
                f"OK — your {obj} is probably at {who}'s in {city}.",
                f"found out the {obj} isn't at {who}'s, it's in the boot of {self.name()}'s car",
                f"Noted, the {obj} is in a car, not at {who}'s.",
                f"Where did I leave my {obj}?",
            ),
            (
                f"{who} gave me a {obj} they brought back from {city}",
                f"That's kind of {who}!",
                None,
                None,
                f"What did {who} give me?",
            ),
            (
                f"we had dinner at {venue} with {who} last night, the lamb was amazing",
                f"Glad you enjoyed {venue}!",
                None,
                None,
                f"Where did we go for dinner with {who}?",
            ),
            (
                f"{who}'s new number is {digits}, can you keep it?",
                f"Saved: {who} — {digits}.",
                None,
                None,
                f"What's {who}'s phone number?",
            ),
            (
                f"{who}'s {ev} is on {_date(d1, style)} in {city}",
                f"I've noted {who}'s {ev}, {_date(d1, style)}.",
                f"{who} moved the {ev} to {city2}, same day",
                f"Updated: {who}'s {ev} is now in {city2}.",
                f"Where is {who}'s {ev}?",
            ),
            (
                f"the booking reference for the ferry to {city} is {ref}",
                f"Saved the reference {ref}.",
                None,
                None,
                f"What was the booking reference for the {city} ferry?",
            ),
        ]
        st, echo, change, echo2, q = table[kind]
        st, echo = self.wrap(st, LIFE), self.wrap(echo, HELP)
        if change is not None and echo2 is not None:  # a change always comes with its echo
            change, echo2 = self.wrap(change, LIFE), self.wrap(echo2, HELP)
        attribute = f"ep{slot}"
        m = float(r.uniform(0, 600))
        first = [self.say(day, m, "user", st, "fact", attribute, 0)]
        if r.random() < 0.7:
            first.append(self.say(day, m + 1, "assistant", echo, "echo", attribute, 0))
        out: list[tuple[int, Any]] = [(day, ("first", first))]
        changed = change is not None and r.random() < 0.5 and day + 6 < self.days
        if changed and change is not None and echo2 is not None:  # (changed implies both: said again for mypy)
            cday = int(day + r.integers(3, 12))
            cday = min(cday, self.days - 1)
            second = [self.say(cday, float(r.uniform(0, 600)), "user", change, "fact", attribute, 1)]
            if r.random() < 0.7:
                second.append(self.say(cday, float(r.uniform(600, 620)), "assistant", echo2, "echo", attribute, 1))
            out.append((cday, ("change", second)))
        # small talk that names the person (or place) without stating anything
        for _ in range(int(r.integers(0, 3))):
            sday = int(r.integers(0, self.days))
            self.say(
                sday,
                float(r.uniform(0, 700)),
                "user",
                self.pick(
                    [
                        f"ran into {who} at the bakery, we chatted for a bit",
                        f"{who} says hi",
                        f"thinking of calling {who} this weekend",
                        f"saw a documentary about {city} last night",
                    ]
                ),
                "distractor",
            )
        self._plan_questions(day, first, out[1][1][1] if changed else None, attribute, q)
        return out

    def wrap(self, sentence: str, pool: list[str]) -> str:
        """The sentence among two to four others of the day, as a long message says it."""
        r = self.rng
        before = [str(x) for x in r.choice(pool, int(r.integers(1, 3)), replace=False)]
        after = [str(x) for x in r.choice(pool, int(r.integers(1, 3)), replace=False)]
        return " ".join(x if x[-1] in ".!?" else x + "." for x in [*before, sentence, *after])

    def _plan_questions(self, day: int, first: list[str], second: list[str] | None, attribute: str, q: str) -> None:
        end = T0 + self.days * DAY + 20 * HOUR
        qid = f"cq{self.u}-{len(self.questions)}"
        if second is not None:
            change_day = min((self.turns[int(t.split("-")[1])].t - T0) // DAY for t in second)
            self.questions.append(
                Question(qid, self.u, end, q, "current", attribute, (frozenset(second),), frozenset(first))
            )
            if change_day < MID_DAY:
                self.questions.append(
                    Question(
                        qid + "m",
                        self.u,
                        T0 + MID_DAY * DAY + 7 * HOUR,
                        q,
                        "current_mid",
                        attribute,
                        (frozenset(second),),
                        frozenset(first),
                    )
                )
        else:
            cat = "old" if day < 21 else "passing"
            self.questions.append(Question(qid, self.u, end, q, cat, attribute, (frozenset(first),)))

    def generate(self) -> None:
        r = self.rng
        slot = 0
        for day in range(self.days):
            for _ in range(int(r.integers(2, 7))):  # the day's small talk
                m = float(r.uniform(0, 720))
                self.say(day, m, "user", self.pick(SMALL_TALK), "small_talk")
                self.say(day, m + 0.5, "assistant", self.pick(ASSISTANT_TALK), "small_talk")
            if day < self.days - 2:
                for _ in range(int(r.integers(3, 8))):  # ~five episodes a day: each template ~35 times
                    kind = int(r.integers(0, 8))
                    pool = {1: SURNAMES, 2: OBJECTS, 7: CITIES}.get(kind)
                    if pool is not None and all(x in self.used for x in pool):
                        kind = int(r.choice([0, 3, 4, 5, 6]))  # its question would be ambiguous now
                    if len(self.used_names.get(kind, ())) >= len(FIRST_NAMES):
                        continue
                    self.episode(day, kind, slot)
                    slot += 1


def chatlog_workload(users: int = 30, days: int = 60, seed: int = 0) -> ConversationWorkload:
    """The chat logs of ``users`` users over ``days`` days and the questions about them (seeded)."""
    turns: list[Turn] = []
    questions: list[Question] = []
    for u in range(users):
        g = _Log(u, days, seed)
        g.generate()
        turns += g.turns
        questions += g.questions
    ev = [(tr.t, 0, "add", i) for i, tr in enumerate(turns)] + [(q.t, 1, "ask", i) for i, q in enumerate(questions)]
    ev.sort()
    return ConversationWorkload(users, days, seed, turns, questions, ev)


def workload_summary(wl: ConversationWorkload) -> dict[str, Any]:
    return {
        "users": wl.users,
        "days": wl.days,
        "turns": len(wl.turns),
        "questions": len(wl.questions),
        "by_category": {c: sum(q.category == c for q in wl.questions) for c in CATEGORIES},
    }


__all__ = ["chatlog_workload", "workload_summary"]
