"""The machine and run times the figures come from."""


def section(results: list[dict]) -> str:
    machine = results[0]["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in machine["versions"].items())
    durations = ", ".join(
        f"{r['benchmark']} {r['duration_s'] / 60:.1f} min" + (" (quick mode)" if r.get("quick") else "")
        for r in results
    )
    return "\n".join(
        [
            "## Machine",
            "",
            f"- CPU: {machine['cpu']}, {machine['cores']} cores; memory {machine['memory_gb']} GB; "
            f"accelerator: {machine['accelerator']}",
            f"- {machine['system']}, Python {machine['python']}; {versions}",
            f"- Model: {machine['model']}; commit {machine['commit']}; run {machine['date']}",
            f"- Run time: {durations}.",
            "- A small shared VM: absolute figures move from run to run (and between hosts), the ratios "
            "(both sides measured in the same run on the same prompts) are the meaningful part.",
        ]
    )
