from django.apps import AppConfig


class ApiTokensConfig(AppConfig):
    name = "apitokens"
    verbose_name = "API tokens"
