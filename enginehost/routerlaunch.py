"""vLLM's router, started with vllm-router's own arguments, its key to the engines taken from
INFERENCE_API_KEY or the file INFERENCE_API_KEY_FILE names rather than from its command line,
which every user of the host can read (`ps`). Nothing here imports Django."""

import os
import sys
from pathlib import Path

from vllm_router.launch_router import launch_router, parse_router_args


def engine_key() -> str:
    key = os.environ.get("INFERENCE_API_KEY", "")
    path = os.environ.get("INFERENCE_API_KEY_FILE", "")
    return key or (Path(path).read_text().strip() if path else "")


def main() -> None:
    args = parse_router_args(sys.argv[1:])
    args.api_key = engine_key() or None
    launch_router(args)


if __name__ == "__main__":
    main()
