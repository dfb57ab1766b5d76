import signal
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from enginehost.embedlaunch import EmbeddingConfig
from enginehost.launcher import EngineStartError
from enginehost.supervisor import EngineSupervisor


def _stop(signum, frame):
    # Unwinds EngineSupervisor.run, which stops the server on its way out (as runinference does).
    raise SystemExit(0)


class Command(BaseCommand):
    help = (
        "Run the embedding engine (EMBEDDING_RUNNER: the product's transformers server, or vLLM's "
        "pooling runner) until stopped, starting it again whenever it dies."
    )
    requires_system_checks = []

    def handle(self, *args, **options):
        config = EmbeddingConfig.from_settings(settings)
        supervisor = EngineSupervisor(
            config, startup_timeout=settings.INFERENCE_STARTUP_TIMEOUT, log=self._log, output=sys.stdout
        )
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        self.stdout.write(f"Starting the embedding engine: {' '.join(config.command())}")
        try:
            supervisor.run()
        except EngineStartError as exc:
            raise CommandError(str(exc)) from exc

    def _log(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()
