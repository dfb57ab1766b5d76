"""The product's settings under deploy/k8s's ConfigMap and Secret, the Secret's keys as the files a
web pod mounts: it refuses to start until the Secret's placeholders are replaced (a weak metrics
token too), and starts in production mode, passing `check --deploy`, once they are."""

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

from harness.processes import ROOT
from tests.topology.k8s import (
    INGRESS_PODS,
    as_mounted,
    config,
    secret,
)

PRODUCTION_CHECK = """
import json
import django
from django.conf import settings
from django.core.management import call_command

django.setup()
call_command("check", deploy=True, fail_level="WARNING")
print(json.dumps({
    "DEBUG": settings.DEBUG,
    "ALLOWED_HOSTS": settings.ALLOWED_HOSTS,
    "SECURE_PROXY_SSL_HEADER": getattr(settings, "SECURE_PROXY_SSL_HEADER", None),
    "TRUSTED_PROXIES": settings.TRUSTED_PROXIES,
    "SECRET_KEY": settings.SECRET_KEY,
    "REDIS_URL": settings.REDIS_URL,
}))
"""


def run_product(objects: list[dict], folder: Path, **overrides: str) -> subprocess.CompletedProcess:
    """The product's settings and `check --deploy` under the ConfigMap and the Secret alone, the
    Secret's keys as files, as a web pod has them (an override of one of them goes in its file)."""
    keys = set(secret(objects))
    files = as_mounted(objects, "web", "web", folder, **{k: v for k, v in overrides.items() if k in keys})
    env = {
        **config(objects),
        **files,
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "chatsite.settings",
        **{k: v for k, v in overrides.items() if k not in keys},
    }
    command = [sys.executable, "-c", PRODUCTION_CHECK]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_it_refuses_to_start_until_the_secret_key_and_the_trusted_proxies_are_replaced(objects, tmp_path):
    result = run_product(objects, tmp_path / "placeholders")
    assert result.returncode != 0
    assert "TRUSTED_PROXIES" in result.stderr or "SECRET_KEY must be set" in result.stderr
    result = run_product(objects, tmp_path / "proxies", TRUSTED_PROXIES=INGRESS_PODS)
    assert "SECRET_KEY must be set" in result.stderr
    metrics = secrets.token_urlsafe(32)
    result = run_product(
        objects, tmp_path / "key", SECRET_KEY=secrets.token_urlsafe(50), MONITORING_METRICS_TOKEN=metrics
    )
    assert "TRUSTED_PROXIES: 'REPLACE_ME' is not an address or a network" in result.stderr


def test_it_refuses_a_placeholder_or_short_metrics_token_in_production(objects, tmp_path):
    key = secrets.token_urlsafe(50)
    for number, token in enumerate(("REPLACE_ME", "short-token", "x" * 40)):
        result = run_product(
            objects,
            tmp_path / str(number),
            SECRET_KEY=key,
            MONITORING_METRICS_TOKEN=token,
            TRUSTED_PROXIES=INGRESS_PODS,
        )
        assert result.returncode != 0, token
        assert "MONITORING_METRICS_TOKEN" in result.stderr


def test_it_runs_in_production_mode_once_the_secret_is_filled_in(objects, tmp_path):
    key = secrets.token_urlsafe(50)
    result = run_product(
        objects,
        tmp_path,
        SECRET_KEY=key,
        MONITORING_METRICS_TOKEN=secrets.token_urlsafe(32),
        TRUSTED_PROXIES=INGRESS_PODS,
    )
    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout.splitlines()[-1])
    assert values["DEBUG"] is False
    assert values["ALLOWED_HOSTS"] and "*" not in values["ALLOWED_HOSTS"]
    # TLS ends at the ingress: without these Django sees plain HTTP and every client as the proxy.
    assert values["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert values["TRUSTED_PROXIES"]
    # From the mounted files: no secret is in the environment.
    assert (values["SECRET_KEY"], values["REDIS_URL"]) == (key, secret(objects)["REDIS_URL"])
