from django.apps import AppConfig


class RedisConnConfig(AppConfig):
    # An app for its management command (the bundled Redis: `runredis`); it has no models.
    name = "redisconn"
    verbose_name = "Redis"
