import functools
import signal
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from enginehost import state
from enginehost.launcher import EngineConfig, EngineStartError
from enginehost.supervisor import EngineSupervisor


def _stop(signum, frame):
    # Unwinds EngineSupervisor.run, which stops the engine on its way out. Stopping it from
    # here instead would wait on the server while the interrupted code holds its wait lock.
    raise SystemExit(0)


class Command(BaseCommand):
    help = (
        "Run the inference engine (vLLM's OpenAI-compatible server) until stopped, "
        "starting it again whenever it dies."
    )
    requires_system_checks = []

    def handle(self, *args, **options):
        config = EngineConfig.from_settings(settings)
        supervisor = EngineSupervisor(
            config,
            startup_timeout=settings.INFERENCE_STARTUP_TIMEOUT,
            log=self._log,
            output=sys.stdout,
            on_state=functools.partial(state.publish, url=config.url),
        )
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        self.stdout.write(f"Starting the engine: {' '.join(config.command())}")
        try:
            supervisor.run()
        except EngineStartError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            state.publish("stopped", "its supervisor stopped", url=config.url)

    def _log(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()
