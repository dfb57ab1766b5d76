"""Starting the test OpenID provider (serve.py) and speaking for it: its users, the product's
settings that point at it, and logout tokens signed with its own key, as a provider that sends
back-channel logout would send them (django-oauth-toolkit sends none)."""

import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwcrypto import jwk

from harness.processes import ROOT, free_port
from harness.waiting import wait_for

PROVIDER_ID = "test"
BACKCHANNEL_LOGOUT_EVENT = "http://schemas.openid.net/event/backchannel-logout"


def callback_url(base: str, provider_id: str = PROVIDER_ID) -> str:
    return f"{base}/accounts/oidc/{provider_id}/login/callback/"


@dataclass
class OidcProvider:
    state: Path
    port: int
    client_id: str = "chat-product"
    client_secret: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return f"{self.base}/o"

    @property
    def private_key(self) -> str:
        return (self.state / "signing-key.pem").read_text()

    @property
    def kid(self) -> str:
        # django-oauth-toolkit names its key by the key's JWK thumbprint.
        return jwk.JWK.from_pem(self.private_key.encode()).thumbprint()

    def set_user(
        self, username: str, *, password: str, email: str, email_verified: bool = True, groups: list[str] = ()
    ) -> None:
        """Add or change a user; the provider reads the file at every sign-in."""
        path = self.state / "users.json"
        users = json.loads(path.read_text()) if path.exists() else {}
        users[username] = {
            "password": password,
            "email": email,
            "email_verified": email_verified,
            "groups": list(groups),
        }
        draft = path.with_suffix(".draft")
        draft.write_text(json.dumps(users))
        draft.replace(path)

    def env(self, provider_id: str = PROVIDER_ID, **extra: str) -> dict[str, str]:
        """The product's variables for signing in with this provider (docs/configuration.md)."""
        prefix = f"SSO_OIDC_{provider_id.upper()}_"
        return {
            "SSO_OIDC_PROVIDERS": provider_id,
            prefix + "NAME": "Test provider",
            prefix + "SERVER_URL": self.issuer,
            prefix + "CLIENT_ID": self.client_id,
            prefix + "CLIENT_SECRET": self.client_secret,
            **extra,
        }

    def sign(self, claims: dict, *, key: str | None = None, algorithm: str = "RS256", kid: str = "") -> str:
        """A JWT signed as this provider signs (its key and kid), or with another key or algorithm."""
        headers = {"kid": kid or self.kid, "typ": "JWT"}
        signing_key = None if algorithm == "none" else key or self.private_key
        return jwt.encode(claims, signing_key, algorithm=algorithm, headers=headers)

    def logout_token(self, *, sub: str = "", sid: str = "", events: dict | None = None, **claims) -> str:
        """A back-channel logout token as the provider would send it, signed with its key."""
        now = int(time.time())
        body = {
            "iss": self.issuer,
            "aud": self.client_id,
            "iat": now,
            "exp": now + 120,
            "jti": uuid.uuid4().hex,
            "events": events if events is not None else {BACKCHANNEL_LOGOUT_EVENT: {}},
            **({"sub": sub} if sub else {}),
            **({"sid": sid} if sid else {}),
            **claims,
        }
        headers = {"kid": self.kid, "typ": "logout+jwt"}
        return jwt.encode(body, self.private_key, algorithm="RS256", headers=headers)


def new_rsa_key() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


@contextmanager
def running_provider(state: Path, redirect_uris: list[str], log: Path, port: int | None = None):
    """The test provider, serving discovery, JWKS, authorization, token and userinfo over HTTP."""
    state.mkdir(parents=True, exist_ok=True)
    (state / "signing-key.pem").write_text(new_rsa_key())
    (state / "users.json").write_text("{}")
    provider = OidcProvider(state=state, port=port or free_port())
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("DJANGO_")},
        "OIDC_TEST_STATE": str(state),
        "OIDC_TEST_SECRET_KEY": secrets.token_urlsafe(50),
        "OIDC_TEST_ISSUER": provider.issuer,
        "OIDC_TEST_CLIENT_ID": provider.client_id,
        "OIDC_TEST_CLIENT_SECRET": provider.client_secret,
        "OIDC_TEST_REDIRECT_URIS": " ".join(redirect_uris),
    }
    with open(log, "w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.oidc_provider.serve", str(provider.port)],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )

        def up() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"the test OpenID provider exited; see {log}")
            try:
                return httpx.get(provider.issuer + "/.well-known/openid-configuration", timeout=2).is_success
            except httpx.HTTPError:
                return False

        try:
            wait_for(up, 60, "the test OpenID provider")
            yield provider
        finally:
            process.terminate()
            process.wait(15)
