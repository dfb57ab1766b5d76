"""Who may log in as a user changed: their password, their active flag, or the user is gone.

These receivers tell it once (`login_changed`, inside the transaction that made the change), and
each app acts on it: the chat's sockets check their login again once it commits (chat.signals),
the user's API keys die with it (apitokens.signals). A password hash that Django upgrades at a login
(a new release's iterations) reads as a change too."""

from django.conf import settings
from django.db.models.signals import post_delete, post_save, pre_save
from django.dispatch import Signal, receiver

# Sent with `user_id` and `deleted` inside the transaction that made the change; `keys_kept=True`
# when only some of the user's sessions ended (an identity provider's logout, sso.backchannel), so
# the sockets check again and the API keys stay.
login_changed = Signal()


@receiver(pre_save, sender=settings.AUTH_USER_MODEL)
def remember_who_could_log_in(sender, instance, update_fields=None, **kwargs) -> None:
    # A save of other fields (a login's last_login) cannot change who may log in: no query.
    watched = ("password", "is_active")
    if instance.pk is None or (update_fields is not None and not set(watched) & set(update_fields)):
        instance._could_log_in = None
        return
    instance._could_log_in = sender.objects.filter(pk=instance.pk).values_list(*watched).first()


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
def tell_when_login_changes(sender, instance, created, **kwargs) -> None:
    before = getattr(instance, "_could_log_in", None)
    if before is not None and before != (instance.password, instance.is_active):
        login_changed.send(sender=sender, user_id=instance.pk, deleted=False)


@receiver(post_delete, sender=settings.AUTH_USER_MODEL)
def tell_when_a_user_is_deleted(sender, instance, **kwargs) -> None:
    login_changed.send(sender=sender, user_id=instance.pk, deleted=True)
