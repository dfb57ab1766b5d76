from django.urls import path

from batches import views

urlpatterns = [
    path("v1/files", views.file_collection, name="openai-files"),
    path("v1/files/<str:file_id>", views.file_detail, name="openai-file"),
    path("v1/files/<str:file_id>/content", views.file_content, name="openai-file-content"),
    path("v1/batches", views.batch_collection, name="openai-batches"),
    path("v1/batches/<str:batch_id>", views.batch_detail, name="openai-batch"),
    path("v1/batches/<str:batch_id>/cancel", views.batch_cancel, name="openai-batch-cancel"),
]
