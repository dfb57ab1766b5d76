from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts"

    def ready(self) -> None:
        from accounts import checks, signals, throttle  # noqa: F401 - registers checks, connects receivers
