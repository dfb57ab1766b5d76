"""What a provider's sign-in does beyond logging in: the user's groups are mapped again
(sso.groups), the session lives at most SSO_SESSION_MAX_AGE, and the session is recorded with the
provider's session id, which a back-channel logout names (sso.backchannel)."""

from allauth.account.signals import user_logged_in
from allauth.socialaccount.models import SocialAccount, SocialLogin
from django.conf import settings
from django.dispatch import receiver
from django.http import HttpRequest
from django.utils import timezone

from sso.groups import apply_provider_groups
from sso.models import SignIn


def provider_claims(sociallogin: SocialLogin) -> dict:
    """What an OpenID provider said of the user: the ID token's claims, and the userinfo's over them."""
    data = sociallogin.account.extra_data or {}
    return {**data.get("id_token", {}), **data.get("userinfo", {})}


def provider_groups(provider_id: str, sociallogin: SocialLogin) -> list[str]:
    """The group names the provider sent at this sign-in (its configured claim or attribute)."""
    provider = settings.SSO_PROVIDERS.get(provider_id, {})
    if provider.get("protocol") == "oidc":
        groups = provider_claims(sociallogin).get(provider["groups_claim"], [])
    else:
        groups = (sociallogin.account.extra_data or {}).get(provider.get("groups_attribute", "groups"), [])
    if isinstance(groups, str):
        groups = [groups]
    return [name for name in groups if isinstance(name, str)]


@receiver(user_logged_in)
def follow_the_provider(
    sender, request: HttpRequest, user, sociallogin: SocialLogin | None = None, **kwargs
) -> None:
    if sociallogin is None:
        return
    provider_id = sociallogin.account.provider
    apply_provider_groups(user, provider_id, provider_groups(provider_id, sociallogin))
    # The key lapse (apitokens.auth) counts from here, whatever allauth saved before.
    SocialAccount.objects.filter(pk=sociallogin.account.pk).update(last_login=timezone.now())
    request.session.set_expiry(settings.SSO_SESSION_MAX_AGE)
    if request.session.session_key is None:
        request.session.save()
    SignIn.objects.update_or_create(
        session_key=request.session.session_key,
        defaults={
            "user": user,
            "provider_id": provider_id,
            "sid": str(provider_claims(sociallogin).get("sid", ""))[:255],
        },
    )
