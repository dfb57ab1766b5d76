from django.core.management.base import BaseCommand, CommandError

from apitokens.services import token_revoke


class Command(BaseCommand):
    help = "Revoke an API token by its prefix (the part after 'chat_')."

    def add_arguments(self, parser):
        parser.add_argument("prefix")

    def handle(self, *args, prefix, **options):
        if not token_revoke(prefix=prefix):
            raise CommandError(f"no active token with prefix {prefix!r}")
        self.stdout.write(f"Revoked {prefix}")
