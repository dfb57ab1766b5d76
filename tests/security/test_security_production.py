"""Production mode (DEBUG off): it refuses to start half-configured, passes `check --deploy`,
sends TLS-only cookies, and refuses foreign-Origin WebSockets like the default configuration."""

import os
import re
import subprocess
import sys
from http.cookies import SimpleCookie

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from websockets.exceptions import InvalidStatus

from chatsite.env import env_file
from harness.processes import ROOT
from tests.support.chat_client import open_chat, receive, send
from tests.support.product import running_daphne

PRODUCTION_KEY = "k3y-for-tests-only-" + "x7Qp2Lm9Zr4Vt8Nw1Bc6Hj5Fd0Sg3Ka" * 2
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": PRODUCTION_KEY,
    "ALLOWED_HOSTS": "chat.example.com",
    "MONITORING_METRICS_TOKEN": "metrics-token-for-tests-" + "q8Wz3Rt6Yu1Io4Pa",
}
# Cleared for the subprocess.
SETTINGS_VARIABLES = (
    "DEBUG",
    "SECRET_KEY",
    "ALLOWED_HOSTS",
    "SECURE_SSL_REDIRECT",
    "SECURE_COOKIES",
    "MONITORING_METRICS_TOKEN",
    "SECRET_KEY_FILE",
)


def manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in SETTINGS_VARIABLES}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_reports_nothing_on_check_deploy_with_the_production_environment():
    result = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_it_warns_on_check_deploy_in_the_development_configuration():
    # The contrast that shows the check is real: development mode (DEBUG on) is not deployable.
    result = manage("check", "--deploy", "--fail-level", "WARNING", DEBUG="true")
    assert result.returncode != 0
    assert "security.W018" in result.stderr  # DEBUG on


def test_it_is_production_mode_unless_told_otherwise():
    # Nothing set: production mode, which refuses to start without a real key and host list.
    result = manage("check")
    assert result.returncode != 0
    assert "DEBUG is off, so SECRET_KEY must be set" in result.stderr
    assert "DEBUG=true for development" in result.stderr
    assert manage("check", DEBUG="true").returncode == 0


def test_it_warns_a_production_deployment_without_a_metrics_token():
    result = manage(
        "check", "--deploy", "--fail-level", "WARNING", **{**PRODUCTION, "MONITORING_METRICS_TOKEN": ""}
    )
    assert result.returncode != 0 and "monitoring.W001" in result.stderr


@pytest.mark.parametrize(
    "missing, message",
    [
        ({"SECRET_KEY": None}, "SECRET_KEY must be set to a random value"),
        ({"SECRET_KEY": "short-secret"}, "SECRET_KEY must be set to a random value"),
        (
            {"SECRET_KEY": None, "SECRET_KEY_FILE": "/no/such/key"},
            "SECRET_KEY_FILE='/no/such/key': cannot read",
        ),
        ({"ALLOWED_HOSTS": None}, "ALLOWED_HOSTS must name the host names"),
        ({"ALLOWED_HOSTS": " , "}, "ALLOWED_HOSTS must name the host names"),
        (
            {"SESSION_COOKIE_SAMESITE": "None"},
            "SESSION_COOKIE_SAMESITE='None': expected one of ['Lax', 'Strict']",
        ),
    ],
)
def test_it_refuses_to_start_half_configured(tmp_path, missing, message):
    data_dir = tmp_path / "data"
    env = {**PRODUCTION, "DATA_DIR": str(data_dir), **missing}
    result = manage("check", **{k: v for k, v in env.items() if v is not None})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr
    # Refused while the settings load: nothing was created.
    assert not data_dir.exists()


def test_it_reads_the_secret_key_from_the_file_secret_key_file_names(tmp_path):
    # As `make run` keeps it: a file under the data folder, readable by its owner only.
    key_file = tmp_path / "secret-key"
    key_file.write_text(PRODUCTION_KEY + "\n")
    key_file.chmod(0o600)
    from_file = {**PRODUCTION, "SECRET_KEY": None, "SECRET_KEY_FILE": str(key_file)}
    show_key = ("shell", "--no-imports", "-c", "from django.conf import settings; print(settings.SECRET_KEY)")
    result = manage(*show_key, **{k: v for k, v in from_file.items() if v is not None})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == PRODUCTION_KEY
    # SECRET_KEY itself, when also given, is the one used.
    other = "another-key-for-tests-" + "Zq3Wm8Xr1Tn6Yb4Kv9Pd2Hs7" * 2
    result = manage(*show_key, **{**PRODUCTION, "SECRET_KEY": other, "SECRET_KEY_FILE": str(key_file)})
    assert result.stdout.strip() == other


@pytest.mark.parametrize("content", [None, "", "\n  \n"], ids=["missing", "empty", "blank"])
def test_it_stops_on_a_secret_key_file_it_cannot_use(tmp_path, monkeypatch, content):
    key_file = tmp_path / "secret-key"
    if content is not None:
        key_file.write_text(content)
    monkeypatch.setenv("SECRET_KEY_FILE", str(key_file))
    reason = "cannot read it (No such file or directory)" if content is None else "the file is empty"
    with pytest.raises(ImproperlyConfigured, match=re.escape(f"SECRET_KEY_FILE={str(key_file)!r}: {reason}")):
        env_file("SECRET_KEY_FILE")
    monkeypatch.setenv("SECRET_KEY_FILE", str(tmp_path))
    with pytest.raises(ImproperlyConfigured, match=re.escape("cannot read it (Is a directory)")):
        env_file("SECRET_KEY_FILE")
    monkeypatch.delenv("SECRET_KEY_FILE")
    assert env_file("SECRET_KEY_FILE") == ""


@pytest.fixture
def production_daphne(django_db_setup):
    env = {**PRODUCTION, "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "false"}
    env["SECURE_PROXY_SSL_HEADER"] = "X-Forwarded-Proto"
    # No engine: nothing here generates an answer.
    with running_daphne("http://127.0.0.1:9", **env) as server:
        yield server.url


@pytest.mark.django_db(transaction=True)
def test_it_refuses_a_foreign_origin_websocket_in_production_mode(production_daphne, settings):
    # The session is signed with the production server's key, so it is valid there.
    settings.SECRET_KEY = PRODUCTION_KEY
    user = get_user_model().objects.create_user("prod-alice", password="pw-prod-alice-1")
    ws_url = production_daphne.replace("http://", "ws://") + "/ws/chat/"
    with pytest.raises(InvalidStatus) as refused:
        open_chat(ws_url, "http://evil.example", user)
    assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as refused:
        open_chat(ws_url, "https://127.0.0.1.evil.example", user)
    assert refused.value.response.status_code == 403
    # The same cookie from the site's own origin is accepted: the Origin alone made the difference.
    with open_chat(ws_url, production_daphne, user) as ws:
        send(ws, {"type": "chat.stop", "message": 999999999})
        assert receive(ws, timeout=10)["code"] == "not_found"


@pytest.mark.django_db(transaction=True)
def test_it_sends_secure_httponly_samesite_cookies_behind_tls(production_daphne):
    get_user_model().objects.create_user("prod-bob", password="pw-prod-bob-12")
    https = {"X-Forwarded-Proto": "https"}
    with httpx.Client(base_url=production_daphne, headers=https) as client:
        form = client.get("/accounts/login/")
        assert form.status_code == 200
        hsts = form.headers["Strict-Transport-Security"]
        assert "max-age=31536000" in hsts and "includeSubDomains" in hsts and "preload" in hsts
        csrf = SimpleCookie(form.headers["Set-Cookie"])["csrftoken"]
        assert csrf["secure"] and csrf["samesite"] == "Lax"
        token = csrf.value
        login = client.post(
            "/accounts/login/",
            data={"username": "prod-bob", "password": "pw-prod-bob-12", "csrfmiddlewaretoken": token},
            headers={
                "Origin": production_daphne.replace("http://", "https://"),
                "Cookie": f"csrftoken={token}",
            },
        )
        assert login.status_code == 302, login.text[:500]
        cookies = SimpleCookie()
        for header in login.headers.get_list("Set-Cookie"):
            cookies.load(header)
        session = cookies["sessionid"]
        assert session["secure"] and session["httponly"] and session["samesite"] == "Lax"


def test_it_refuses_a_well_known_password_in_production_mode():
    result = manage("check", "--deploy", **PRODUCTION, STAFF_PASSWORD="admin-password")
    assert result.returncode != 0
    assert "accounts.E001" in result.stderr and "STAFF_PASSWORD" in result.stderr


@pytest.mark.django_db
def test_it_gives_the_first_start_accounts_random_passwords_in_production_mode(settings):
    from io import StringIO

    from django.core.checks import run_checks
    from django.core.management import call_command

    settings.DEBUG = False
    settings.DEMO_PASSWORD = settings.STAFF_PASSWORD = ""  # as unset with DEBUG off
    out = StringIO()
    call_command("bootstrap_users", stdout=out)
    for username in (settings.DEMO_USERNAME, settings.STAFF_USERNAME):
        user = get_user_model().objects.get(username=username)
        shown = out.getvalue().split(f" {username} / ")[1].split()[0]
        assert len(shown) >= 16 and user.check_password(shown)
        assert not any(user.check_password(p) for p in settings.DEFAULT_PASSWORDS)
    assert not [e for e in run_checks(databases=["default"]) if e.id.startswith("accounts.")]

    # An account left with a well-known password (made in development) stops a production start.
    staff = get_user_model().objects.get(username=settings.STAFF_USERNAME)
    staff.set_password("admin-password")
    staff.save()
    assert [e.id for e in run_checks(databases=["default"]) if e.id.startswith("accounts.")] == [
        "accounts.E002"
    ]
