import signal
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from inference.launcher import EngineConfig, EngineProcess, EngineStartError


class Command(BaseCommand):
    help = "Run the inference engine (vLLM's OpenAI-compatible server) until stopped."
    requires_system_checks = []

    def handle(self, *args, **options):
        config = EngineConfig.from_settings(settings)
        engine = EngineProcess(config, output=sys.stdout)

        def terminate(signum, frame):
            engine.stop()
            sys.exit(0)

        signal.signal(signal.SIGTERM, terminate)
        signal.signal(signal.SIGINT, terminate)
        self.stdout.write(f"Starting the engine: {' '.join(config.command())}")
        try:
            engine.start()
            engine.wait_healthy(settings.INFERENCE_STARTUP_TIMEOUT)
        except EngineStartError as exc:
            engine.stop()
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            self.style.SUCCESS(f"Engine ready at {config.url} serving {config.served_model_name}")
        )
        code = engine.process.wait()
        if code != 0:
            raise CommandError(f"The engine exited with status {code}")
