from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Chat"

    def ready(self) -> None:
        from answers import takeover
        from chat import (
            generation,
            metrics,  # noqa: F401 - the chat page's metrics exist from the start, for /metrics
            signals,  # noqa: F401 - connects the receivers
        )

        # A process that finds a chat answer's process dead continues it (chat.generation).
        takeover.TAKERS["chat"] = generation.take_over
