from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "sso"
    verbose_name = "Single sign-on"

    def ready(self) -> None:
        from sso import checks, signin  # noqa: F401 - registers the checks, connects the receivers
