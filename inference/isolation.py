"""Prefix-cache isolation: the engine shares a cached prefix only between requests with the
same `cache_salt`, so each user's salt keeps their history from serving anyone else."""

import hashlib

from django.conf import settings


def cache_salt(purpose: str, user_id: int) -> str:
    """The salt of one user's requests of one kind (chat, bulk jobs), derived from SECRET_KEY
    so no client can name another user's."""
    return hashlib.sha256(f"{settings.SECRET_KEY}:{purpose}:{user_id}".encode()).hexdigest()[:32]
