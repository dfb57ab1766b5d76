"""django-allauth's social account adapter: who a provider's sign-in becomes.

A first sign-in makes its account there and then (just in time). It joins an existing local account
only by an e-mail address the provider vouches for (OpenID Connect's `email_verified`; for SAML, the
provider's configuration that its addresses are trusted), never by a name or an unverified address:
such a sign-in is refused, so nobody takes over a local account by claiming its address at a
provider that does not check it (docs/security.md)."""

from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialLogin
from django.conf import settings
from django.contrib.auth import get_user_model
from django.http import HttpRequest
from django.template.response import TemplateResponse


def vouched_for(sociallogin: SocialLogin, address) -> bool:
    """Whether the provider vouches for this e-mail address: OpenID Connect's `email_verified`;
    for SAML, which has no such flag, the provider's configuration (`emails_trusted`)."""
    provider = settings.SSO_PROVIDERS.get(sociallogin.account.provider, {})
    if provider.get("protocol") == "saml":
        return bool(provider.get("emails_trusted"))
    return bool(address.verified)


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def pre_social_login(self, request: HttpRequest, sociallogin: SocialLogin) -> None:
        if sociallogin.is_existing:
            return
        addresses = {
            address.email.casefold(): address for address in sociallogin.email_addresses if address.email
        }
        if not addresses:
            return
        users = get_user_model().objects.all()
        matches = {user for email in addresses for user in users.filter(email__iexact=email)}
        if not matches:
            return
        verified = [user for user in matches if vouched_for(sociallogin, addresses[user.email.casefold()])]
        if len(matches) == 1 and verified:
            sociallogin.connect(request, verified[0])
            return
        raise ImmediateHttpResponse(
            TemplateResponse(request, "sso/refused.html", {"reason": "email_unverified"}, status=403)
        )

    def is_auto_signup_allowed(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        return True

    def is_open_for_signup(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        return True
