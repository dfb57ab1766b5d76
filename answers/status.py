"""How an answer stands: the status it is stored with, whichever surface asked for it. The chat's
Message stores it (conversations.models.Message.Status is this class) and answers.outcomes decides it."""

from django.db import models


class AnswerStatus(models.TextChoices):
    GENERATING = "generating"
    COMPLETE = "complete"
    STOPPED = "stopped"
    ERROR = "error"
    # Ended by a timeout (first token, between tokens, or total).
    TIMEOUT = "timeout"
    # Cut off by a failure outside the answer: the engine or a web process died.
    INTERRUPTED = "interrupted"
