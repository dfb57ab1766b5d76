"""The load test's users, made up front: sessions as a login would make them (so the login throttle,
20 form logins in 5 minutes, is not what is measured) and the programs' API keys."""

import contextlib
import math
import uuid
from collections.abc import Iterator

from django.contrib.auth import get_user_model

from apitokens.models import Scope
from apitokens.services import token_issue
from bench.processes import delete_users, session_cookie


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
                plan[kind] = [session_cookie(user) for user in accounts]
        yield plan, names
    finally:
        delete_users([user.pk for user in made])
