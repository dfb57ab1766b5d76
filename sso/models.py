"""What single sign-on gave and where it signed people in, so that it can take back only that.

A group membership or a staff flag that staff set by hand has no grant row: the next sign-in leaves
it alone. A sign-in row ties a session to the provider's session id (`sid`), so the provider's
back-channel logout finds the sessions it ends."""

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models


class GroupGrant(models.Model):
    """A membership that a provider's groups gave (sso.groups)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    group = models.ForeignKey(Group, on_delete=models.CASCADE, related_name="+")
    provider_id = models.CharField(max_length=40)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "group"], name="one_grant_per_membership")]

    def __str__(self) -> str:
        return f"{self.user} in {self.group} (from {self.provider_id})"


class StaffGrant(models.Model):
    """Staff status that membership of an SSO_STAFF_GROUPS group gave."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    provider_id = models.CharField(max_length=40)

    def __str__(self) -> str:
        return f"{self.user} is staff (from {self.provider_id})"


class SignIn(models.Model):
    """A session a provider signed in, with the provider's own session id where it sent one."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    provider_id = models.CharField(max_length=40)
    session_key = models.CharField(max_length=40, unique=True)
    sid = models.CharField(max_length=255, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.user} through {self.provider_id}"
