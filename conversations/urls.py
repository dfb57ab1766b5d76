from django.urls import path

from conversations import api

urlpatterns = [
    path("api/conversations/", api.conversation_list, name="api-conversations"),
    path("api/conversations/<int:conversation_id>/", api.conversation_detail, name="api-conversation"),
]
