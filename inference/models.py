"""Who may use which model: a model with a ModelAccess row is offered only to its groups' members
(and superusers); a model without one, to everyone (inference.access)."""

from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import models


class ModelAccess(models.Model):
    model_name = models.CharField(max_length=200, unique=True, help_text="A name of INFERENCE_MODELS.")
    groups = models.ManyToManyField(Group, blank=True, related_name="model_access")

    class Meta:
        verbose_name = "model access"
        verbose_name_plural = "model access"

    def __str__(self) -> str:
        return self.model_name

    def clean(self) -> None:
        # The default model is everyone's (inference.access): a row for it would be silently ignored.
        from inference.engine import default_model

        if self.model_name == default_model():
            raise ValidationError(
                {
                    "model_name": f"{self.model_name} is the default model, which every user may use; "
                    "only the other models can be restricted to groups."
                }  # fmt: skip
            )
