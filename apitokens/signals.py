"""A user's API keys die with the login they were made under: a new password, or an account that may
no longer log in, revokes every key (docs/security.md)."""

from django.dispatch import receiver

from accounts.signals import login_changed
from apitokens.services import tokens_revoke_all


@receiver(login_changed)
def revoke_keys_when_login_changes(
    sender, user_id: int, deleted: bool, keys_kept: bool = False, **kwargs
) -> None:
    # A deleted user's keys go with the row; a provider's logout of some sessions keeps them.
    if not deleted and not keys_kept:
        tokens_revoke_all(user_id=user_id)
