"""`make run`'s data is its owner's alone: the data folder 0700 and what is made in it 0600 (umask
077 for every process), and the bundled Redis asks for a password kept in a 0600 file and has no
CONFIG command. Checked as another local user would try it, where the suite runs as root."""

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import redis

from deploy.supervisor import Topology, render
from harness.processes import ROOT, free_port, redis_serving


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def as_nobody(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", "nobody", "--", *command], capture_output=True, text=True, timeout=30
    )


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("runuser") is None, reason="trying as another user needs root"
)


def test_make_makes_the_data_folder_private_also_on_an_install_made_before(tmp_path):
    data = tmp_path / "var"
    (data / "redis").mkdir(parents=True)
    (data / "db.sqlite3").write_text("rows")
    data.chmod(0o755)
    (data / "db.sqlite3").chmod(0o644)
    subprocess.run(["make", "--no-print-directory", "private-data", f"DATA_DIR={data}"], cwd=ROOT, check=True)
    assert mode(data) == 0o700
    assert mode(data / "db.sqlite3") == 0o600
    assert mode(data / "redis") == 0o700


def test_every_process_supervisord_starts_makes_its_files_private(tmp_path):
    conf = render(tmp_path, Topology(["web", "worker", "redis"]))
    assert "\numask=077\n" in conf.split("[unix_http_server]")[0]


def settings_of(data: Path, **environment: str) -> str:
    """REDIS_URL as the product's settings read it in a fresh process with nothing configured."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    code = "import chatsite.settings as s; print(s.REDIS_URL)"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "DATA_DIR": str(data), **environment},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def test_without_redis_url_every_process_gets_the_one_password_from_a_private_file(tmp_path):
    data = tmp_path / "var"
    first, second = settings_of(data), settings_of(data)
    password = (data / "redis-password").read_text().strip()
    assert len(password) >= 32
    assert first == second == f"redis://:{password}@127.0.0.1:6380/0"
    assert mode(data / "redis-password") == 0o600 and mode(data) == 0o700


@needs_root
def test_the_bundled_redis_refuses_a_client_without_its_password_and_has_no_config_command(tmp_path):
    data = tmp_path / "var"
    data.mkdir(mode=0o700)
    port = free_port()
    url = f"redis://:the-password-{port}@127.0.0.1:{port}/0"
    environment = {"DATA_DIR": str(data), "REDIS_URL": url}
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    try:
        with redis_serving(url, bundled=True):
            with redis.Redis(port=port) as anonymous, pytest.raises(redis.AuthenticationError):
                anonymous.get("chat:stream:1")
            with redis.Redis.from_url(url) as client:
                client.set("k", "v")
                with pytest.raises(redis.ResponseError, match="unknown command"):
                    client.config_get("requirepass")
            # Another local user, as the review tried it: no password to read, no data, no stream.
            refused = as_nobody("cat", str(data / f"redis-{port}" / "redis.conf"))
            assert refused.returncode != 0 and "the-password" not in refused.stdout
            assert as_nobody("ls", str(data)).returncode != 0
            conf = data / f"redis-{port}" / "redis.conf"
            assert mode(conf) == 0o600 and mode(data / f"redis-{port}") == 0o700
            made = [path for path in (data / f"redis-{port}").rglob("*") if path.is_file()]
            assert made and all(mode(path) & 0o077 == 0 for path in made), [(p, oct(mode(p))) for p in made]
            ping = f'exec 3<>/dev/tcp/127.0.0.1/{port}; printf "PING\\r\\n" >&3; head -c 7 <&3'
            assert as_nobody("bash", "-c", ping).stdout.startswith("-NOAUTH")
            # Nor in any process's command line, which every local user reads.
            assert not [
                p.pid
                for p in psutil.process_iter(["cmdline"])
                if f"the-password-{port}" in " ".join(p.info["cmdline"] or ())
            ]
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert not (data / f"redis-{port}").exists(), "a bundled Redis of the suite's leaves its data behind"


def test_the_bundled_redis_is_not_started_without_a_password(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "runredis"],
        cwd=ROOT,
        env={**os.environ, "DATA_DIR": str(tmp_path), "REDIS_URL": "redis://127.0.0.1:6399/0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "needs a password" in result.stderr
