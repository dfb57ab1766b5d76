from django.contrib import admin

from inference.models import ModelAccess


@admin.register(ModelAccess)
class ModelAccessAdmin(admin.ModelAdmin):
    list_display = ["model_name"]
    filter_horizontal = ["groups"]
