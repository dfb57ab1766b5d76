"""The load test's check (bench.load.check): each socket a restart cut and the page opened again is
counted with its refused tries (`busy` apart from handshakes that failed), apart from the answers and
the errors; a step in which no answer ended fails."""

import json

import pytest

from bench.load.check import check_answers

pytestmark = pytest.mark.django_db


def test_it_counts_each_reopened_sockets_refused_tries_apart_from_the_answers(tmp_path):
    busy, failed = [1.0, 2.5], [2.0, None, "ConnectionResetError()"]
    tries = {0: [], 1: [busy], 3: [failed, busy, busy]}
    records = [{"surface": "ws", "reconnect": n, "tries": tries[n]} for n in (0, 1, 1, 3)]
    records.append({"surface": "api", "user": "program-0", "text": "An answer.", "status": "complete"})
    (tmp_path / "answers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = check_answers(tmp_path, {})
    assert result["passed"] and result["answers"] == {"api complete": 1} and result["errors"] == {}
    assert result["reconnects"] == {
        "sockets": 4,
        "refused_total": 5,
        "refused_most": 3,
        "sockets_by_refusals": {"0": 1, "1": 2, "3": 1},
        "busy_most": 2,
        "failed_handshakes": {"ConnectionResetError()": 1},
    }


def test_a_step_in_which_no_answer_ended_fails(tmp_path):
    # locust did not run (not installed, or it crashed at start): no answers, no errors, no trouble.
    assert not check_answers(tmp_path, {"ws": ["user-0"]})["passed"]
