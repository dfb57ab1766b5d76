from django.urls import path

from openai_api import views

urlpatterns = [
    path("v1/chat/completions", views.chat_completions, name="openai-chat-completions"),
    path("v1/embeddings", views.embeddings, name="openai-embeddings"),
    path("v1/models", views.models, name="openai-models"),
    path("v1/models/<path:name>", views.model, name="openai-model"),
]
