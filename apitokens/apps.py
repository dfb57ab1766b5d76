from django.apps import AppConfig


class ApiTokensConfig(AppConfig):
    name = "apitokens"
    verbose_name = "API tokens"

    def ready(self) -> None:
        from apitokens import signals  # noqa: F401 - connects the receivers
