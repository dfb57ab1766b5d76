"""The test OpenID provider's Django settings: django-oauth-toolkit with OpenID Connect, RSA-signed
ID tokens, PKCE required, its users and their claims read from the JSON file OIDC_TEST_USERS names
(users.py), a SQLite database in its own folder. Every value comes from the harness's environment."""

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATE = Path(os.environ["OIDC_TEST_STATE"])

DEBUG = False
SECRET_KEY = os.environ["OIDC_TEST_SECRET_KEY"]
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.support.oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [HERE / "templates"],
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(STATE / "provider.sqlite3")}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
AUTHENTICATION_BACKENDS = ["tests.support.oidc_provider.users.FileBackend"]
LOGIN_URL = "/login/"
SESSION_COOKIE_NAME = "provider_session"
CSRF_COOKIE_NAME = "provider_csrftoken"
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": (STATE / "signing-key.pem").read_text(),
    "OIDC_ISS_ENDPOINT": os.environ["OIDC_TEST_ISSUER"],
    "PKCE_REQUIRED": True,
    "OAUTH2_VALIDATOR_CLASS": "tests.support.oidc_provider.users.Validator",
    "SCOPES": {"openid": "OpenID Connect", "profile": "Profile", "email": "E-mail"},
    "ACCESS_TOKEN_EXPIRE_SECONDS": 300,
    "ID_TOKEN_EXPIRE_SECONDS": int(os.environ.get("OIDC_TEST_ID_TOKEN_SECONDS", "300")),
}
LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
