"""A sign-in driven over HTTP as a browser drives it, without one: the product (Django's test
client, in the test's process) sends the user to the provider; the provider (over HTTP, its own
cookies in an httpx client) logs the user in and sends them back with a code; the product's callback
takes the code. Each step can be stopped at, so a test can change what goes back."""

from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
from django.test import Client

from tests.support.oidc_provider.harness import PROVIDER_ID


def begin(client: Client, *, next_url: str = "", provider_id: str = PROVIDER_ID) -> str:
    """Press the login page's provider button; the provider's authorization URL it leads to."""
    response = client.post(f"/accounts/oidc/{provider_id}/login/", {"next": next_url} if next_url else {})
    assert response.status_code == 302, response.content[:500]
    return response["Location"]


def authorize(authorization_url: str, username: str, password: str) -> str:
    """Log in at the provider; the product's callback URL (with code and state) it sends back to."""
    with httpx.Client(timeout=30) as provider:
        response = provider.get(authorization_url)
        while response.status_code == 302 and urlsplit(response.headers["location"]).path == "/login/":
            login_url = urljoin(str(response.url), response.headers["location"])
            provider.get(login_url)  # sets the provider's CSRF cookie
            next_url = parse_qs(urlsplit(login_url).query)["next"][0]
            response = provider.post(
                login_url,
                data={
                    "username": username,
                    "password": password,
                    "next": next_url,
                    "csrfmiddlewaretoken": provider.cookies["provider_csrftoken"],
                },
                headers={"Referer": login_url},
            )
            assert response.status_code == 302, response.text[:500]
            response = provider.get(urljoin(login_url, response.headers["location"]))
        assert response.status_code == 302, response.text[:500]
        return response.headers["location"]


def finish(client: Client, callback: str):
    """The product's answer to the provider's redirect back."""
    parts = urlsplit(callback)
    return client.get(parts.path, {name: values[0] for name, values in parse_qs(parts.query).items()})


def sign_in(client: Client, username: str, password: str, *, next_url: str = ""):
    """A whole sign-in; the product's last answer (a redirect into the product when it worked)."""
    return finish(client, authorize(begin(client, next_url=next_url), username, password))
