from django.urls import path

from chat import http_stream, views

urlpatterns = [
    path("", views.chat, name="chat"),
    path("c/<int:conversation_id>/", views.chat, name="conversation"),
    path("c/new", views.conversation_new, name="conversation-new"),
    path("c/<int:conversation_id>/rename", views.conversation_rename, name="conversation-rename"),
    path("c/<int:conversation_id>/flags", views.conversation_flags, name="conversation-flags"),
    path("c/<int:conversation_id>/delete", views.conversation_delete, name="conversation-delete"),
    path("c/<int:conversation_id>/settings", views.conversation_settings, name="conversation-settings"),
    path("c/<int:conversation_id>/show", views.conversation_show, name="conversation-show"),
    path("c/<int:conversation_id>/share", views.conversation_share, name="conversation-share"),
    path("c/<int:conversation_id>/shares", views.conversation_shares, name="conversation-shares"),
    path("c/<int:conversation_id>/unshare", views.conversation_unshare, name="conversation-unshare"),
    path(
        "c/<int:conversation_id>/collections", views.conversation_collections, name="conversation-collections"
    ),
    path("c/<int:conversation_id>/export", views.conversation_export, name="conversation-export"),
    path("c/<int:conversation_id>/documents", views.document_attach, name="document-attach"),
    path(
        "c/<int:conversation_id>/documents/<int:document_id>/remove",
        views.document_remove,
        name="document-remove",
    ),
    path("s/<str:token>/", views.shared, name="shared"),
    path("chat/stream", http_stream.chat_stream, name="chat-stream"),
    path("chat/stop", http_stream.chat_stop, name="chat-stop"),
]
