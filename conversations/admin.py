"""Conversations and messages in the admin: read-only, for those with the read_all_conversations
permission only (is_staff alone sees nothing of them), and every page that shows them recorded in
the audit log (audit.ConversationRead) before it is answered."""

from django.contrib import admin

from audit.admin import RecordAdmin
from audit.models import ConversationRead
from audit.services import conversation_read_record
from conversations import selectors
from conversations.models import Conversation, Message


class ReadOnlyAudited(RecordAdmin):
    """Shown to readers of every conversation only; never changed here; each page recorded."""

    def has_module_permission(self, request) -> bool:
        return selectors.may_read_all(request.user)

    def has_view_permission(self, request, obj=None) -> bool:
        return selectors.may_read_all(request.user)

    def _conversation_of(self, obj) -> Conversation:
        raise NotImplementedError

    def changelist_view(self, request, extra_context=None):
        if self.has_view_permission(request):
            conversation_read_record(
                reader=request.user,
                owner_id=None,
                conversation_id=None,
                through=ConversationRead.Through.ADMIN,
                detail=f"{self.model._meta.verbose_name_plural} list {request.GET.urlencode()}".strip(),
            )
        return super().changelist_view(request, extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        self._record_read(request, object_id, "")
        return super().change_view(request, object_id, form_url, extra_context)

    def history_view(self, request, object_id, extra_context=None):
        # The history page shows the object's title too: read like the change page, recorded alike.
        self._record_read(request, object_id, " history")
        return super().history_view(request, object_id, extra_context)

    def _record_read(self, request, object_id, page: str) -> None:
        obj = self.get_object(request, object_id)
        if obj is not None and self.has_view_permission(request, obj):
            conversation = self._conversation_of(obj)
            conversation_read_record(
                reader=request.user,
                owner_id=conversation.owner_id,
                conversation_id=conversation.pk,
                through=ConversationRead.Through.ADMIN,
                detail=f"{self.model._meta.verbose_name} {obj.pk}{page}",
            )


class MessageInline(admin.TabularInline):
    model = Message
    extra = 0
    can_delete = False
    fields = [
        "parent",
        "role",
        "status",
        "content",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "ttft_ms",
    ]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_view_permission(self, request, obj=None) -> bool:
        return selectors.may_read_all(request.user)


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAudited):
    list_display = ["id", "title", "owner", "temperature", "max_tokens", "created_at", "updated_at"]
    list_filter = ["created_at"]
    search_fields = ["title", "owner__username"]
    raw_id_fields = ["owner", "current_leaf"]
    inlines = [MessageInline]

    def _conversation_of(self, obj: Conversation) -> Conversation:
        return obj


@admin.register(Message)
class MessageAdmin(ReadOnlyAudited):
    list_display = [
        "id",
        "conversation",
        "role",
        "status",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
        "ttft_ms",
        "finish_reason",
        "created_at",
    ]
    list_filter = ["role", "status", "finish_reason"]
    search_fields = ["content"]
    raw_id_fields = ["conversation", "parent"]

    def _conversation_of(self, obj: Message) -> Conversation:
        return obj.conversation
