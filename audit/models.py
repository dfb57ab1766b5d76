"""The record of every read of a conversation by someone other than its owner: who, whose, which,
when and through what (docs/security.md). Written by audit.services, shown to superusers only."""

from django.conf import settings
from django.db import models


class ConversationRead(models.Model):
    class Through(models.TextChoices):
        STORE_LIST = "store_list", "store API: list"
        STORE_DETAIL = "store_detail", "store API: one conversation"
        ADMIN = "admin", "admin"
        EXPORT = "export", "export_conversations"
        API = "api", "OpenAI API: stored completions"

    # Null for a command run from the shell, which has no user.
    reader = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reader_name = models.CharField(max_length=150)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Null for a list, which reads many; kept as an id so the record outlives the conversation.
    conversation_id = models.BigIntegerField(null=True, blank=True)
    through = models.CharField(max_length=16, choices=Through.choices)
    detail = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.reader_name} read {self.conversation_id or 'conversations'} through {self.through}"
