"""The load test's user model: who the users are and what they do, each a parameter with its default.

`bench.load.run` takes them as flags and hands them to locust's process as `LOAD_*` variables;
docs/benchmarks.md ("Capacity: users on one box") lists them.
"""

import os
from dataclasses import dataclass, fields

PROMPTS = (
    "Name three teas and where they grow.",
    "Explain a hash map to a new programmer.",
    "Write a short poem about the sea.",
    "What should I pack for a weekend in the mountains?",
)


@dataclass(frozen=True)
class Model:
    # The mix: relative weights of chat-page users on the WebSocket, on the SSE fallback, and programs
    # on /v1/chat/completions.
    ws: int = 8
    sse: int = 1
    api: int = 1
    # Think time between a user's turns: uniform between these, in seconds (locust's `between`).
    think_min: float = 30.0
    think_max: float = 120.0
    # Per turn: the chance to open another conversation instead of continuing the current one.
    p_new_conversation: float = 0.2
    # Per answer (chat users): the chance to stop it, and to reload the page mid-answer and resume,
    # each after 1-8 token frames; per finished answer, the chance to regenerate it.
    p_stop: float = 0.1
    p_reload: float = 0.1
    p_regenerate: float = 0.1
    # An answer that shows nothing for this long counts as stalled: a failure of the run.
    answer_timeout: float = 120.0

    @property
    def weights(self) -> dict[str, int]:
        return {"ws": self.ws, "sse": self.sse, "api": self.api}

    @property
    def prompts(self) -> tuple[str, ...]:
        return PROMPTS

    @classmethod
    def from_environment(cls) -> "Model":
        values = {}
        for field in fields(cls):
            raw = os.environ.get(f"LOAD_{field.name.upper()}")
            if raw is not None:
                values[field.name] = type(field.default)(raw)
        return cls(**values)

    def environment(self) -> dict[str, str]:
        return {f"LOAD_{field.name.upper()}": str(getattr(self, field.name)) for field in fields(self)}
