from django.contrib import admin

from audit.admin import RecordAdmin
from usage.models import DailyQuota, UsageDay


@admin.register(UsageDay)
class UsageDayAdmin(RecordAdmin):
    # Counted by the product as answers end; staff read them.
    list_display = [
        "day",
        "user",
        "source",
        "requests",
        "prompt_tokens",
        "cached_tokens",
        "completion_tokens",
    ]
    list_filter = ["source", "day"]
    search_fields = ["user__username"]
    date_hierarchy = "day"
    fields = list_display
    readonly_fields = list_display


@admin.register(DailyQuota)
class DailyQuotaAdmin(admin.ModelAdmin):
    list_display = ["__str__", "user", "group", "tokens"]
    search_fields = ["user__username", "group__name"]
    autocomplete_fields = ["user"]
    list_select_related = ["user", "group"]
