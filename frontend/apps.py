from django.apps import AppConfig


class FrontendConfig(AppConfig):
    name = "frontend"
    verbose_name = "Chat"

    def ready(self) -> None:
        from answers import takeover
        from frontend import (
            generation,
            metrics,  # noqa: F401 - the chat page's metrics exist from the start, for /metrics
            signals,  # noqa: F401 - connects the receivers
        )

        # A process that finds a chat answer's process dead continues it (frontend.generation).
        takeover.TAKERS["chat"] = generation.take_over
