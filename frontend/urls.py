from django.urls import path

from frontend import health, views

urlpatterns = [
    path("", views.chat, name="chat"),
    path("c/<int:conversation_id>/", views.chat, name="conversation"),
    path("healthz", health.healthz, name="healthz"),
]
