from django.urls import path

from apitokens import views

urlpatterns = [path("keys/", views.keys, name="api-keys")]
