from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apitokens.models import Scope
from apitokens.services import KeyRefused, token_issue


class Command(BaseCommand):
    help = "Issue an API token for a user and print it (shown once; only its digest is stored)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--scope",
            action="append",
            choices=Scope.values,
            help="repeat for several; default: chat and store.read",
        )
        parser.add_argument("--name", default="")

    def handle(self, *args, username, scope, name, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        scopes = scope or [Scope.CHAT, Scope.STORE_READ]
        try:
            token, plain = token_issue(user=user, scopes=scopes, name=name)
        except KeyRefused as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(f"Token {token.prefix} for {username}, scopes {', '.join(token.scopes)}:")
        self.stdout.write(plain)
