"""`make try-sso`: the product in development mode (`make dev`), signing in with the test OpenID
provider started beside it on port 8400, with one user (printed) in the provider groups that map to
the staff and large-model groups. Ctrl-C stops both."""

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.processes import ROOT
from tests.support.oidc_provider.harness import callback_url, running_provider

PORT = 8400
USER, PASSWORD = "sso-demo", "sso-demo-password"


def main() -> int:
    web_port = os.environ.get("WEB_PORT", "8000")
    state = Path(os.environ.get("DATA_DIR", ROOT / "var")) / "oidc-demo-provider"
    redirects = [callback_url(f"http://{host}:{web_port}") for host in ("127.0.0.1", "localhost")]
    with running_provider(state, redirects, state.parent / "oidc-demo-provider.log", port=PORT) as provider:
        provider.set_user(
            USER, password=PASSWORD, email="sso-demo@example.com", groups=["chat-admins", "llm-large"]
        )
        print(f"Test OpenID provider at {provider.issuer}: sign in with {USER} / {PASSWORD}.", flush=True)
        env = {
            **os.environ,
            **provider.env(
                SSO_GROUP_MAP=json.dumps({"chat-admins": "staff", "llm-large": "large-model"}),
                SSO_STAFF_GROUPS="staff",
            ),
        }
        try:
            return subprocess.run(["make", "--no-print-directory", "dev"], cwd=ROOT, env=env).returncode
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
