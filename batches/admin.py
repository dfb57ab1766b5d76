"""Batches and their files in the admin, read-only: each batch links to its bulk job, whose page shows
its lines' progress and lets staff cancel it (the batch then ends `cancelled`, batches.services)."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from batches.models import Batch, File


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Batch)
class BatchAdmin(ReadOnly):
    list_display = ["batch_id", "owner", "endpoint", "status", "job_link", "created_at"]
    list_filter = ["status", "endpoint", "created_at"]
    search_fields = ["batch_id", "owner__username"]
    list_select_related = ["owner", "job"]

    @admin.display(description="bulk job")
    def job_link(self, batch: Batch) -> str:
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:jobs_job_change", args=[batch.job_id]), batch.job_id
        )


@admin.register(File)
class FileAdmin(ReadOnly):
    list_display = ["file_id", "owner", "purpose", "filename", "bytes", "created_at", "expires_at"]
    list_filter = ["purpose", "created_at"]
    search_fields = ["file_id", "filename", "owner__username"]
    list_select_related = ["owner"]
    exclude = ["content"]
