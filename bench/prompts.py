"""The prompts every benchmark sends, to the product and to the raw engine alike."""

import uuid

# Long answers, so every request streams its full token budget at temperature 0.
TOPICS = [
    "a lighthouse keeper",
    "a robot gardener",
    "a dragon who bakes bread",
    "a lost city under the sea",
    "a clockmaker's apprentice",
    "a fox who learns to read",
    "a train that never stops",
    "a snowy mountain village",
    "a pirate who fears water",
    "a library of forgotten songs",
    "a desert caravan",
    "a girl who talks to stars",
    "a haunted violin",
    "the first settlers on Mars",
    "a cat detective",
    "a market that opens at midnight",
    "a giant who collects teacups",
    "a map that redraws itself",
    "a bridge between two kingdoms",
    "a tiny dragon",
    "a painter who lost colours",
    "a storm chaser",
    "a forest of glass trees",
    "a king without a crown",
    "a whale that sings opera",
    "a boy who builds kites",
    "an old sailor's compass",
    "a village of inventors",
    "a mirror that shows tomorrow",
    "a bakery on the moon",
    "a knight afraid of the dark",
    "a river that flows uphill",
]
PROMPTS = [f"Write a long story about {topic}." for topic in TOPICS]
SHORT_SYSTEM_PROMPT = "You are a helpful assistant."
# About 440 tokens: a realistic system prompt, long enough for the prefix cache to matter.
LONG_SYSTEM_PROMPT = " ".join(
    [
        "You are a helpful, careful and friendly assistant for a small company's internal chat.",
        "Answer in plain English, keep answers short unless asked otherwise, and say when you are unsure.",
    ]
    + [
        f"Rule {i}: when a question concerns {subject}, check the facts you state, prefer examples "
        f"over abstractions, and never invent names, numbers or quotations about {subject}."
        for i, subject in enumerate(
            [
                "billing",
                "shipping",
                "returns",
                "accounts",
                "security",
                "privacy",
                "pricing",
                "contracts",
                "holidays",
                "payroll",
                "hardware",
                "software",
                "travel",
                "expenses",
                "training",
                "hiring",
                "offices",
            ],
            start=1,
        )
    ]
)


def new_salt() -> str:
    return uuid.uuid4().hex
