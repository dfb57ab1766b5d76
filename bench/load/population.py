"""The load test's users, made up front: sessions as a login would make them (so the login throttle,
20 form logins in 5 minutes, is not what is measured) and the programs' API keys."""

import contextlib
import math
import time
import uuid
from collections.abc import Iterator

from django.contrib.auth import get_user_model
from django.db import IntegrityError
from django.test import Client

from apitokens.models import Scope
from apitokens.services import token_issue


def _session(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


@contextlib.contextmanager
def population(users: int, weights: dict[str, int]) -> Iterator[tuple[dict, dict[str, list[str]]]]:
    """Enough users of each kind for `users` simulated ones in the proportions of `weights`:
    (the plan for locust: session cookies of "ws" and "sse" users, keys of "api" programs;
    the usernames of each kind). The users and everything they stored are deleted afterwards."""
    total = sum(weights.values()) or 1
    made = []
    plan: dict[str, list] = {}
    names: dict[str, list[str]] = {}
    try:
        for kind, weight in weights.items():
            count = math.ceil(users * weight / total) + 1 if weight else 0
            accounts = [
                get_user_model().objects.create_user(f"load-{kind}-{uuid.uuid4().hex[:10]}")
                for _ in range(count)
            ]
            made += accounts
            names[kind] = [user.username for user in accounts]
            if kind == "api":
                plan[kind] = [
                    {
                        "username": user.username,
                        "key": token_issue(user=user, scopes=[Scope.OPENAI], name="load")[1],
                    }
                    for user in accounts
                ]
            else:
                plan[kind] = [_session(user) for user in accounts]
        yield plan, names
    finally:
        _delete([user.pk for user in made])


def _delete(pks: list[int], tries: int = 10) -> None:
    """The users and what they stored. An answer outlives its reader (the server finishes it when
    the load generator has stopped), and its end records the user's usage: a row written while the
    users are deleted fails the deletion's foreign keys, so it collects again until none is."""
    for attempt in range(tries):
        try:
            get_user_model().objects.filter(pk__in=pks).delete()
            return
        except IntegrityError:
            if attempt == tries - 1:
                raise
            time.sleep(3)
