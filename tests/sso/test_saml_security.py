"""What the product refuses of a SAML identity provider's answer, each case a real Response from
pysaml2's identity provider over HTTP, made bad in one way: unsigned, signed by another key,
altered after signing, signed with SHA-1, expired, for another audience, destination or recipient, posted a
second time, or answering a request this browser never sent. None of them signs anybody in."""

import pytest
from allauth.socialaccount.models import SocialAccount

from tests.support import saml as support
from tests.support.saml import authenticate, begin, post_back, product_client, sign_in

saml, saml_idp = support.saml, support.saml_idp


def refused_sign_in(idp, fault: str):
    idp.fault = fault
    client = product_client()
    response = sign_in(client, "carol", "carol-pw")
    return client, response


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("unsigned", "The Assertion of the Response is not signed and the SP require it"),
        ("foreign_key", "Signature validation failed"),
        ("altered", "Signature validation failed"),
        ("sha1", "Deprecated signature algorithm found"),
        ("expired", "Could not validate timestamp: expired"),
        ("audience", "is not a valid audience for this Response"),
        ("destination", "instead of http://localhost/accounts/saml/acme/elsewhere/acs/"),
        ("recipient", "A valid SubjectConfirmation was not found on this Response"),
    ],
)
def test_it_refuses_a_bad_response(saml, caplog, fault, reason):
    client, response = refused_sign_in(saml, fault)
    assert response.status_code == 401
    assert reason in caplog.text
    assert not SocialAccount.objects.exists()
    assert not client.get("/").wsgi_request.user.is_authenticated


def test_the_same_response_signs_in_once(saml):
    first = product_client()
    fields = authenticate(begin(first), "carol", "carol-pw")
    assert post_back(first, fields).status_code == 302

    # The same browser posting it again, and another browser whose own sign-in it is made to answer.
    again = post_back(first, fields)
    assert again.status_code == 403 and b"used before" in again.content
    thief = product_client()
    begin(thief)
    stolen = post_back(thief, fields)
    assert stolen.status_code == 403 and b"used before" in stolen.content
    assert not thief.get("/").wsgi_request.user.is_authenticated


def test_it_refuses_a_response_to_a_request_this_browser_never_sent(saml):
    # A fresh, valid Response to another browser's request, posted in a browser that started none
    # (or one of its own): its InResponseTo names no state this session keeps.
    victim = product_client()
    fields = authenticate(begin(victim), "carol", "carol-pw")
    attacker = product_client()
    begin(attacker)
    response = post_back(attacker, fields)
    assert response.status_code == 403
    assert not attacker.get("/").wsgi_request.user.is_authenticated
    assert post_back(victim, fields).status_code == 403  # taken once, even by the refused post
