"""deploy/nginx/chat.conf with this installation's values: the web processes' addresses,
the static folder, the upload limit and the stream timeout.

    python -m deploy.nginx LISTEN BACKEND... > /etc/nginx/conf.d/chat.conf
    (LISTEN: a port or address:port; BACKEND: host:port of each web process)

`main_config` wraps it in a complete nginx.conf for `make run TOPOLOGY=cluster`, which runs
nginx under supervisord with its files in RUN_DIR.
"""

import getpass
import os
import sys
from pathlib import Path

from django.conf import settings

TEMPLATE = Path(__file__).resolve().parent / "nginx" / "chat.conf"


def site(listen: str, backends: list[str]) -> str:
    # The longest answer, and a minute more for its last frames.
    stream_timeout = round(settings.CHAT_TOTAL_TIMEOUT) + 60
    max_body = settings.BULK_MAX_UPLOAD_BYTES
    # A process that refuses a connection is passed over for 2 s (it is restarting).
    servers = [f"    server {backend} max_fails=1 fail_timeout=2s;" for backend in backends]
    values = {
        "@UPSTREAM_SERVERS@": "\n".join(servers),
        "@LISTEN@": listen,
        "@MAX_BODY_BYTES@": str(max_body),
        "@MAX_BODY_TEXT@": f"{max_body / 2**20:g} MiB",
        "@STATIC_ROOT@": str(Path(settings.STATIC_ROOT).resolve()),
        "@STREAM_TIMEOUT@": str(stream_timeout),
    }
    text = TEMPLATE.read_text()
    for name, value in values.items():
        text = text.replace(name, value)
    return text


def main_config(run_dir: Path, listen: str, backends: list[str]) -> str:
    """A whole nginx.conf running the site in the foreground, every file it writes under `run_dir`."""
    temp = run_dir / "nginx"
    return f"""# Rendered by deploy/nginx.py for `make run TOPOLOGY=cluster`.
# Only meaningful when nginx starts as root; then its workers run as this user.
user {getpass.getuser()};
worker_processes 1;
pid {run_dir / "nginx.pid"};
error_log stderr warn;
events {{
    worker_connections 4096;
}}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;
    client_body_temp_path {temp / "body"};
    proxy_temp_path {temp / "proxy"};
    fastcgi_temp_path {temp / "fastcgi"};
    uwsgi_temp_path {temp / "uwsgi"};
    scgi_temp_path {temp / "scgi"};
    sendfile on;
{site(listen, backends)}}}
"""


if __name__ == "__main__":
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings")
    if len(sys.argv) < 3 or sys.argv[1] in {"-h", "--help"}:
        sys.exit(__doc__)
    django.setup()
    sys.stdout.write(site(sys.argv[1], sys.argv[2:]))
