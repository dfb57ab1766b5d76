from django.urls import path

from openai_api import stored, views

urlpatterns = [
    path("v1/chat/completions", views.chat_completions, name="openai-chat-completions"),
    path(
        "v1/chat/completions/<str:completion_id>", stored.completion_detail, name="openai-stored-completion"
    ),
    path(
        "v1/chat/completions/<str:completion_id>/messages",
        stored.completion_messages,
        name="openai-stored-messages",
    ),
    path("v1/embeddings", views.embeddings, name="openai-embeddings"),
    path("v1/models", views.models, name="openai-models"),
    path("v1/models/<path:name>", views.model, name="openai-model"),
]
