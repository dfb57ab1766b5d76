from django.apps import AppConfig


class ChatsiteConfig(AppConfig):
    name = "chatsite"
    verbose_name = "Configuration"

    def ready(self) -> None:
        from chatsite import checks  # noqa: F401 - registers the system checks
