from django.apps import AppConfig


class OpenAIApiConfig(AppConfig):
    name = "openai_api"
    verbose_name = "OpenAI-compatible API"

    def ready(self) -> None:
        from answers import takeover
        from openai_api import serving

        # A process that finds an API answer's process dead records it (openai_api.serving).
        takeover.TAKERS["api"] = serving.take_over
