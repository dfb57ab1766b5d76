from django.apps import AppConfig


class BatchesConfig(AppConfig):
    name = "batches"
    verbose_name = "OpenAI batches"

    def ready(self) -> None:
        from django.conf import settings

        from batches import lines, services
        from jobs import kinds

        # A batch's lines run as a bulk job's documents (jobs.runner), up to BATCH_CONCURRENCY in
        # flight while chat is quiet, and its files are written when the job ends.
        kinds.KINDS["batch"] = kinds.Kind(
            admit=lines.lines_admitted,
            lines=lines.line_runner,
            ended=services.batch_finalize,
            concurrency=lambda: settings.BATCH_CONCURRENCY,
        )
