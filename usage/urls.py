from django.urls import path

from usage import views

urlpatterns = [path("usage/", views.usage_page, name="usage")]
