"""Start-up checks on the bulk settings."""

from jobs.checks import check_bulk_settings


def test_it_accepts_the_defaults():
    assert check_bulk_settings(None) == []


def test_it_refuses_time_limits_that_reach_the_visibility_timeout(settings):
    settings.BULK_TASK_TIME_LIMIT = 4000
    assert [e.id for e in check_bulk_settings(None)] == ["jobs.E001"]


def test_it_refuses_contradictory_concurrency_and_summary_bounds(settings):
    settings.BULK_CONCURRENCY_MIN = 9
    settings.BULK_MAX_SUMMARY_TOKENS = 1500
    assert [e.id for e in check_bulk_settings(None)] == ["jobs.E002", "jobs.E003"]


def test_it_refuses_a_floor_above_the_batch_ceiling(settings):
    settings.BATCH_CONCURRENCY = 4
    settings.BULK_CONCURRENCY_MIN = 6
    settings.BULK_CONCURRENCY = 8
    assert [e.id for e in check_bulk_settings(None)] == ["jobs.E004"]
