from django.apps import AppConfig


class InferenceConfig(AppConfig):
    name = "inference"
    verbose_name = "Inference engine"

    def ready(self) -> None:
        # The engine boundary's metrics exist from the start: /metrics shows them before any call.
        from inference import metrics  # noqa: F401
