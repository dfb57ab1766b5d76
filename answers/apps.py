from django.apps import AppConfig


class AnswersConfig(AppConfig):
    name = "answers"
    verbose_name = "Answers"

    def ready(self) -> None:
        # The answer metrics exist from the start: /metrics shows them before any answer ran.
        from answers import metrics  # noqa: F401
