"""A ramp step's figures (bench.load.steps): from the samples taken around it, its locust
percentiles and py-spy's stacks, one row of the report."""

import csv
from pathlib import Path

from bench.load.steps import COUNTERS, Peaks, Profile, Sample, figures

MIB = 1 << 20


def sample(at: float, cpu: float, redis_usec: int, redis_calls: int, **counters: float) -> Sample:
    return Sample(at, cpu, 100 * MIB, redis_usec, redis_calls, {**dict.fromkeys(COUNTERS, 0.0), **counters})


def stats(path: Path) -> Path:
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, ["Type", "Name", "Request Count", "50%", "99%"])
        writer.writeheader()
        writer.writerow({"Type": "WS", "Name": "gap", "Request Count": 900, "50%": 21, "99%": 60})
        writer.writerow({"Type": "WS", "Name": "refused busy", "Request Count": 7, "50%": 0, "99%": 0})
        writer.writerow({"Type": "API", "Name": "refused busy", "Request Count": 3, "50%": 0, "99%": 0})
    return path


def test_it_turns_the_differences_around_a_step_into_rates_and_costs(tmp_path):
    before = sample(0, 10.0, 1_000, 100)
    after = sample(
        10,
        12.0,
        51_000,
        2_100,
        chat_generations_total=20,
        chat_completion_tokens_total=1_000,
        chat_streamed_tokens_total=800,
        chat_turn_store_seconds_sum=0.5,
    )
    peaks = Peaks("http://product", [1], "http://engine", rss_bytes=300 * MIB, sockets=1024)
    row = figures(100, before, after, peaks, 100 * MIB, stats(tmp_path / "stats.csv"), 25.0)
    assert {k: row[k] for k in ("answers_per_second", "tokens_per_second", "frames_per_second")} == {
        "answers_per_second": 2.0,
        "tokens_per_second": 100.0,
        "frames_per_second": 80.0,
    }
    assert (
        row["web_cpu_share"] == 0.2
        and row["web_cpu_ms_per_token"] == 2.0
        and row["web_cpu_ms_per_answer"] == 100.0
    )
    assert row["memory_kib_per_connection"] == 200.0
    assert row["redis_ms_per_second"] == 5.0 and row["redis_calls_per_token"] == 2.0
    assert row["database_ms_per_answer"] == 25.0
    assert row["busy_refusals"] == 10 and row["gap_ms"] == {
        "WS gap": {"count": 900, "p50": 21.0, "p99": 60.0}
    }


def test_it_reads_where_the_time_went_from_py_spys_stacks(tmp_path):
    raw = tmp_path / "profile.txt"
    raw.write_bytes(
        b"run (twisted/internet/asyncioreactor.py:257);follow (chat/streams.py:170) 3\n"
        b"run (twisted/internet/asyncioreactor.py:257) 1\n"
        b"\xfb garbage without a count\n"
    )
    top = Profile(0, 0, raw).top()
    assert top["self"] == [
        ("follow (chat/streams.py:170)", 75.0),
        ("run (twisted/internet/asyncioreactor.py:257)", 25.0),
    ]
    assert dict(top["inclusive"]) == {"twisted": 100.0, "chat": 75.0}
