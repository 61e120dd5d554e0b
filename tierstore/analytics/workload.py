"""A synthetic agent workload: users talking to an assistant for weeks.

Each simulated day a user chats (conversation memories), now and then states
a fact or a preference, opens a task, voices an opinion; the assistant
searches its memory to answer and uses (touches) what it relied on. Some facts
are superseded (the user moves city). A few memories are pinned. Everything is
seeded, so a run is reproducible.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

USERS = ("alice", "bob", "carol", "dmitri")

FACTS = [
    ("{u} is allergic to peanuts", ["health", "food"]),
    ("{u} works as a data engineer at Acme", ["work"]),
    ("{u} has a daughter called Maya who is seven", ["family"]),
    ("{u} drives an electric car", ["transport"]),
    ("{u} speaks Portuguese and English", ["language"]),
    ("{u} is training for the Berlin marathon", ["sport", "travel"]),
]
HOMES = ["Lisbon", "Berlin", "Osaka", "Toronto", "Nairobi"]
PREFERENCES = [
    ("{u} prefers window seats on flights", ["travel"]),
    ("{u} likes vegetarian ramen for dinner", ["food"]),
    ("{u} prefers meetings after ten in the morning", ["work"]),
    ("{u} wants hotel rooms with a quiet view", ["travel"]),
    ("{u} orders spicy thai food on fridays", ["food"]),
]
TASKS = [
    ("book a flight to Tokyo for the conference in spring", ["travel"]),
    ("renew the passport before the summer trip", ["travel"]),
    ("send the quarterly report to finance", ["work"]),
    ("order groceries for the weekend barbecue", ["food"]),
]
OPINIONS = [
    ("{u} thinks the new app design is confusing", ["product"]),
    ("{u} finds the airline lounge overrated", ["travel"]),
    ("{u} loves the new pizza place downtown", ["food"]),
]
CHATTER = [
    "{u} said good morning and asked about the weather",
    "{u} asked what time it is in Tokyo",
    "{u} mentioned feeling tired after a long day",
    "{u} asked for a joke about databases",
    "{u} said thanks for the help earlier",
    "{u} asked to convert 30 euros to dollars",
]
# (query, context tags, topics of the query)
QUERIES = [
    ("what food should I avoid ordering for {u}", ["food"], ["food", "health"]),
    ("where does {u} live now", ["home"], ["home"]),
    ("plan a trip for {u}: seats and hotel preferences", ["travel-planning"], ["travel"]),
    ("what should {u} have for dinner tonight", ["food-order"], ["food"]),
    ("what is {u} working on", ["work"], ["work"]),
]


@dataclass
class Event:
    """One step of the workload. ``kind``: add, search, touch, feedback, pin."""

    t: float
    kind: str
    ns: str
    content: str = ""
    memory_type: str = "fact"
    confidence: float = 0.8
    source: str = "user_declaration"
    tags: list[str] = field(default_factory=list)
    pinned: bool = False
    id: str | None = None
    context: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    positive: bool = True
    supersedes: list[str] = field(default_factory=list)


def agent_workload(
    days: int = 60, seed: int = 7, start: float = 1_700_000_000.0, users: tuple[str, ...] = USERS
) -> Iterator[Event]:
    """Events in time order over ``days`` simulated days."""
    rng = np.random.default_rng(seed)
    day = 86400.0
    homes = {u: int(rng.integers(len(HOMES))) for u in users}
    for u in users:
        name = u.capitalize()
        home = HOMES[homes[u]]
        yield Event(
            start, "add", u, f"{name} lives in {home}", "fact", 0.95, "user_declaration", ["home"], id=f"{u}-home-0"
        )
        yield Event(
            start,
            "add",
            u,
            f"{name}'s emergency contact is their sister",
            "fact",
            0.99,
            "user_confirmation",
            ["health"],
            pinned=True,
            id=f"{u}-pinned",
        )
        for i, (text, tags) in enumerate(FACTS):
            yield Event(
                start + 60 * (i + 1),
                "add",
                u,
                text.format(u=name),
                "fact",
                0.9,
                "user_declaration",
                tags,
                id=f"{u}-fact-{i}",
            )
    moves = {u: 0 for u in users}
    for d in range(days):
        t_day = start + d * day
        for u in users:
            name = u.capitalize()
            t = t_day + 8 * 3600 + float(rng.uniform(0, 3600))
            for j in range(int(rng.integers(3, 8))):
                yield Event(
                    t + 60 * j,
                    "add",
                    u,
                    CHATTER[int(rng.integers(len(CHATTER)))].format(u=name),
                    "conversation",
                    0.8,
                    "ai_summary",
                    ["chat"],
                )
            if rng.random() < 0.25:
                text, tags = PREFERENCES[int(rng.integers(len(PREFERENCES)))]
                guess = rng.random() < 0.4
                yield Event(
                    t + 600,
                    "add",
                    u,
                    text.format(u=name),
                    "preference",
                    0.55 if guess else 0.9,
                    "ai_inference" if guess else "user_declaration",
                    tags,
                )
            if rng.random() < 0.15:
                text, tags = TASKS[int(rng.integers(len(TASKS)))]
                yield Event(t + 900, "add", u, f"{name} needs to {text}", "task", 0.85, "user_declaration", tags)
            if rng.random() < 0.1:
                text, tags = OPINIONS[int(rng.integers(len(OPINIONS)))]
                yield Event(t + 1200, "add", u, text.format(u=name), "opinion", 0.7, "ai_inference", tags)
            if d > 0 and d % 21 == 0:
                moves[u] += 1
                home = HOMES[(homes[u] + moves[u]) % len(HOMES)]
                yield Event(
                    t + 1500,
                    "add",
                    u,
                    f"{name} moved and now lives in {home}",
                    "fact",
                    0.95,
                    "user_declaration",
                    ["home"],
                    id=f"{u}-home-{moves[u]}",
                    supersedes=[f"{u}-home-{moves[u] - 1}"],
                )
            for j in range(int(rng.integers(1, 4))):
                text, ctx, topics = QUERIES[int(rng.integers(len(QUERIES)))]
                yield Event(
                    t + 1800 + 60 * j,
                    "search",
                    u,
                    text.format(u=name),
                    context=ctx,
                    topics=topics,
                    positive=rng.random() < 0.8,
                )
