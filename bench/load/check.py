"""The run's own check: every answer a user saw end is stored with the text that was streamed, and
nothing failed but `busy` refusals (which the locustfile counts apart and never records as errors)."""

import csv
import json
import time
from collections import Counter
from pathlib import Path

from conversations.models import Message

SETTLE_SECONDS = 15


def _stored(ids: list[int]) -> dict[int, Message]:
    """The answers' rows, once none of them says `generating` any more (or after SETTLE_SECONDS)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        rows = {m.pk: m for m in Message.objects.filter(pk__in=ids)}
        if time.monotonic() > deadline or all(m.status != Message.Status.GENERATING for m in rows.values()):
            return rows
        time.sleep(1)


def locust_trouble(out: Path) -> dict[str, int]:
    """Failed requests and exceptions raised in the users' tasks, as locust counted them."""
    trouble: Counter = Counter()
    for name, column in (("failures", "Occurrences"), ("exceptions", "Count")):
        path = out / f"locust_{name}.csv"
        if path.exists():
            for row in csv.DictReader(path.open()):
                trouble[name] += int(row[column])
    return dict(trouble)


def check_answers(out: Path, usernames: dict[str, list[str]]) -> dict:
    answers = out / "answers.jsonl"
    trouble = locust_trouble(out)
    records = [json.loads(line) for line in answers.read_text().splitlines()] if answers.exists() else []
    # A socket lost while idle (a web process restarted) and opened again: its tries refused.
    reconnects = [r["reconnect"] for r in records if "reconnect" in r]
    # Of those tries, the refusals proper (`busy`, a retry slot told) and the handshakes that failed.
    busy = [sum(1 for t in r.get("tries", ()) if t[1] is not None) for r in records if "reconnect" in r]
    failed = Counter(t[2] for r in records for t in r.get("tries", ()) if t[1] is None and len(t) > 2)
    records = [r for r in records if "reconnect" not in r]
    errors = [r for r in records if "error" in r]
    chat = [r for r in records if "error" not in r and r["surface"] in ("ws", "sse")]
    api = [r for r in records if "error" not in r and r["surface"] == "api"]
    mismatches = []
    stored = _stored([r["message"] for r in chat])
    for r in chat:
        row = stored.get(r["message"])
        if row is None or row.content != r["text"] or row.status != r["status"]:
            mismatches.append(
                {**r, "stored": None if row is None else {"status": row.status, "content": row.content}}
            )
    # The API's stored exchanges carry no id back to the program: compare each program's answers
    # with the answers stored under its user, as multisets of texts.
    for username in usernames.get("api", []):
        streamed = Counter(r["text"] for r in api if r["user"] == username)
        kept = Counter(
            Message.objects.filter(
                conversation__owner__username=username, role=Message.Role.ASSISTANT, status="complete"
            ).values_list("content", flat=True)
        )
        missing = streamed - kept
        if missing:
            mismatches.append({"surface": "api", "user": username, "not_stored": sum(missing.values())})
    return {
        # A step in which no answer ended (locust never ran, or no user got in) checked nothing.
        "passed": bool(chat or api) and not errors and not mismatches and not trouble,
        "locust_trouble": trouble,
        "answers": dict(Counter(f"{r['surface']} {r['status']}" for r in chat + api)),
        "errors": dict(Counter(f"{r['surface']} {r['error']}" for r in errors)),
        "mismatches": mismatches[:20],
        "mismatch_count": len(mismatches),
        "reconnects": {
            "sockets": len(reconnects),
            "refused_total": sum(reconnects),
            "refused_most": max(reconnects, default=0),
            "sockets_by_refusals": {str(n): count for n, count in sorted(Counter(reconnects).items())},
            "busy_most": max(busy, default=0),
            "failed_handshakes": dict(failed.most_common(5)),
        },
    }


def summary(stats: Path, result: dict, out: Path) -> str:
    lines = [
        f"Results in {out}",
        "",
        f"{'type':5} {'name':22} {'count':>6} {'fail':>5} {'p50':>7} {'p95':>7} {'p99':>7} {'max':>7}  (ms)",
    ]
    if stats.exists():
        for row in csv.DictReader(stats.open()):
            lines.append(
                f"{row['Type']:5} {row['Name'][:22]:22} {row['Request Count']:>6} {row['Failure Count']:>5} "
                f"{row['50%']:>7} {row['95%']:>7} {row['99%']:>7} {float(row['Max Response Time']):>7.0f}"
            )
    lines += [
        "",
        f"answers ended: {result['answers']}",
        f"errors other than busy: {result['errors'] or 'none'}",
        f"stored text differing from streamed text: {result['mismatch_count']}",
        f"sockets lost and opened again: {result['reconnects']}",
        f"failed requests and task exceptions (locust): {result['locust_trouble'] or 'none'}",
        "CHECK " + ("PASSED" if result["passed"] else "FAILED"),
    ]
    return "\n".join(lines)
