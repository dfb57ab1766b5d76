import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from enginehost.router import RouterConfig


class Command(BaseCommand):
    help = (
        "Run vLLM's router at INFERENCE_URL in front of the engine replicas (INFERENCE_REPLICAS), "
        "or in front of the engines given with --worker-urls."
    )
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--worker-urls", nargs="+", help="engines to route to (default: the replicas)")

    def handle(self, *args, worker_urls=None, **options):
        if not worker_urls and settings.INFERENCE_REPLICAS == 1:
            raise CommandError(
                "One engine serves at INFERENCE_URL itself: the router runs with INFERENCE_REPLICAS above 1 "
                "(or --worker-urls)"
            )
        config = RouterConfig.from_settings(settings, worker_urls)
        command = config.command()
        self.stdout.write(f"Starting the router: {' '.join(command)}")
        self.stdout.flush()
        # The router replaces this process, so the process manager signals the router itself.
        os.execvpe(command[0], command, config.environment())
