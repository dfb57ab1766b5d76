"""Job tasks go to their own queue; only a worker of that queue recovers jobs when it starts."""

from types import SimpleNamespace

from chatsite.celery import app
from jobs import tasks


def test_it_routes_job_tasks_to_the_bulk_queue():
    for name in ("jobs.tasks.job_run", "jobs.tasks.jobs_recover"):
        assert app.amqp.router.route({}, name)["queue"].name == tasks.BULK_QUEUE
    assert app.amqp.router.route({}, "chat.tasks.sweep_stale_answers")["queue"].name == "celery"


def test_a_sweep_queued_under_its_name_before_the_rename_still_runs(monkeypatch):
    """The chat's package was frontend/ before: a sweep a broker holds under that name is found."""
    from chat import sweeper
    from chatsite import settings

    monkeypatch.setattr(sweeper, "messages_interrupt_stale", lambda: 3)
    app.loader.import_default_modules()
    assert settings.CELERY_BEAT_SCHEDULE["sweep-stale-answers"]["task"] in app.tasks
    assert app.tasks["frontend.tasks.sweep_stale_answers"].apply().get() == 3
    assert app.amqp.router.route({}, "frontend.tasks.sweep_stale_answers")["queue"].name == "celery"


def test_it_recovers_only_on_a_worker_that_consumes_the_bulk_queue(monkeypatch):
    sent = []
    monkeypatch.setattr(tasks.jobs_recover, "delay", lambda *args: sent.append(args))

    def worker(queues: set[str]):
        consumer = SimpleNamespace(consuming_from=lambda queue: queue in queues)
        return SimpleNamespace(task_consumer=consumer, hostname="bulk@host")

    tasks._on_worker_ready(sender=worker({"celery"}))
    assert sent == []
    tasks._on_worker_ready(sender=worker({"bulk"}))
    assert sent == [("bulk@host", tasks._boot["id"])]
