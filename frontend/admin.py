from django.contrib import admin

from frontend.models import Conversation, Message


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


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ["id", "title", "owner", "temperature", "max_tokens", "created_at", "updated_at"]
    list_filter = ["created_at"]
    search_fields = ["title", "owner__username"]
    raw_id_fields = ["owner", "current_leaf"]
    inlines = [MessageInline]


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
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
