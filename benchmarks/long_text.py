"""Text longer than the embedder's window: cut, mean of chunks, or several memories?

MiniLM reads 256 word-pieces of a text and ignores the rest, silently. This
measures, with the real model (extra ``embed``), what each way of handling a
long text costs a search:

- **cut** (what the model does by itself): embed the whole text;
- **mean**: embed each window-sized chunk, store the normalised mean (one vector per memory);
- **split**: each chunk its own memory; a text is found when any of its chunks is.

Documents are synthetic: each holds 3 paragraphs (~190 word-pieces each) on
subjects of their own (a person, a place, an animal, a food, a trade); a query
asks about one paragraph's subject. recall@1: the right document is first among
all of them. Also: two texts that differ only after the window (cosine), and
the cost of refusing a 15 MB text against embedding one short text.

    .venv/bin/python benchmarks/long_text.py [--docs 40] [--seed 7]
"""

from __future__ import annotations

import argparse
import random
import resource
import time

import numpy as np

from tierstore.embedding import MiniLMEmbedder, check_window
from tierstore.errors import InvalidInputError
from tierstore.rules.validation import check_content

NAMES = [
    "Alma",
    "Bruno",
    "Chiara",
    "Dmitri",
    "Esme",
    "Farid",
    "Greta",
    "Hiro",
    "Ines",
    "Jonas",
    "Kofi",
    "Lena",
    "Mateo",
    "Nadia",
    "Oskar",
    "Priya",
    "Quentin",
    "Rosa",
    "Sven",
    "Tamsin",
    "Umar",
    "Vera",
    "Wim",
    "Ximena",
    "Yusuf",
    "Zofia",
    "Anselm",
    "Beatriz",
    "Cyrus",
    "Delphine",
    "Emeka",
    "Freya",
    "Gustav",
    "Halima",
    "Ivo",
    "Juno",
    "Kasimir",
    "Leila",
    "Magnus",
    "Nell",
]
PLACES = [
    "Lisbon",
    "Osaka",
    "Tromso",
    "Valparaiso",
    "Zanzibar",
    "Reykjavik",
    "Cusco",
    "Tbilisi",
    "Hobart",
    "Quebec",
    "Marrakesh",
    "Kraków",
    "Hanoi",
    "Oaxaca",
    "Bergen",
    "Dakar",
    "Tallinn",
    "Medellín",
    "Kyoto",
    "Cork",
]
ANIMALS = [
    "alpacas",
    "bees",
    "goats",
    "pigeons",
    "ferrets",
    "tortoises",
    "geese",
    "rabbits",
    "quails",
    "llamas",
    "koi carp",
    "donkeys",
    "parrots",
    "hedgehogs",
    "snails",
    "ostriches",
    "ducks",
    "yaks",
    "bison",
    "owls",
]
FOODS = [
    "sourdough",
    "kimchi",
    "mole sauce",
    "pierogi",
    "ceviche",
    "baklava",
    "ramen",
    "paella",
    "injera",
    "borscht",
    "gnocchi",
    "laksa",
    "tagine",
    "empanadas",
    "goulash",
    "pho",
    "falafel",
    "risotto",
    "churros",
    "dumplings",
]
TRADES = [
    "violin making",
    "bookbinding",
    "glassblowing",
    "beekeeping",
    "cartography",
    "blacksmithing",
    "pottery",
    "clock repair",
    "sail making",
    "typesetting",
    "weaving",
    "woodturning",
    "shoemaking",
    "bell casting",
    "stained glass",
    "perfumery",
    "taxidermy",
    "lacquerware",
    "basketry",
    "calligraphy",
]
FILLER = [
    "On most mornings the work starts before sunrise and goes on until the light fails.",
    "Neighbours sometimes drop by with questions, and the answers take longer than anyone expects.",
    "There is a notebook for everything, with dates, sketches and the occasional complaint.",
    "Winters are the hardest part, because the cold gets into the tools and the hands.",
    "Every year brings a new small improvement, usually discovered by accident.",
    "Visitors tend to ask the same three questions, and they always get the same patient replies.",
]


def paragraph(rng: random.Random, subject: dict[str, str]) -> str:
    s = subject
    facts = [
        f"{s['name']} keeps {s['animal']} on a small plot outside {s['place']}.",
        f"The {s['animal']} of {s['name']} are known all over {s['place']}.",
        f"For dinner {s['name']} likes to cook {s['food']} for friends from {s['place']}.",
        f"{s['name']} earns a living from {s['trade']}, a craft learned in {s['place']}.",
        f"People say nobody in {s['place']} knows more about {s['trade']} than {s['name']}.",
        f"When the {s['animal']} are fed, {s['name']} turns back to {s['trade']}.",
    ]
    text = facts + rng.sample(FILLER, 4) + facts[:3]
    return " ".join(text)


def corpus(n_docs: int, seed: int) -> tuple[list[list[str]], list[tuple[int, int, str]]]:
    """Documents (3 paragraphs each) and queries (doc, paragraph, question)."""
    rng = random.Random(seed)
    docs, queries = [], []
    combos = set()
    for d in range(n_docs):
        paras = []
        for p in range(3):
            while True:
                s = {
                    "name": rng.choice(NAMES),
                    "place": rng.choice(PLACES),
                    "animal": rng.choice(ANIMALS),
                    "food": rng.choice(FOODS),
                    "trade": rng.choice(TRADES),
                }
                key = (s["name"], s["place"], s["animal"], s["trade"])
                if key not in combos:
                    combos.add(key)
                    break
            paras.append(paragraph(rng, s))
            queries.append((d, p, f"Who keeps {s['animal']} near {s['place']} and works at {s['trade']}?"))
        docs.append(paras)
    return docs, queries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    emb = MiniLMEmbedder()
    docs, queries = corpus(args.docs, args.seed)
    tokens = [emb.count_tokens(p) for doc in docs for p in doc]
    whole = [" ".join(doc) for doc in docs]
    print(
        f"{len(docs)} documents of 3 paragraphs; a paragraph is {min(tokens)}-{max(tokens)} tokens, a document "
        f"{min(emb.count_tokens(w) for w in whole)}-{max(emb.count_tokens(w) for w in whole)}; "
        f"the window is {emb.max_tokens}"
    )

    cut = emb.embed(whole)
    chunks = emb.embed([p for doc in docs for p in doc]).reshape(len(docs), 3, -1)
    mean = chunks.mean(axis=1)
    mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    q = emb.embed([text for _, _, text in queries])

    def recall(vectors: np.ndarray, part: int) -> float:
        rows = [i for i, (_, p, _) in enumerate(queries) if p == part]
        sims = q[rows] @ vectors.T
        return float(np.mean(np.argmax(sims, axis=1) == np.array([queries[i][0] for i in rows])))

    def recall_split(part: int) -> float:
        rows = [i for i, (_, p, _) in enumerate(queries) if p == part]
        sims = (q[rows] @ chunks.reshape(-1, chunks.shape[2]).T).reshape(len(rows), len(docs), 3).max(axis=2)
        return float(np.mean(np.argmax(sims, axis=1) == np.array([queries[i][0] for i in rows])))

    print("recall@1 of the right document, by the paragraph the question is about:")
    print(f"{'':>8} {'first':>7} {'second':>7} {'third':>7}")
    for label, fn in (("cut", lambda p: recall(cut, p)), ("mean", lambda p: recall(mean, p)), ("split", recall_split)):
        print(f"{label:>8} " + " ".join(f"{fn(p):7.3f}" for p in range(3)))

    a = whole[0] + " The secret is the colour blue."
    b = whole[0] + " The password is a fish named Henry."
    va, vb = emb.embed([a, b])
    print(f"two texts that differ after the window: cosine {float(va @ vb):.4f}")

    huge = "x " * 7_500_000  # 15 MB
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    try:
        check_content(huge)  # what add does first: the length (Settings.max_content_chars)
    except InvalidInputError:
        by_length = time.perf_counter() - t
    t = time.perf_counter()
    try:
        check_window(emb, huge, "content")  # the window alone (a store with a larger max_content_chars)
    except InvalidInputError:
        by_words = time.perf_counter() - t
    t = time.perf_counter()
    emb.embed(["a short memory about alpacas in Lisbon"])
    one = time.perf_counter() - t
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"refusing a 15 MB text: {by_length * 1e6:.1f} us by its length, {by_words * 1e3:.0f} ms by its words "
        f"against the window (never tokenized); embedding one short text: {one * 1e3:.0f} ms; "
        f"peak RSS grew {(rss1 - rss0) / 1024:.0f} MiB"
    )


if __name__ == "__main__":
    main()
