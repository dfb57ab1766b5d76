from django.apps import AppConfig


class EngineHostConfig(AppConfig):
    # The engine's own process: a Django app for its management commands, with no models.
    name = "enginehost"
    verbose_name = "Inference engine host"
