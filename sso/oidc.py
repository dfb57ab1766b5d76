"""OpenID Connect sign-in through django-allauth's provider, made strict.

allauth's provider brings discovery, the authorization code flow, `state` (kept in the session and
checked on return) and PKCE (on for every provider: chatsite/signon.py). What it leaves out is added
here: a `nonce` sent with every sign-in and checked in the ID token, and the ID token's signature
checked always (allauth skips it for a token it fetched itself), with the provider's configured
algorithms only (sso.tokens). The login and callback views keep allauth's URL names, so allauth's
own links reach these views; allauth's own OpenID Connect views are not mounted."""

import secrets

from allauth.account.internal.decorators import login_not_required
from allauth.socialaccount.adapter import get_adapter
from allauth.socialaccount.models import SocialApp
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from allauth.socialaccount.providers.openid_connect.provider import OpenIDConnectProvider
from allauth.socialaccount.providers.openid_connect.views import OpenIDConnectOAuth2Adapter
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.http import require_POST

from sso import tokens


class StrictAdapter(OpenIDConnectOAuth2Adapter):
    """allauth's adapter, with the ID token's signature and nonce always checked."""

    # The state stashed when this sign-in began (StrictCallbackView), holding its nonce.
    state: dict | None = None

    def _decode_id_token(self, app: SocialApp, id_token: str) -> dict:
        with get_adapter().get_requests_session() as session:
            claims = tokens.verify(
                id_token,
                provider_id=app.provider_id,
                jwks_uri=self.openid_config["jwks_uri"],
                issuer=self.openid_config["issuer"],
                audience=app.client_id,
                required=["iss", "aud", "exp", "iat", "sub"],
                session=session,
            )
        return tokens.check_id_token(claims, audience=app.client_id, nonce=(self.state or {}).get("nonce"))

    def complete_login(self, request: HttpRequest, app, token, **kwargs):
        if not kwargs["response"].get("id_token"):
            # Without an ID token nothing signed says who signed in.
            raise tokens.TokenInvalid("the provider sent no ID token")
        return super().complete_login(request, app, token, **kwargs)


class StrictProvider(OpenIDConnectProvider):
    """allauth's OpenID Connect provider, sending a nonce it keeps with the sign-in's state."""

    def get_oauth2_adapter(self, request: HttpRequest) -> StrictAdapter:
        return StrictAdapter(request, self.app.provider_id)

    def redirect(self, request: HttpRequest, process, next_url=None, data=None, **kwargs):
        nonce = secrets.token_urlsafe(32)
        auth_params = kwargs.pop("auth_params", None)
        auth_params = dict(self.get_auth_params() if auth_params is None else auth_params, nonce=nonce)
        return super().redirect(
            request, process, next_url, data, auth_params=auth_params, nonce=nonce, **kwargs
        )


class StrictCallbackView(OAuth2CallbackView):
    def _get_state(self, request: HttpRequest, provider):
        state, response = super()._get_state(request, provider)
        self.adapter.state = state
        return state, response


@login_not_required
@require_POST
def login(request: HttpRequest, provider_id: str) -> HttpResponse:
    """Start a sign-in (a POST, so another site cannot start one in the user's browser)."""
    try:
        return OAuth2LoginView.adapter_view(StrictAdapter(request, provider_id))(request)
    except SocialApp.DoesNotExist:
        raise Http404 from None


@login_not_required
def callback(request: HttpRequest, provider_id: str) -> HttpResponse:
    try:
        return StrictCallbackView.adapter_view(StrictAdapter(request, provider_id))(request)
    except SocialApp.DoesNotExist:
        raise Http404 from None
