"""A planted-fact set for retrieval: made-up places, each with facts stated in one document and asked
about in other words (no public question-answering set installs from the package registries here).

Every place gets facts in several documents, so a question is answered only by the one document holding
that attribute of that place: the place's name alone (what full-text search matches best) does not find it.
"""

import random
from dataclasses import dataclass

SYLLABLES = [
    "val",
    "tor",
    "mi",
    "sen",
    "ka",
    "dru",
    "pel",
    "on",
    "ria",
    "bek",
    "lo",
    "far",
    "zin",
    "ta",
    "gor",
]
MONTHS = ["January", "March", "May", "July", "September", "November"]
GOODS = ["copper wire", "dried figs", "wool blankets", "glass beads", "salted fish", "cedar timber"]
# (how a document states it, how a question asks it, the answer's values)
ATTRIBUTES = [
    ("{e} was founded in the year {v}.", "When was {e} established?", [str(y) for y in range(1200, 1900, 7)]),
    (
        "About {v} people live in {e}.",
        "What is the population of {e}?",
        [f"{n:,}" for n in range(2000, 90000, 977)],
    ),
    ("The main export of {e} is {v}.", "What does {e} mostly sell to other regions?", GOODS),
    ("{e} holds its harvest fair every {v}.", "In which month does {e} celebrate the harvest?", MONTHS),
    ("A council of {v} elders governs {e}.", "How many elders rule {e}?", [str(n) for n in range(3, 40)]),
]


@dataclass(frozen=True)
class Fact:
    place: str
    attribute: int
    statement: str
    question: str
    answer: str


def place_names(count: int, rng: random.Random) -> list[str]:
    names: set[str] = set()
    while len(names) < count:
        names.add("".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize())
    return sorted(names)


def facts(places: int, seed: int = 7) -> list[Fact]:
    """Each place with every attribute, one fact a document."""
    rng = random.Random(seed)
    found = []
    for place in place_names(places, rng):
        for index, (statement, question, values) in enumerate(ATTRIBUTES):
            value = rng.choice(values)
            found.append(
                Fact(place, index, statement.format(e=place, v=value), question.format(e=place), value)
            )
    return found


def documents(
    filler: list[str], facts_: list[Fact], total: int, seed: int = 7
) -> list[tuple[str, Fact | None]]:
    """`total` documents of filler prose: one for each fact, with the fact in its middle, the rest filler."""
    rng = random.Random(seed)
    docs: list[tuple[str, Fact | None]] = []
    for i, fact in enumerate(facts_):
        before, after = filler[(2 * i) % len(filler)], filler[(2 * i + 1) % len(filler)]
        docs.append((f"{before} {fact.statement} {after}", fact))
    start = 2 * len(facts_)
    for i in range(total - len(docs)):
        docs.append((filler[(start + i) % len(filler)], None))
    rng.shuffle(docs)
    return docs
