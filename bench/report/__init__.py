"""Charts and docs/benchmarks.md from the benchmarks' JSON results in docs/benchmarks/.

Run after the benchmarks (`make bench` does): `python -m bench.report`. One module per section of
the page, each writing its own charts; a benchmark that has not run yet is listed as missing.
Targets are reported as met or missed, never asserted.
"""

import argparse
from pathlib import Path

import matplotlib

from bench.report import (
    batching,
    binding,
    defaults,
    embeddings,
    knee,
    knowledge,
    machine,
    prefix,
    relay,
    router,
    speculative,
    streaming,
)
from bench.report.blocks import load
from bench.results import RESULTS, ROOT

DOC = ROOT / "docs" / "benchmarks.md"
# Everything from this line on in docs/benchmarks.md is written by people and kept across runs.
# It is matched as the page has it: a change to it is made on the page too, or the notes are lost.
NOTES = "<!-- notes: kept by bench/report -->"
# And so is the page's head between these two lines, under its title: the contents and how to run.
CONTENTS, CONTENTS_END = "<!-- contents: kept by bench/report -->", "<!-- /contents -->"
# Each benchmark's result file by name, and the module that writes its section, in the page's order.
SECTIONS = {
    "streaming": streaming,
    "batching": batching,
    "prefix": prefix,
    "knee": knee,
    "relay": relay,
    "speculative": speculative,
    "router": router,
    "defaults": defaults,
    "binding": binding,
    "embeddings": embeddings,
    "knowledge": knowledge,
}
TITLE = "# Benchmarks"
INTRO = """`make bench` runs the benchmarks in `bench/` and rewrites this page, its charts and the JSON
results in `docs/benchmarks/`; `make bench QUICK=1` runs a reduced set (fewer requests and engine
settings). Each benchmark starts its own engine(s) with `enginehost.launcher` and the product with
daphne on the configured database and Redis, like `make run`, and compares against the raw engine in
the same run, on the same prompts, at temperature 0. Targets are goals reported here, not test
assertions. Run time on the machine below: about {minutes:.0f} minutes for this run.
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--doc", type=Path, default=DOC)
    options = parser.parse_args(argv)
    # Charts are written to files; no display is needed or wanted.
    matplotlib.use("Agg")
    sections, results = [], []
    for name, module in SECTIONS.items():
        result = load(options.results, name)
        if result is None:
            sections.append(f"## {name}\n\nNot run yet: `python -m bench.bench_{name}`.")
            continue
        results.append(result)
        sections.append(module.section(result, options.results))
    minutes = sum(r["duration_s"] for r in results) / 60
    previous = options.doc.read_text() if options.doc.exists() else ""
    parts = [TITLE]
    if CONTENTS in previous and CONTENTS_END in previous:
        parts.append(previous[previous.index(CONTENTS) : previous.index(CONTENTS_END) + len(CONTENTS_END)])
    parts.append(INTRO.format(minutes=minutes))
    if results:
        parts.append(machine.section(results))
    notes = previous[previous.index(NOTES) :] if NOTES in previous else ""
    options.doc.write_text("\n\n".join(parts + sections) + "\n" + (f"\n{notes}" if notes else ""))
    print(f"wrote {options.doc}")
