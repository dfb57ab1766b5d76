"""Single sign-on's URLs: OpenID Connect sign-in (under allauth's names, which its links reverse),
back-channel logout, SAML's (allauth's views, with sso.saml's provider), and allauth's pages for a
failed or cancelled sign-in. allauth's account views (signup, password reset) are not mounted:
passwords stay with the throttled login form."""

from allauth.socialaccount import views as social_views
from django.urls import include, path
from django.views.generic import RedirectView, TemplateView

from sso import backchannel, oidc, saml

urlpatterns = [
    path("accounts/oidc/<str:provider_id>/login/", oidc.login, name="openid_connect_login"),
    path("accounts/oidc/<str:provider_id>/login/callback/", oidc.callback, name="openid_connect_callback"),
    path(
        "accounts/oidc/<str:provider_id>/backchannel-logout/",
        backchannel.backchannel_logout,
        name="sso_backchannel_logout",
    ),
    # SAML 2.0 (sso.saml): /accounts/saml/<id>/ login/, acs/ (and acs/finish/), sls/, metadata/.
    path("accounts/saml/<str:organization_slug>/sls/", saml.single_logout, name="saml_sls"),
    path("accounts/", include("allauth.socialaccount.providers.saml.urls")),
    path("accounts/sso/cancelled/", social_views.login_cancelled, name="socialaccount_login_cancelled"),
    path("accounts/sso/error/", social_views.login_error, name="socialaccount_login_error"),
    # Names allauth's flows reverse: each leads back to the one login page.
    path(
        "accounts/sso/inactive/",
        TemplateView.as_view(template_name="sso/refused.html", extra_context={"reason": "inactive"}),
        name="account_inactive",
    ),
    path("accounts/sso/login/", RedirectView.as_view(pattern_name="login"), name="account_login"),
    path("accounts/sso/signup/", RedirectView.as_view(pattern_name="login"), name="account_signup"),
    path(
        "accounts/sso/signup/social/", RedirectView.as_view(pattern_name="login"), name="socialaccount_signup"
    ),
]
