from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.signals import user_logged_out
from django.dispatch import receiver

from frontend.consumers import session_group


@receiver(user_logged_out)
def close_sockets_on_logout(sender, request, user, **kwargs) -> None:
    """Close every WebSocket of the session that is logging out, in any web process."""
    session_key = request.session.session_key
    if session_key:
        async_to_sync(get_channel_layer().group_send)(session_group(session_key), {"type": "session.closed"})
