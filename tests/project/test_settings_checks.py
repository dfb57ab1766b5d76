"""Rules across several settings are system checks: a bad combination stops `manage.py check`
(and `migrate`, which `make run` runs first) with the rule's id."""

import os
import subprocess
import sys

from chatsite.checks import check_answer_timing
from tests.project.test_rooms import ROOT


def test_it_accepts_the_defaults():
    assert check_answer_timing(None) == []


def test_it_refuses_a_takeover_sooner_than_two_heartbeats(settings):
    settings.CHAT_HEARTBEAT_SECONDS = 4.0
    settings.CHAT_TAKEOVER_AFTER_SECONDS = 6.0
    assert [e.id for e in check_answer_timing(None)] == ["chatsite.E001"]


def test_it_refuses_a_stream_that_expires_before_the_longest_answer_ends(settings):
    settings.CHAT_TOTAL_TIMEOUT = 600.0
    settings.CHAT_STREAM_TTL_SECONDS = 600
    assert [e.id for e in check_answer_timing(None)] == ["chatsite.E002"]


def test_it_stops_manage_py_check_on_a_bad_combination():
    env = {**os.environ, "DEBUG": "true", "CHAT_STREAM_TTL_SECONDS": "60", "CHAT_TOTAL_TIMEOUT": "120"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "chatsite.E002" in result.stderr
