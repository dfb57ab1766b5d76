"""The Procfile's processes under supervisord: what `make run` starts.

supervisord restarts each process on its own when it dies, logs why, and stops them all on
Ctrl-C (honcho and foreman stop every process when one exits, so one killed engine would take the
site down). The Procfile is the one list of commands (the Kubernetes manifests and docs follow
it too); this renders it as a supervisord configuration:

    WEB_PORT=8000 WEB_PROCESSES=1 python -m deploy.supervisor RUN_DIR web inference worker ...

writes RUN_DIR/supervisord.conf (and RUN_DIR/nginx.conf when `nginx` is named). Each command runs
through `sh -c 'exec …'`, as a Procfile runner runs it, so the Procfile's `${VAR:-default}` works and
the process supervisord signals is the program itself.

With `nginx`, the site is nginx on WEB_PORT in front of WEB_PROCESSES daphne processes on the
ports above it (web-0 on WEB_PORT+1, ...), each trusting X-Forwarded-For from this host only.
With INFERENCE_REPLICAS above 1, `inference` becomes inference-0, inference-1, ... (each its own
`runinference` with INFERENCE_REPLICA=i, restarted on its own) behind `router` (vLLM's router at
INFERENCE_URL; enginehost/router.py).
"""

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from chatsite.env import env_int, web_drain_seconds

ROOT = Path(__file__).resolve().parent.parent

# How long each process may take to stop after SIGTERM before it is killed: an engine drains
# its requests; a web process lets its answers finish for WEB_DRAIN_SECONDS and hands over the
# rest (answers.drain); Celery finishes its task.
# How long a web process of several must have run before the next one of a rolling restart stops.
WEB_START_SECONDS = 5
STOP_WAIT = {
    "inference": 30,
    "embeddings": 30,
    "web": int(web_drain_seconds()) + 10,
    "worker": 60,
    "bulk": 60,
    "router": 10,
}


def procfile(path: Path = ROOT / "Procfile") -> dict[str, str]:
    """The Procfile's processes: name → command line."""
    processes = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, command = line.split(":", 1)
            processes[name.strip()] = command.strip()
    return processes


@dataclass(frozen=True)
class Topology:
    """Which processes run: the Procfile's `names`; with `nginx` among them, `web_processes`
    daphne processes behind it; with `router` among them, `engine_replicas` engines behind it.
    `web_port` is where the site answers."""

    names: list[str]
    web_port: int = 8000
    web_processes: int = 1
    engine_replicas: int = 1

    def __post_init__(self) -> None:
        if self.web_processes < 1:
            raise SystemExit("WEB_PROCESSES must be 1 or more")
        if self.engine_replicas < 1:
            raise SystemExit("INFERENCE_REPLICAS must be 1 or more")
        if self.engine_replicas > 1 and "router" not in self.names:
            raise SystemExit("INFERENCE_REPLICAS above 1 needs the router in front of them")

    @property
    def behind_nginx(self) -> bool:
        return "nginx" in self.names

    def web_backends(self) -> list[tuple[str, int]]:
        """Each web process behind nginx: (its program name, its port)."""
        return [(f"web-{i}", self.web_port + 1 + i) for i in range(self.web_processes)]


def _program(name: str, command: str, stop_wait: int, environment: dict[str, str]) -> list[str]:
    # %% because supervisord expands %(...)s in every value.
    lines = [
        "",
        f"[program:{name}]",
        "command=" + shlex.join(["sh", "-c", "exec " + command]).replace("%", "%%"),
        f"directory={ROOT}",
        "autorestart=true",
        # A process that dies within a second of starting counts as a failed start; after
        # ten in a row (1 s, 2 s, ... apart) supervisord gives up on it and says so.
        "startsecs=1",
        "startretries=10",
        f"stopwaitsecs={stop_wait}",
        # Celery's and the engine's children go with their parent when it has to be killed.
        "killasgroup=true",
        "redirect_stderr=true",
        "stdout_logfile=/dev/stdout",
        "stdout_logfile_maxbytes=0",
    ]
    if environment:
        pairs = ",".join(f'{key}="{value}"' for key, value in environment.items())
        lines.append("environment=" + pairs.replace("%", "%%"))
    return lines


def _shared_socket_web(command: str, topology: Topology) -> list[str]:
    """`web_processes` web processes accepting from one listening socket on WEB_PORT that supervisord
    opens and keeps (an fcgi-program: the socket is each process's descriptor 0, WEB_LISTEN_FD). A
    process that drains closes its own copy, the others go on accepting, and connections that come
    while none accepts wait in the socket's queue instead of being refused: restarted one at a time
    (`make restart`), the site never stops answering, with no proxy in front."""
    lines = _program("web", command, STOP_WAIT["web"], {"WEB_LISTEN_FD": "0"})
    bind = os.environ.get("WEB_BIND") or "127.0.0.1"
    lines[1] = "[fcgi-program:web]"
    lines[2:2] = [
        f"socket=tcp://{bind}:{topology.web_port}",
        f"socket_backlog={env_int('WEB_LISTEN_BACKLOG', 4096, minimum=1)}",
        "process_name=web-%(process_num)d",
        f"numprocs={topology.web_processes}",
    ]
    # Started when it has run for a few seconds (Django loaded), so the next of a rolling restart
    # waits for it.
    return [line if line != "startsecs=1" else f"startsecs={WEB_START_SECONDS}" for line in lines]


def render(run_dir: Path, topology: Topology, commands: dict[str, str] | None = None) -> str:
    """The supervisord configuration of `topology`, its files under `run_dir`."""
    commands = commands if commands is not None else procfile()
    unknown = [name for name in topology.names if name not in commands]
    if unknown:
        raise SystemExit(f"not in the Procfile: {', '.join(unknown)}")
    sections = [
        "[supervisord]",
        "nodaemon=true",
        # Every process's files (the database, Redis's data, logs, uploads) readable by this user only.
        "umask=077",
        f"logfile={run_dir / 'supervisord.log'}",
        f"pidfile={run_dir / 'supervisord.pid'}",
        f"childlogdir={run_dir}",
    ]
    if topology.engine_replicas > 1:
        # Every process finds the replicas by their count, also under a supervisord started by hand.
        sections.append(f'environment=INFERENCE_REPLICAS="{topology.engine_replicas}"')
    sections += [
        "",
        "[unix_http_server]",
        f"file={run_dir / 'supervisor.sock'}",
        "",
        "[rpcinterface:supervisor]",
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
        "",
        "[supervisorctl]",
        f"serverurl=unix://{run_dir / 'supervisor.sock'}",
    ]
    for name in topology.names:
        if name == "inference" and topology.engine_replicas > 1:
            for index in range(topology.engine_replicas):
                environment = {"INFERENCE_REPLICA": str(index)}
                sections += _program(f"inference-{index}", commands[name], STOP_WAIT[name], environment)
            continue
        if name != "web":
            sections += _program(name, commands[name], STOP_WAIT.get(name, 10), {})
            continue
        if not topology.behind_nginx and topology.web_processes == 1:
            # One web process on WEB_PORT, from the environment as the Procfile reads it.
            sections += _program("web", commands["web"], STOP_WAIT["web"], {})
            continue
        if not topology.behind_nginx:
            sections += _shared_socket_web(commands["web"], topology)
            continue
        for program, port in topology.web_backends():
            # X-Forwarded-For is believed from nginx on this host only (docs/security.md).
            trusted = os.environ.get("TRUSTED_PROXIES") or "127.0.0.1"
            environment = {"WEB_PORT": str(port), "TRUSTED_PROXIES": trusted}
            sections += _program(program, commands["web"], STOP_WAIT["web"], environment)
    return "\n".join(sections) + "\n"


def write(run_dir: Path, topology: Topology) -> None:
    """RUN_DIR/supervisord.conf, and RUN_DIR/nginx.conf for a topology with nginx."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "supervisord.conf").write_text(render(run_dir, topology))
    if topology.behind_nginx:
        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings")
        django.setup()
        from deploy.nginx import write_main_config

        backends = [f"127.0.0.1:{port}" for _, port in topology.web_backends()]
        write_main_config(run_dir, f"127.0.0.1:{topology.web_port}", backends)


if __name__ == "__main__":
    write(
        Path(sys.argv[1]).resolve(),
        Topology(
            names=sys.argv[2:],
            web_port=env_int("WEB_PORT", 8000, minimum=1, maximum=65535),
            web_processes=env_int("WEB_PROCESSES", 1, minimum=1),
            engine_replicas=env_int("INFERENCE_REPLICAS", 1, minimum=1),
        ),
    )
