"""SAML 2.0 sign-in through django-allauth's provider (python3-saml underneath), made strict.

allauth and python3-saml bring SP-initiated sign-in, the SP's metadata, and python3-saml's strict
checks (the assertion's signature against the identity provider's certificate, audience,
destination, recipient, issuer, NotBefore/NotOnOrAfter); allauth takes a response only for a
request this browser's session sent (its `InResponseTo` names the stashed state, used once).
chatsite/signon_saml.py makes signed assertions and SP-initiated sign-in mandatory. Added here:
- an assertion is taken once: its id is kept in Redis until it expires, so a copy posted again
  (from this browser or another) is refused;
- the e-mail address counts as verified only where the provider's configuration says its
  addresses are trusted (SAML carries no `email_verified`); an attribute saying so is ignored;
- a transient NameID, new at every sign-in, is refused unless an attribute names the user;
- single logout (allauth's view) takes only a signed LogoutRequest or LogoutResponse, and a
  LogoutRequest ends every session the provider opened for the user it names, in any browser
  (sso.backchannel.end_sessions), not only the browser that carried it; the login-change signal
  then closes the user's chat sockets."""

import logging
import time

from allauth.account.internal.decorators import login_not_required
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.providers.saml import views as allauth_views
from allauth.socialaccount.providers.saml.provider import SAMLProvider
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.views.decorators.csrf import csrf_exempt
from onelogin.saml2.auth import OneLogin_Saml2_Auth
from onelogin.saml2.constants import OneLogin_Saml2_Constants
from onelogin.saml2.logout_request import OneLogin_Saml2_Logout_Request
from onelogin.saml2.utils import OneLogin_Saml2_Utils

import redisconn
from redisconn import keys
from sso.backchannel import end_sessions

logger = logging.getLogger(__name__)

# How long past an assertion's NotOnOrAfter python3-saml still accepts it (clock drift), and how
# long an assertion without one is remembered.
CLOCK_DRIFT = OneLogin_Saml2_Constants.ALLOWED_CLOCK_DRIFT
UNTIMED_MEMORY = 24 * 3600


class StrictSAMLProvider(SAMLProvider):
    """allauth's SAML provider with assertions taken once and e-mail trust from configuration."""

    def sociallogin_from_response(self, request: HttpRequest, response: OneLogin_Saml2_Auth):
        if not take_assertion(
            self.sub_id, response.get_last_assertion_id(), response.get_last_assertion_not_on_or_after()
        ):
            logger.warning(
                "SAML provider %s: assertion %s posted again", self.sub_id, response.get_last_assertion_id()
            )
            raise ImmediateHttpResponse(refused(request, "saml_replayed"))
        if not self._extract(response).get("uid") and (
            response.get_nameid_format() == OneLogin_Saml2_Constants.NAMEID_TRANSIENT
        ):
            logger.warning("SAML provider %s: a transient NameID names nobody for long", self.sub_id)
            raise ImmediateHttpResponse(refused(request, "saml_transient"))
        return super().sociallogin_from_response(request, response)

    def extract_common_fields(self, data: OneLogin_Saml2_Auth) -> dict:
        fields = super().extract_common_fields(data)
        fields["email_verified"] = settings.SSO_PROVIDERS[self.sub_id]["emails_trusted"]
        return fields


def take_assertion(provider_id: str, assertion_id: str | None, not_on_or_after: int | None) -> bool:
    """True the first time an assertion id is seen, until python3-saml would refuse it as expired."""
    if not assertion_id:
        return False
    memory = UNTIMED_MEMORY if not_on_or_after is None else int(not_on_or_after - time.time()) + CLOCK_DRIFT
    return bool(
        redisconn.sync_client().set(
            keys.sso_saml_assertion(provider_id, assertion_id), 1, nx=True, ex=max(memory, 1)
        )
    )


def refused(request: HttpRequest, reason: str) -> TemplateResponse:
    return TemplateResponse(request, "sso/refused.html", {"reason": reason}, status=403)


@csrf_exempt
@login_not_required
def single_logout(request: HttpRequest, organization_slug: str) -> HttpResponse:
    """allauth's single logout service (Redirect binding), for signed messages only."""
    if "Signature" not in request.GET:
        logger.warning("SAML provider %s: an unsigned logout message refused", organization_slug)
        return HttpResponse("A logout message must be signed.", status=400, content_type="text/plain")
    response = allauth_views.sls(request, organization_slug=organization_slug)
    if response.status_code == 302 and "SAMLRequest" in request.GET:
        # allauth checked the request (signature, issuer, destination, time) and ended this browser's
        # session: the user's other sessions from this provider end too.
        xml = OneLogin_Saml2_Utils.decode_base64_and_inflate(request.GET["SAMLRequest"])
        name_id = OneLogin_Saml2_Logout_Request.get_nameid(xml)
        ended = end_sessions(organization_slug, sub=name_id, sid="", account_gone=False)
        logger.info("SAML provider %s: single logout ended %d more sessions", organization_slug, ended)
    return response
