"""The test provider's users, read from a JSON file the tests rewrite between sign-ins
(harness.OidcProvider.set_user): a username's password, e-mail, whether the e-mail is verified,
and groups. The validator puts them in the ID token and the userinfo response."""

import json
import os
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import BaseBackend
from oauth2_provider.oauth2_validators import OAuth2Validator


def users() -> dict:
    return json.loads((Path(os.environ["OIDC_TEST_STATE"]) / "users.json").read_text())


class FileBackend(BaseBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        entry = users().get(username or "")
        if entry is None or entry["password"] != password:
            return None
        return get_user_model().objects.get_or_create(username=username)[0]

    def get_user(self, user_id):
        return get_user_model().objects.filter(pk=user_id).first()


class Validator(OAuth2Validator):
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "openid"}

    def get_additional_claims(self, request):
        entry = users()[request.user.username]
        return {
            "preferred_username": request.user.username,
            "name": entry.get("name", request.user.username),
            "email": entry["email"],
            "email_verified": entry["email_verified"],
            "groups": entry["groups"],
        }
