"""The workload of suite (i), "relations": facts that hold several values beside facts that change.

Issue 27: automatic supersession retires statements that are still true — a
second allergy archives the first, as would a second language, sibling or
medication. This generator builds, before any policy is tuned on it, a
workload that contains both kinds of relation, so that one run measures
**safety** (nothing that still holds is retired or pushed out of the answer)
and **staleness** (what was replaced does not come first).

Pure and seeded: no embedding, no store, no numpy; the same seed gives the same
workload. Construction (deliberately unlike suite g's slot timeline with daily
queries):

* **households** (one namespace each) of 3 **subjects**: the user and two
  people of the household (``"Frank"``, ``"Frank's flatmate Ana"``, ...),
  statements naming a member either by name or by role, over ``days``
  simulated days;
* **multi-valued relations** (:data:`MULTI`: allergies, languages, siblings,
  instruments, medications, places lived, pets): a subject gets several of
  them, each with 2-4 values stated on different days; every value stays
  true to the end;
* **single-valued relations** (:data:`SINGLE`: employer, home city, phone
  plan, favourite restaurant, partner, car, diet, current project): with
  ``drift=True`` each changes 1-3 times, only the newest value is true and the
  older ones are *stale*; with ``drift=False`` (the safety-only variant) each
  is stated once and never changes;
* **restatements** of a value that is live at the time, in other words (a
  different sentence style): they replace nothing;
* **chatter**: small talk about the weather, plans and errands, mentioning the
  household's names and places (some of it stored as ``fact``, the way agents
  store small talk, the rest as ``conversation``);
* **questions** at the end (and at the midpoint) for every (subject,
  relation): "What is Frank allergic to?", "Where does Frank work now?", and
  for a relation that changed, the history question "Where did Frank work
  before?". Each is labelled with the value groups (the memory ids stating
  one value: the first statement and its restatements) that are live, stale,
  or (history questions) asked for.

Every sentence style list has at least three styles per relation and
questions have their own. Memories carry no tags, key or supersedes unless
asked: ``hints="tags"`` gives every relation statement ``tags=[relation]``;
``hints="key"`` gives the statements of single-valued relations
``key=f"{subject}:{relation}"``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

DAY = 86400.0
HOUR = 3600.0
T0 = 1_750_000_000.0  # day 0, midnight

NAMES = [
    "Frank",
    "Ana",
    "Bilal",
    "Carmen",
    "Dmitri",
    "Esther",
    "Femi",
    "Greta",
    "Hiro",
    "Ingrid",
    "Jamal",
    "Kasia",
    "Lars",
    "Marisol",
    "Nikhil",
    "Olga",
    "Pedro",
    "Rania",
    "Stefan",
    "Tomoko",
    "Ugo",
    "Valeria",
    "Wanjiru",
    "Xavier",
    "Yara",
    "Zoltan",
    "Aoife",
    "Benedikt",
    "Chiara",
    "Darius",
    "Elif",
    "Faisal",
    "Gwen",
    "Henrik",
    "Isla",
    "Joaquin",
    "Keiko",
    "Leon",
    "Malia",
    "Noor",
]
ROLES = ["flatmate", "cousin", "parent", "child", "housemate", "grandparent", "lodger", "godchild"]
CITIES = [
    "Lisbon",
    "Oslo",
    "Bergen",
    "Porto",
    "Kyoto",
    "Nairobi",
    "Lima",
    "Quito",
    "Tallinn",
    "Ghent",
    "Leeds",
    "Adelaide",
    "Halifax",
    "Tucson",
    "Bologna",
    "Graz",
    "Malmo",
    "Cork",
    "Izmir",
    "Pune",
    "Recife",
    "Hobart",
]
SISTERS = ["Maria", "Lucia", "Sofia", "Ines", "Hanna", "Elena", "Amara", "Nadia"]
BROTHERS = ["Tomas", "Pavel", "Karim", "Mateus", "Rohan", "Oskar", "Theo", "Felix"]

# ------------------------------------------------------------------ relations
#
# say: sentence styles of a statement ({s}: the subject as mentioned, {v}: the value, and for
# structured values their own fields); ask: question styles ({s}: the subject's first name).

MULTI: dict[str, dict[str, Any]] = {
    "allergy": {
        "type": "fact",
        "values": [
            "peanuts",
            "shellfish",
            "penicillin",
            "latex",
            "pollen",
            "cat dander",
            "sesame",
            "bee stings",
            "dust mites",
            "gluten",
            "kiwi",
            "ibuprofen",
        ],
        "say": [
            "{s} is allergic to {v}",
            "{s} has an allergy to {v}",
            "{s} can't be anywhere near {v}, it's an allergy",
            "turns out {s} reacts badly to {v} as well - a proper allergy",
            "the doctor confirmed that {s} is allergic to {v}",
        ],
        "ask": [
            "What is {n} allergic to?",
            "Which allergies does {n} have?",
            "What should {n} avoid because of allergies?",
        ],
    },
    "language": {
        "type": "fact",
        "values": [
            "Spanish",
            "French",
            "Japanese",
            "Arabic",
            "German",
            "Portuguese",
            "Mandarin",
            "Swahili",
            "Russian",
            "Hindi",
            "Turkish",
            "Italian",
        ],
        "say": [
            "{s} speaks {v}",
            "{s} is fluent in {v}",
            "{s} can hold a conversation in {v}",
            "{s} grew up speaking {v}",
            "{s} also speaks {v} quite well",
        ],
        "ask": [
            "Which languages does {n} speak?",
            "What languages can {n} speak?",
            "In which languages can I talk to {n}?",
        ],
    },
    "sibling": {
        "type": "fact",
        "values": [("sister", nm) for nm in SISTERS] + [("brother", nm) for nm in BROTHERS],
        "say": [
            "{s} has a {kind}, {sib}, who lives in {city}",
            "{s}'s {kind} {sib} lives in {city}",
            "{sib}, {s}'s {kind}, is based in {city}",
            "{s} mentioned a {kind} called {sib} in {city}",
        ],
        "ask": [
            "Who are {n}'s brothers and sisters?",
            "Does {n} have any siblings?",
            "What are the names of {n}'s siblings?",
        ],
    },
    "instrument": {
        "type": "fact",
        "values": ["piano", "guitar", "violin", "drums", "cello", "flute", "saxophone", "ukulele", "trumpet", "harp"],
        "say": [
            "{s} plays the {v}",
            "{s} has been playing the {v} for years",
            "{s} practises the {v} at weekends",
            "{s} picked up the {v} and plays it regularly",
        ],
        "ask": [
            "What instruments does {n} play?",
            "Which musical instruments can {n} play?",
            "Does {n} play any instruments?",
        ],
    },
    "medication": {
        "type": "fact",
        "values": [
            "metformin",
            "lisinopril",
            "vitamin D",
            "levothyroxine",
            "atorvastatin",
            "a salbutamol inhaler",
            "omeprazole",
            "sertraline",
            "iron tablets",
            "amlodipine",
        ],
        "say": [
            "{s} takes {v} every day",
            "{s} is on {v}",
            "{s} was prescribed {v} and takes it daily",
            "{s} needs {v} each morning",
            "remember that {s} is taking {v}",
        ],
        "ask": [
            "What medications does {n} take?",
            "Which medicines is {n} on?",
            "What does {n} take every day for health?",
        ],
    },
    "lived": {
        "type": "fact",
        "values": CITIES,
        "say": [
            "{s} lived in {v} for a few years",
            "{s} once lived in {v}",
            "{s} spent a couple of years living in {v}",
            "back in the day {s} had a flat in {v}",
        ],
        "ask": [
            "Where has {n} lived?",
            "Which cities has {n} lived in over the years?",
            "What places has {n} lived in?",
        ],
    },
    "pet": {
        "type": "fact",
        "values": [
            (a, nm)
            for nm in ("Rex", "Luna", "Pip", "Mochi", "Biscuit", "Olive", "Ziggy", "Nala", "Gus", "Kiki")
            for a in ("dog", "cat", "rabbit", "parrot")
        ],
        "say": [
            "{s} has a {animal} called {pet}",
            "{s}'s {animal} is named {pet}",
            "{s} adopted a {animal}, {pet}",
            "{pet} is {s}'s {animal}",
        ],
        "ask": ["What pets does {n} have?", "Which animals live with {n}?", "What are the names of {n}'s pets?"],
    },
}

SINGLE: dict[str, dict[str, Any]] = {
    "employer": {
        "type": "fact",
        "values": [
            "Acme Corp",
            "Globex",
            "Initech",
            "Umbrella Labs",
            "Northwind",
            "Hooli",
            "Stark Logistics",
            "Wayne Foods",
            "Tyrell Systems",
            "Cyberdyne",
            "Soylent Co",
            "Vandelay Industries",
        ],
        "say": [
            "{s} works at {v}",
            "{s} started a new job at {v}",
            "{s} is now employed by {v}",
            "{s} joined {v}",
            "{s}'s employer is {v}",
        ],
        "ask": [
            "Where does {n} work now?",
            "Who is {n}'s current employer?",
            "Which company does {n} work for these days?",
        ],
        "history": ["Where did {n} work before?", "Which company did {n} work for previously?"],
    },
    "home": {
        "type": "fact",
        "values": CITIES,
        "say": [
            "{s} lives in {v}",
            "{s} moved to {v}",
            "{s} now lives in {v}",
            "{s}'s home is in {v}",
            "{s} has settled in {v}",
        ],
        "ask": ["Which city does {n} live in now?", "Where does {n} live these days?", "What is {n}'s current city?"],
        "history": ["Where did {n} live before?", "Which city did {n} live in previously?"],
    },
    "phone": {
        "type": "fact",
        "values": [
            "Vodafone Red",
            "an O2 unlimited plan",
            "Mint Mobile",
            "a Three pay-as-you-go plan",
            "Lyca Basic",
            "a T-Mobile family plan",
            "Giffgaff Golden",
            "an EE SIM-only plan",
        ],
        "say": [
            "{s} is on {v} for the phone",
            "{s} switched the phone contract to {v}",
            "{s}'s mobile plan is {v}",
            "{s} pays for {v} on the phone",
        ],
        "ask": [
            "What phone plan is {n} on now?",
            "Which mobile plan does {n} have?",
            "What is {n}'s current phone contract?",
        ],
        "history": ["What phone plan did {n} have before?", "Which mobile plan was {n} on previously?"],
    },
    "restaurant": {
        "type": "preference",
        "values": [
            "Luigi's trattoria",
            "the Blue Lotus",
            "Casa Verde",
            "Sakura sushi bar",
            "the Copper Pot",
            "Taqueria Sol",
            "Le Petit Zinc",
            "the Mango Tree",
            "Bombay Brasserie",
            "the Olive Grove",
        ],
        "say": [
            "{s}'s favourite restaurant is {v}",
            "{s} loves eating at {v} more than anywhere",
            "these days {s} prefers {v} to any other restaurant",
            "{s} keeps going back to {v}, the favourite",
        ],
        "ask": [
            "What is {n}'s favourite restaurant?",
            "Where does {n} most like to eat out?",
            "Which restaurant should I book for {n}?",
        ],
        "history": ["What was {n}'s favourite restaurant before?", "Where did {n} like to eat out previously?"],
    },
    "partner": {
        "type": "fact",
        "values": ["Sam", "Alex", "Robin", "Jordan", "Kim", "Nico", "Taylor", "Morgan", "Ari", "Jesse"],
        "say": [
            "{s}'s partner is {v}",
            "{s} is dating {v}",
            "{s} is in a relationship with {v}",
            "{s} and {v} are a couple now",
        ],
        "ask": ["Who is {n}'s partner?", "Who is {n} dating now?", "What is the name of {n}'s partner?"],
        "history": ["Who was {n}'s partner before?", "Who did {n} date previously?"],
    },
    "car": {
        "type": "fact",
        "values": [
            "a red Toyota Corolla",
            "a Tesla Model 3",
            "a VW Golf",
            "a Fiat Panda",
            "a Volvo estate",
            "a Nissan Leaf",
            "a Honda Civic",
            "a Mini Cooper",
            "a Skoda Octavia",
            "a Ford Transit van",
        ],
        "say": ["{s} drives {v}", "{s} bought {v}", "{s}'s car is {v}", "{s} gets around in {v} now"],
        "ask": ["What car does {n} drive now?", "Which car does {n} have?", "What is {n}'s current car?"],
        "history": ["What car did {n} drive before?", "Which car did {n} have previously?"],
    },
    "diet": {
        "type": "preference",
        "values": ["vegetarian", "vegan", "keto", "pescatarian", "low-FODMAP", "Mediterranean", "paleo", "gluten-free"],
        "say": ["{s} follows a {v} diet", "{s} has gone {v}", "{s} eats {v} now", "{s} sticks to a {v} way of eating"],
        "ask": ["What diet does {n} follow now?", "How does {n} eat these days?", "What kind of diet is {n} on?"],
        "history": ["What diet did {n} follow before?", "How did {n} eat previously?"],
    },
    "project": {
        "type": "fact",
        "values": [
            "the billing migration",
            "the mobile app redesign",
            "a warehouse robot pilot",
            "the annual report",
            "the search relaunch",
            "a data privacy audit",
            "the new onboarding flow",
            "a solar farm bid",
        ],
        "say": [
            "{s} is working on {v}",
            "{s}'s current project is {v}",
            "{s} has moved on to {v} at work",
            "{s} spends the workdays on {v}",
        ],
        "ask": ["What is {n} working on now?", "What is {n}'s current project?", "Which project is {n} busy with?"],
        "history": ["What was {n} working on before?", "Which project did {n} have previously?"],
    },
}

CHATTER = [
    ("{s} said it has been raining all week", "conversation"),
    ("{s} is thinking about a weekend trip to {city}", "fact"),
    ("{s} asked what the weather will be like in {city} tomorrow", "conversation"),
    ("{s} went for a long walk by the river", "fact"),
    ("{s} wants to repaint the kitchen this spring", "fact"),
    ("{s} mentioned the bus was late again", "conversation"),
    ("{s} watched a documentary about {city}", "fact"),
    ("{s} is planning a birthday dinner for a friend", "fact"),
    ("{s} needs to buy new running shoes", "fact"),
    ("{s} asked for a recipe for banana bread", "conversation"),
    ("{s} had a busy day and felt tired", "conversation"),
    ("{s} said the garden needs watering", "conversation"),
    ("{s} read a novel set in {city}", "fact"),
    ("{s} is looking forward to the holidays", "preference"),
    ("{s} asked me to remind about the dentist next week", "conversation"),
    ("{s} thinks the new cafe near the office is overpriced", "preference"),
]


# ------------------------------------------------------------------ data


@dataclass(frozen=True)
class RMem:
    """One memory to add. ``relation``/``value`` are ``None`` for chatter."""

    id: str
    ns: str
    t: float
    content: str
    memory_type: str
    tags: tuple[str, ...] = ()
    key: str | None = None
    kind: str = "chatter"  # chatter | multi | single | restate
    subject: str | None = None
    relation: str | None = None
    value: str | None = None


@dataclass(frozen=True)
class RQuestion:
    """A question and its ground truth, as value groups (each a tuple of memory
    ids that state one value: the first statement and its restatements).

    kind: ``multi`` (every value of a multi-valued relation), ``current`` (a
    single-valued relation's value now), ``history`` (its older values)."""

    id: str
    ns: str
    t: float
    text: str
    kind: str
    subject: str
    relation: str
    phase: str  # "mid" or "end"
    live: tuple[tuple[str, ...], ...]  # value groups that answer it (history: the older values)
    stale: tuple[tuple[str, ...], ...] = ()  # current: older values of the relation

    @property
    def live_ids(self) -> frozenset[str]:
        return frozenset(i for g in self.live for i in g)

    @property
    def stale_ids(self) -> frozenset[str]:
        return frozenset(i for g in self.stale for i in g)


@dataclass
class RelationsWorkload:
    households: int
    days: int
    seed: int
    drift: bool
    hints: str
    mems: list[RMem]
    questions: list[RQuestion]
    params: dict[str, Any] = field(default_factory=dict)

    def namespaces(self) -> list[str]:
        return sorted({m.ns for m in self.mems}, key=lambda s: int(s[1:]))

    def counts(self) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for m in self.mems:
            kinds[m.kind] = kinds.get(m.kind, 0) + 1
        qk: dict[str, int] = {}
        for q in self.questions:
            qk[f"{q.phase}_{q.kind}"] = qk.get(f"{q.phase}_{q.kind}", 0) + 1
        return {
            "households": self.households,
            "memories": len(self.mems),
            "questions": len(self.questions),
            **{f"mem_{k}": v for k, v in sorted(kinds.items())},
            **{f"q_{k}": v for k, v in sorted(qk.items())},
        }


def _fields(relation: str, value: Any) -> tuple[str, dict[str, str]]:
    """The value's label (what identifies it) and its template fields."""
    if relation == "sibling":
        kind, name = value
        return name, {"kind": kind, "sib": name}
    if relation == "pet":
        animal, name = value
        return f"{animal} {name}", {"animal": animal, "pet": name}
    return str(value), {"v": str(value)}


@dataclass
class _Statement:
    t: float
    style: int
    mem_id: str


def relations_workload(
    households: int = 30,
    days: int = 90,
    seed: int = 0,
    *,
    drift: bool = True,
    hints: str = "none",
    midpoint: bool = True,
) -> RelationsWorkload:
    """The workload (see the module docstring). ``hints``: ``"none"``,
    ``"tags"`` or ``"key"``; the statements, times and questions are the same
    for every hint (only the tags / keys differ), and ``drift=False`` is a
    separate draw in which single-valued relations are stated once."""
    if hints not in ("none", "tags", "key"):
        raise ValueError(f"hints must be 'none', 'tags' or 'key', got {hints!r}")
    rng = random.Random(f"relations:{seed}:{int(drift)}")
    mems: list[RMem] = []
    questions: list[RQuestion] = []
    mid_t = T0 + (days // 2) * DAY + 15 * HOUR
    end_t = T0 + days * DAY + 10 * HOUR
    for h in range(households):
        ns = f"h{h}"
        names = rng.sample(NAMES, 3)
        roles = rng.sample(ROLES, 2)
        primary = names[0]
        subjects = [(names[0], None), (names[1], roles[0]), (names[2], roles[1])]
        n_mem = 0

        def ref(name: str, role: str | None, primary: str = primary) -> str:
            if role is None or rng.random() < 0.5:
                return name
            return f"{primary}'s {role} {name}"

        def new_id(tag: str, ns: str = ns) -> str:
            nonlocal n_mem
            n_mem += 1
            return f"{ns}-{tag}-{n_mem}"

        def when(day: int) -> float:
            return T0 + day * DAY + rng.uniform(8.0, 21.0) * HOUR

        hh_mems: list[RMem] = []
        for si, (name, role) in enumerate(subjects):
            multi = rng.sample(list(MULTI), 4 if si == 0 else 3)
            single = rng.sample(list(SINGLE), 4 if si == 0 else 3)
            for rel in multi:
                spec = MULTI[rel]
                n_values = rng.randint(2, 4)
                values = rng.sample(spec["values"], n_values)
                if rel == "pet":  # two pets never share a name
                    seen2: set[str] = set()
                    values = []
                    for v in rng.sample(spec["values"], len(spec["values"])):
                        if v[1] not in seen2:
                            seen2.add(v[1])
                            values.append(v)
                    values = values[:n_values]
                stated_days = sorted(rng.sample(range(0, days - 2), n_values))
                groups: list[list[_Statement]] = []
                for v, day in zip(values, stated_days):
                    label, f = _fields(rel, v)
                    if rel == "sibling":
                        f["city"] = rng.choice(CITIES)
                    style = rng.randrange(len(spec["say"]))
                    t = when(day)
                    mid = new_id(f"{si}{rel}")
                    hh_mems.append(
                        _mem(
                            mid,
                            ns,
                            t,
                            spec["say"][style].format(s=ref(name, role), **f),
                            spec["type"],
                            "multi",
                            name,
                            rel,
                            label,
                            hints,
                            key=None,
                        )
                    )
                    group = [_Statement(t, style, mid)]
                    # a restatement, now and then, in another style
                    if rng.random() < 0.3 and day < days - 4:
                        rday = rng.randint(day + 1, days - 2)
                        rstyle = rng.choice([i for i in range(len(spec["say"])) if i != style])
                        rt = when(rday)
                        rid = new_id(f"{si}{rel}r")
                        hh_mems.append(
                            _mem(
                                rid,
                                ns,
                                rt,
                                spec["say"][rstyle].format(s=ref(name, role), **f),
                                spec["type"],
                                "restate",
                                name,
                                rel,
                                label,
                                hints,
                                key=None,
                            )
                        )
                        group.append(_Statement(rt, rstyle, rid))
                    groups.append(group)
                for phase, qt in (("mid", mid_t), ("end", end_t)) if midpoint else (("end", end_t),):
                    live = tuple(tuple(s.mem_id for s in g if s.t < qt) for g in groups)
                    live = tuple(g for g in live if g)
                    if not live:
                        continue
                    questions.append(
                        RQuestion(
                            f"{ns}-q{len(questions)}",
                            ns,
                            qt,
                            rng.choice(spec["ask"]).format(n=name),
                            "multi",
                            name,
                            rel,
                            phase,
                            live,
                        )
                    )
            for rel in single:
                spec = SINGLE[rel]
                n_changes = rng.randint(1, 3) if drift else 0
                values = rng.sample(spec["values"], n_changes + 1)
                stated_days = sorted(rng.sample(range(0, days - 2), n_changes + 1))
                key = f"{name}:{rel}" if hints == "key" else None
                versions: list[list[_Statement]] = []
                for vi, (v, day) in enumerate(zip(values, stated_days)):
                    label, f = _fields(rel, v)
                    style = rng.randrange(len(spec["say"]))
                    t = when(day)
                    mid = new_id(f"{si}{rel}")
                    hh_mems.append(
                        _mem(
                            mid,
                            ns,
                            t,
                            spec["say"][style].format(s=ref(name, role), **f),
                            spec["type"],
                            "single",
                            name,
                            rel,
                            label,
                            hints,
                            key=key,
                        )
                    )
                    version = [_Statement(t, style, mid)]
                    end_day = stated_days[vi + 1] if vi + 1 < len(stated_days) else days - 1
                    # restate a live value before it changes (the restatement goes stale with it)
                    if rng.random() < 0.3 and end_day - day >= 2:
                        rday = rng.randint(day + 1, end_day - 1)
                        rstyle = rng.choice([i for i in range(len(spec["say"])) if i != style])
                        rt = when(rday)
                        rid = new_id(f"{si}{rel}r")
                        hh_mems.append(
                            _mem(
                                rid,
                                ns,
                                rt,
                                spec["say"][rstyle].format(s=ref(name, role), **f),
                                spec["type"],
                                "restate",
                                name,
                                rel,
                                label,
                                hints,
                                key=key,
                            )
                        )
                        version.append(_Statement(rt, rstyle, rid))
                    versions.append(version)
                for phase, qt in (("mid", mid_t), ("end", end_t)) if midpoint else (("end", end_t),):
                    said = [tuple(s.mem_id for s in g if s.t < qt) for g in versions]
                    said = [g for g in said if g]
                    if not said:
                        continue
                    questions.append(
                        RQuestion(
                            f"{ns}-q{len(questions)}",
                            ns,
                            qt,
                            rng.choice(spec["ask"]).format(n=name),
                            "current",
                            name,
                            rel,
                            phase,
                            (said[-1],),
                            tuple(said[:-1]),
                        )
                    )
                    if len(said) > 1:
                        questions.append(
                            RQuestion(
                                f"{ns}-q{len(questions)}",
                                ns,
                                qt,
                                rng.choice(spec["history"]).format(n=name),
                                "history",
                                name,
                                rel,
                                phase,
                                tuple(said[:-1]),
                                (),
                            )
                        )
        # chatter: 1-3 a day, about anyone in the household
        for day in range(days):
            for _ in range(rng.randint(1, 3)):
                text, mtype = rng.choice(CHATTER)
                name, role = rng.choice(subjects)
                hh_mems.append(
                    RMem(new_id("chat"), ns, when(day), text.format(s=ref(name, role), city=rng.choice(CITIES)), mtype)
                )
        hh_mems.sort(key=lambda m: m.t)
        mems.extend(hh_mems)
    mems.sort(key=lambda m: (m.t, m.ns))
    return RelationsWorkload(
        households,
        days,
        seed,
        drift,
        hints,
        mems,
        questions,
        params={"mid_t": mid_t, "end_t": end_t, "midpoint": midpoint},
    )


def _mem(
    mid: str,
    ns: str,
    t: float,
    text: str,
    mtype: str,
    kind: str,
    subject: str,
    relation: str,
    value: str,
    hints: str,
    *,
    key: str | None,
) -> RMem:
    content = text[0].upper() + text[1:]
    return RMem(
        mid,
        ns,
        t,
        content,
        mtype,
        tags=(relation,) if hints == "tags" else (),
        key=key,
        kind=kind,
        subject=subject,
        relation=relation,
        value=value,
    )
