"""Sockets follow their login: logout closes them, and a change to who may log in makes
them check again (chat.socket_auth)."""

from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.db import transaction
from django.dispatch import receiver

from accounts.signals import login_changed
from chat import socket_auth


@receiver(user_logged_in)
def give_the_login_a_socket_group(sender, request, user, **kwargs) -> None:
    if request is not None:
        socket_auth.mark_login(request.session)


@receiver(user_logged_out)
def close_sockets_on_logout(sender, request, user, **kwargs) -> None:
    """Close every WebSocket of the browser that is logging out, in any web process."""
    if request is not None:
        socket_auth.send(socket_auth.login_group(request.session), socket_auth.CLOSE)


@receiver(login_changed)
def recheck_sockets_when_login_changes(sender, user_id: int, deleted: bool, **kwargs) -> None:
    group = socket_auth.user_group(user_id)
    transaction.on_commit(lambda: socket_auth.send(group, socket_auth.RECHECK))
