"""A provider's groups, mapped to Django groups on every sign-in.

The map is configuration (SSO_GROUP_MAP, or a provider's own): provider group name -> Django group
name. On each sign-in the user joins every mapped group their provider groups name and leaves the
mapped groups it no longer names, but only memberships a sign-in gave (GroupGrant): a group staff
gave by hand stays. Membership of a group in SSO_STAFF_GROUPS makes the user staff; staff status a
sign-in gave (StaffGrant) goes with the last such group. Rights follow the Django groups through
what already reads them: the models a group may use (inference.models.ModelAccess), the group's
daily token quota (usage.models.DailyQuota), the group's admin permissions, and staff status (bulk
jobs and their API scope)."""

from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, Group
from django.db import transaction

from sso.models import GroupGrant, StaffGrant


def mapped_groups(provider_id: str, groups: Iterable[str]) -> set[str]:
    """The Django group names a provider's group names map to (unmapped names are ignored)."""
    mapping = provider_group_map(provider_id)
    return {mapping[name] for name in groups if name in mapping}


def provider_group_map(provider_id: str) -> dict[str, str]:
    """The provider's map of group names: its own, else SSO_GROUP_MAP."""
    provider = settings.SSO_PROVIDERS.get(provider_id, {})
    return provider.get("group_map", settings.SSO_GROUP_MAP)


@transaction.atomic
def apply_provider_groups(user: AbstractBaseUser, provider_id: str, groups: list[str]) -> None:
    """Make the user's SSO-given memberships and staff status what `groups` (the names the
    provider sent at this sign-in) map to; memberships and staff status given by hand stay."""
    wanted = {
        Group.objects.get_or_create(name=name)[0] for name in sorted(mapped_groups(provider_id, groups))
    }
    granted = {grant.group: grant for grant in GroupGrant.objects.filter(user=user).select_related("group")}
    held = set(user.groups.all())
    for group in wanted - held:
        user.groups.add(group)
        GroupGrant.objects.create(user=user, group=group, provider_id=provider_id)
    for group, grant in granted.items():
        if group not in wanted:
            user.groups.remove(group)
            grant.delete()
    _apply_staff(user, provider_id)


def _apply_staff(user: AbstractBaseUser, provider_id: str) -> None:
    staff_groups = set(settings.SSO_STAFF_GROUPS)
    in_staff_group = bool(staff_groups) and user.groups.filter(name__in=staff_groups).exists()
    grant = StaffGrant.objects.filter(user=user).first()
    if in_staff_group and not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
        StaffGrant.objects.create(user=user, provider_id=provider_id)
    elif not in_staff_group and grant is not None:
        grant.delete()
        if user.is_staff:
            user.is_staff = False
            user.save(update_fields=["is_staff"])
