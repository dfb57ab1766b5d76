"""Rules across single sign-on's settings: SSO_ONLY needs a provider to sign in with, and a
break-glass account for the day the provider is down."""

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


@register(Tags.security)
def check_sso_only(app_configs, **kwargs) -> list:
    if not settings.SSO_ONLY:
        return []
    problems = []
    if not settings.SSO_PROVIDERS:
        problems.append(
            Error(
                "SSO_ONLY is on and no provider is configured: only the break-glass account could log in",
                hint="Name providers in SSO_OIDC_PROVIDERS (docs/configuration.md), or turn SSO_ONLY off.",
                id="sso.E001",
            )
        )
    if not settings.SSO_BREAK_GLASS_USER:
        problems.append(
            Warning(
                "SSO_ONLY is on without SSO_BREAK_GLASS_USER: no one can log in while the provider is down",
                hint="Name a staff account in SSO_BREAK_GLASS_USER.",
                id="sso.W001",
            )
        )
    return problems
