import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the demo user and the staff user on first run, and print how to log in."

    def handle(self, *args, **options):
        User = get_user_model()
        accounts = [
            (settings.DEMO_USERNAME, settings.DEMO_PASSWORD, False),
            (settings.STAFF_USERNAME, settings.STAFF_PASSWORD, True),
        ]
        for username, configured, staff in accounts:
            # Unset (production mode's default): a random password, shown here once, kept nowhere.
            password = configured or secrets.token_urlsafe(16)
            created = not User.objects.filter(username=username).exists()
            if created:
                User.objects.create_user(username, password=password, is_staff=staff, is_superuser=staff)
            kind = "staff" if staff else "user"
            state = "created" if created else "exists; password unchanged"
            self.stdout.write(f"  {kind:5} {username} / {password if created else '(unchanged)'}  ({state})")
