"""deploy/nginx/chat.conf with this installation's values: the web processes' addresses,
the static folder, the upload limit and the stream timeout.

    python -m deploy.nginx LISTEN BACKEND... > /etc/nginx/conf.d/chat.conf
    (LISTEN: a port or address:port; BACKEND: host:port of each web process)

`write_main_config` wraps it in a complete nginx.conf for `make run TOPOLOGY=cluster`, which runs
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


# nginx's temporary folders, each kept under RUN_DIR/nginx.
TEMP_PATHS = {
    "body": "client_body_temp_path",
    "proxy": "proxy_temp_path",
    "fastcgi": "fastcgi_temp_path",
    "uwsgi": "uwsgi_temp_path",
    "scgi": "scgi_temp_path",
}


def write_main_config(run_dir: Path, listen: str, backends: list[str]) -> None:
    """RUN_DIR/nginx.conf: a whole nginx.conf running the site in the foreground, every file it
    writes under `run_dir` (its temporary folders made here)."""
    temp = run_dir / "nginx"
    for folder in TEMP_PATHS:
        (temp / folder).mkdir(parents=True, exist_ok=True)
    temp_paths = "".join(f"    {directive} {temp / folder};\n" for folder, directive in TEMP_PATHS.items())
    (run_dir / "nginx.conf").write_text(f"""# Rendered by deploy/nginx.py for `make run TOPOLOGY=cluster`.
# Only meaningful when nginx starts as root; then its workers run as this user.
user {getpass.getuser()};
worker_processes 1;
# Each WebSocket it proxies holds two connections (the client's and the web process's): 10,000
# chat pages need 20,000 and the files they are; 4096 connections held about 2,000 pages.
worker_rlimit_nofile 65536;
pid {run_dir / "nginx.pid"};
error_log stderr warn;
events {{
    worker_connections 32768;
}}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;
{temp_paths}    sendfile on;
{site(listen, backends)}}}
""")


if __name__ == "__main__":
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings")
    if len(sys.argv) < 3 or sys.argv[1] in {"-h", "--help"}:
        sys.exit(__doc__)
    django.setup()
    sys.stdout.write(site(sys.argv[1], sys.argv[2:]))
