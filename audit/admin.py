from django.contrib import admin

from audit.models import ConversationRead


class RecordAdmin(admin.ModelAdmin):
    """A record the product writes: shown, never added, changed or deleted in the admin."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ConversationRead)
class ConversationReadAdmin(RecordAdmin):
    list_display = ["at", "reader_name", "owner", "conversation_id", "through", "detail"]
    list_filter = ["through", "at"]
    search_fields = ["reader_name", "owner__username", "detail"]
    list_select_related = ["owner"]
    fields = list_display
    readonly_fields = list_display

    # Superusers only.
    def has_module_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_superuser

    def has_view_permission(self, request, obj=None) -> bool:
        return request.user.is_active and request.user.is_superuser
