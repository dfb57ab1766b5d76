"""The test OpenID provider's process: `python -m tests.support.oidc_provider.serve PORT`, with the
environment harness.OidcProvider gives it. It migrates its own database, registers the product as a
confidential client (RS256 ID tokens, the authorization code grant, no consent screen) and serves
until it is stopped."""

import os
import sys

import django


def main(port: int) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.support.oidc_provider.settings"
    django.setup()
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    Application.objects.update_or_create(
        client_id=os.environ["OIDC_TEST_CLIENT_ID"],
        defaults={
            "name": "chat",
            "client_secret": os.environ["OIDC_TEST_CLIENT_SECRET"],
            "client_type": Application.CLIENT_CONFIDENTIAL,
            "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
            "redirect_uris": os.environ["OIDC_TEST_REDIRECT_URIS"],
            "algorithm": Application.RS256_ALGORITHM,
            "skip_authorization": True,
        },
    )
    call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, use_threading=True, skip_checks=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
