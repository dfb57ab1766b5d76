"""The models a user may chat with: the engines' models (inference.engine.served_models), less
those the admin restricted to groups the user is not in (inference.models.ModelAccess). The default
model is everyone's: a user always has one model to chat with."""

from django.contrib.auth.models import AbstractBaseUser

from inference.engine import served_models
from inference.models import ModelAccess


def models_for(*, user: AbstractBaseUser) -> list[str]:
    """The user's models, the default first where they may use it."""
    names = list(served_models())
    if user.is_superuser or len(names) == 1:
        return names
    restricted = dict(ModelAccess.objects.filter(model_name__in=names[1:]).values_list("model_name", "pk"))
    if not restricted:
        return names
    allowed = set(
        ModelAccess.objects.filter(pk__in=restricted.values(), groups__user=user).values_list(
            "model_name", flat=True
        )
    )
    return [name for name in names if name not in restricted or name in allowed]
