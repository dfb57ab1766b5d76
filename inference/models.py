"""Who may use which model: a model with a ModelAccess row is offered only to its groups' members
(and superusers); a model without one, to everyone (inference.access)."""

from django.contrib.auth.models import Group
from django.db import models


class ModelAccess(models.Model):
    model_name = models.CharField(max_length=200, unique=True, help_text="A name of INFERENCE_MODELS.")
    groups = models.ManyToManyField(Group, blank=True, related_name="model_access")

    class Meta:
        verbose_name = "model access"
        verbose_name_plural = "model access"

    def __str__(self) -> str:
        return self.model_name
