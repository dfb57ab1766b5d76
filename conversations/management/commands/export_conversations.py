"""Stream the conversation store to stdout, one JSON object per conversation per line.

Conversations are read in chunks with their messages prefetched per chunk, so the
store never sits in memory whole. Each line has the shape of
`/api/conversations/ID/` (docs/store.md).
"""

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Prefetch

from audit.models import ConversationRead
from audit.services import conversation_reads_record
from conversations import selectors
from conversations.models import Conversation, Message

CHUNK = 200


class Command(BaseCommand):
    help = "Write conversations with all their messages to stdout as JSON Lines."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--format", choices=["jsonl"], default="jsonl")
        parser.add_argument("--since", help="Only conversations active since this ISO date or date-time.")
        parser.add_argument("--user", help="Only this user's conversations.")

    def handle(self, *args, since: str | None, user: str | None, **options) -> None:
        conversations = Conversation.objects.select_related("owner").order_by("id")
        if user:
            if not get_user_model().objects.filter(username=user).exists():
                raise CommandError(f"no such user: {user}")
            conversations = conversations.filter(owner__username=user)
        if since:
            try:
                conversations = conversations.filter(updated_at__gte=selectors.since_from(since))
            except ValueError as exc:
                raise CommandError(f"--since: {exc}") from None
        ordered = Prefetch("messages", queryset=Message.objects.order_by("created_at", "id"))
        batch: list[Conversation] = []
        for conversation in conversations.prefetch_related(ordered).iterator(chunk_size=CHUNK):
            batch.append(conversation)
            if len(batch) == CHUNK:
                self._write(batch)
                batch = []
        self._write(batch)

    def _write(self, batch: list[Conversation]) -> None:
        # Recorded before written, as every read of other users' conversations is (docs/security.md).
        conversation_reads_record(
            reader=None,
            conversations=[(c.pk, c.owner_id) for c in batch],
            through=ConversationRead.Through.EXPORT,
        )
        for conversation in batch:
            self.stdout.write(json.dumps(selectors.conversation_detail(conversation), ensure_ascii=False))
