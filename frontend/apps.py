from django.apps import AppConfig


class FrontendConfig(AppConfig):
    name = "frontend"
    verbose_name = "Chat"

    def ready(self) -> None:
        from frontend import signals  # noqa: F401 - connects the receivers
