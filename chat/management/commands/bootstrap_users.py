import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

KEPT_HEADER = (
    "# The random passwords bootstrap_users gave the accounts it created (username password).\n"
    "# Change them with manage.py changepassword; this file is not updated when you do.\n"
)


class Command(BaseCommand):
    help = "Create the demo user and the staff user on first run, and print how to log in."

    def add_arguments(self, parser):
        parser.add_argument(
            "--keep-passwords",
            metavar="FILE",
            type=Path,
            help="also keep the random passwords given to new accounts in FILE, readable by its owner only "
            "(make run: DATA_DIR/initial-passwords)",
        )

    def handle(self, *args, keep_passwords: Path | None = None, **options):
        User = get_user_model()
        accounts = [
            (settings.DEMO_USERNAME, settings.DEMO_PASSWORD, False),
            (settings.STAFF_USERNAME, settings.STAFF_PASSWORD, True),
        ]
        kept = read_kept(keep_passwords) if keep_passwords else {}
        for username, configured, staff in accounts:
            # Unset (production mode's default): a random password, shown here once, and kept only
            # where --keep-passwords says.
            password = configured or secrets.token_urlsafe(16)
            created = not User.objects.filter(username=username).exists()
            if created:
                User.objects.create_user(username, password=password, is_staff=staff, is_superuser=staff)
                if keep_passwords and not configured:
                    kept[username] = password
                    write_kept(keep_passwords, kept)
                elif keep_passwords and kept.pop(username, None):
                    # Left from an earlier account of that name: wrong for this one.
                    write_kept(keep_passwords, kept)
            kind = "staff" if staff else "user"
            state = "created" if created else "exists; password unchanged"
            if username in kept:
                state += f"; {'kept' if created else 'the one it was created with is'} in {keep_passwords}"
            self.stdout.write(f"  {kind:5} {username} / {password if created else '(unchanged)'}  ({state})")


def read_kept(path: Path) -> dict[str, str]:
    """username → the password kept for it; empty when the file does not exist yet."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    return dict(line.split(" ", 1) for line in lines if line.strip() and not line.startswith("#"))


def write_kept(path: Path, kept: dict[str, str]) -> None:
    """Replace the file whole, created readable by its owner only, so no other user ever reads it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".new")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(KEPT_HEADER + "".join(f"{name} {password}\n" for name, password in kept.items()))
    temporary.replace(path)
