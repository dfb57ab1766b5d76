"""Readable documents for end-to-end jobs: short reports, and one longer than the context window."""

import random

SUBJECTS = ["The city council", "Our support team", "The research group", "The bakery on Main Street",
            "The school board", "A regional airline", "The hospital", "The football club", "The library",
            "A software company"]  # fmt: skip
ACTIONS = ["approved a new budget of", "reported revenue of", "hired staff at a cost of", "raised",
           "spent", "saved", "invested", "lost"]  # fmt: skip
TOPICS = ["road repairs", "longer opening hours", "a new training program", "energy efficiency",
          "customer complaints", "a spring festival", "safety inspections", "online services"]  # fmt: skip


def report(seed: int, sentences: int = 8) -> str:
    rng = random.Random(seed)
    lines = []
    for _ in range(sentences):
        lines.append(
            f"{rng.choice(SUBJECTS)} {rng.choice(ACTIONS)} {rng.randint(2, 900)} thousand dollars "
            f"for {rng.choice(TOPICS)} in {rng.choice(['March', 'June', 'October', 'December'])}, "
            f"and {rng.randint(10, 95)} percent of residents supported the decision."
        )
    return " ".join(lines)


def long_report(words: int = 5200) -> str:
    parts, count, seed = [], 0, 1000
    while count < words:
        paragraph = report(seed, sentences=6)
        parts.append(paragraph)
        count += len(paragraph.split())
        seed += 1
    return "\n\n".join(parts)
