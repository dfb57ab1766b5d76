"""Who reads a collection: its owner, members of the groups it is shared with, everyone when open;
only staff, or a user given the permission, share beyond the owner."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission

from httpkit.errors import Refusal
from knowledge import selectors, services
from knowledge.models import Collection

pytestmark = pytest.mark.django_db


@pytest.fixture
def people():
    make = get_user_model().objects.create_user
    return {
        "owner": make("owner", password="pw-owner-123"),
        "member": make("member", password="pw-member-123"),
        "stranger": make("stranger", password="pw-stranger-1"),
        "staff": make("staffer", password="pw-staffer-12", is_staff=True),
    }


def test_a_private_collection_is_its_owners_alone(people):
    mine = services.collection_create(owner=people["owner"], name="Handbook")
    assert list(selectors.collections_readable(people["owner"])) == [mine]
    assert not selectors.collections_readable(people["stranger"]).exists()
    assert selectors.collection_ids_readable(people["stranger"], [mine.pk]) == []


def test_groups_and_the_site_read_what_staff_shared_with_them(people):
    team = Group.objects.create(name="team")
    people["member"].groups.add(team)
    shared = services.collection_create(
        owner=people["staff"], name="Team", visibility="groups", groups=[team]
    )
    site = services.collection_create(owner=people["staff"], name="Site", visibility="site")
    assert set(selectors.collections_readable(people["member"])) == {shared, site}
    assert set(selectors.collections_readable(people["stranger"])) == {site}
    assert selectors.collection_ids_readable(people["stranger"], [shared.pk, site.pk]) == [site.pk]
    # Taken back to private: the group reads it no more.
    services.collection_share(collection=shared, by=people["staff"], visibility="private")
    assert set(selectors.collections_readable(people["member"])) == {site}


def test_only_staff_share_a_collection_beyond_its_owner(people):
    mine = services.collection_create(owner=people["owner"], name="Mine")
    with pytest.raises(Refusal) as refused:
        services.collection_share(collection=mine, by=people["owner"], visibility="site")
    assert refused.value.code == "forbidden"
    with pytest.raises(Refusal):
        services.collection_create(owner=people["owner"], name="Open", visibility="site")
    assert Collection.objects.get(pk=mine.pk).visibility == "private"


def test_a_user_an_admin_let_share_shares_their_collection(people):
    mine = services.collection_create(owner=people["owner"], name="Mine")
    people["owner"].user_permissions.add(Permission.objects.get(codename="share_collection_site"))
    owner = get_user_model().objects.get(pk=people["owner"].pk)  # permissions are cached per object
    services.collection_share(collection=mine, by=owner, visibility="site")
    assert set(selectors.collections_readable(people["stranger"])) == {mine}


def test_it_refuses_a_bad_name_or_visibility(people):
    for name in ("", "  ", "x" * 201):
        with pytest.raises(Refusal) as refused:
            services.collection_create(owner=people["owner"], name=name)
        assert refused.value.code == "invalid_field"
    with pytest.raises(Refusal):
        services.collection_create(owner=people["owner"], name="ok", visibility="world")
