"""Sockets follow their login: logout closes them, and a change to who may log in makes
them check again (frontend.socket_auth)."""

from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save, pre_save
from django.dispatch import receiver

from frontend import socket_auth


@receiver(user_logged_in)
def give_the_login_a_socket_group(sender, request, user, **kwargs) -> None:
    if request is not None:
        socket_auth.mark_login(request.session)


@receiver(user_logged_out)
def close_sockets_on_logout(sender, request, user, **kwargs) -> None:
    """Close every WebSocket of the browser that is logging out, in any web process."""
    if request is not None:
        socket_auth.send(socket_auth.login_group(request.session), socket_auth.CLOSE)


@receiver(pre_save, sender=settings.AUTH_USER_MODEL)
def remember_who_could_log_in(sender, instance, update_fields=None, **kwargs) -> None:
    # A save of other fields (a login's last_login) cannot change who may log in: no query.
    watched = ("password", "is_active")
    if instance.pk is None or (update_fields is not None and not set(watched) & set(update_fields)):
        instance._could_log_in = None
        return
    instance._could_log_in = sender.objects.filter(pk=instance.pk).values_list(*watched).first()


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
def recheck_sockets_when_login_changes(sender, instance, created, **kwargs) -> None:
    before = getattr(instance, "_could_log_in", None)
    if before is not None and before != (instance.password, instance.is_active):
        group = socket_auth.user_group(instance.pk)
        transaction.on_commit(lambda: socket_auth.send(group, socket_auth.RECHECK))


@receiver(post_delete, sender=settings.AUTH_USER_MODEL)
def recheck_sockets_of_a_deleted_user(sender, instance, **kwargs) -> None:
    group = socket_auth.user_group(instance.pk)
    transaction.on_commit(lambda: socket_auth.send(group, socket_auth.RECHECK))
