"""SAML sign-in against pysaml2's identity provider over HTTP: the product's SP metadata, an
account made at the first sign-in, groups mapped on every sign-in, and an existing local account
joined by e-mail only where the provider's configuration trusts its addresses."""

import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from tests.support import saml as support
from tests.support.saml import product_client, sign_in

# The fixtures: the identity provider for this module, the product's settings for each test.
saml, saml_idp = support.saml, support.saml_idp

User = get_user_model()


def test_it_serves_the_sp_metadata_with_its_acs_and_certificate(saml):
    response = product_client().get("/accounts/saml/acme/metadata/")
    assert response.status_code == 200
    xml = response.content.decode()
    assert 'entityID="http://localhost/accounts/saml/acme/metadata/"' in xml
    assert 'Location="http://localhost/accounts/saml/acme/acs/"' in xml
    assert "X509Certificate" in xml
    assert 'WantAssertionsSigned="true"' in xml


def test_it_makes_the_account_at_the_first_sign_in(saml):
    client = product_client()
    response = sign_in(client, "carol", "carol-pw")
    assert response.status_code == 302 and response["Location"] == "/"
    account = SocialAccount.objects.get(provider="acme")
    assert account.uid == "idp-carol"
    assert account.user.email == "carol@example.com"
    assert client.get("/").wsgi_request.user == account.user


def test_it_maps_groups_at_every_sign_in_and_takes_back_what_the_provider_took_back(saml):
    sign_in(product_client(), "carol", "carol-pw")
    carol = User.objects.get(email="carol@example.com")
    by_hand = Group.objects.create(name="by-hand")
    carol.groups.add(by_hand)
    assert set(carol.groups.values_list("name", flat=True)) == {"research", "by-hand"}

    saml.users["carol"].groups = ["chat-admins"]
    sign_in(product_client(), "carol", "carol-pw")
    carol.refresh_from_db()
    assert set(carol.groups.values_list("name", flat=True)) == {"staff", "by-hand"}
    assert carol.is_staff

    saml.users["carol"].groups = []
    sign_in(product_client(), "carol", "carol-pw")
    carol.refresh_from_db()
    assert set(carol.groups.values_list("name", flat=True)) == {"by-hand"}
    assert not carol.is_staff


@pytest.fixture
def alice_at_example(alice):
    """alice, a local account, with the address the identity provider's mallory claims."""
    alice.email = "alice@example.com"
    alice.save()
    return alice


def test_it_refuses_to_join_a_local_account_by_an_untrusted_address_whatever_an_attribute_says(
    saml, alice_at_example
):
    client = product_client()
    response = sign_in(client, "mallory", "mallory-pw", provider_id="acme")
    assert response.status_code == 403
    assert b"has not verified the address" in response.content
    assert not SocialAccount.objects.exists()
    assert not client.get("/").wsgi_request.user.is_authenticated


def test_it_joins_a_local_account_by_a_trusted_providers_address(saml, alice_at_example):
    client = product_client()
    response = sign_in(client, "mallory", "mallory-pw", provider_id="trusted")
    assert response.status_code == 302
    assert SocialAccount.objects.get(provider="trusted").user == alice_at_example
    assert client.get("/").wsgi_request.user == alice_at_example
