from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from enginehost.model import ModelPreparationError, prepare_default_model


class Command(BaseCommand):
    help = "Convert the packaged default model into a local checkpoint (once; idempotent)."

    def handle(self, *args, **options):
        target = Path(settings.INFERENCE_MODEL)
        default_target = Path(settings.DATA_DIR) / "models" / "SmolLM2-135M-Instruct"
        if target != default_target:
            self.stdout.write(f"INFERENCE_MODEL={target}: not the default model, nothing to prepare")
            return
        try:
            prepare_default_model(target, report=self.stdout.write)
        except ModelPreparationError as exc:
            raise CommandError(str(exc)) from exc
