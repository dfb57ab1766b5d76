"""`make try-saml`: the product in development mode (`make dev`), signing in with the test SAML
identity provider (pysaml2) started beside it on port 8401, with one user (printed) in the provider
groups that map to the staff and researchers groups. Once the product answers, the identity provider
reads its SP metadata (as 127.0.0.1 and as localhost). Ctrl-C stops both."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from harness.processes import ROOT
from harness.waiting import wait_for
from tests.support.saml import product_variables
from tests.support.saml_idp import SamlIdP

PORT = 8401
USER, PASSWORD = "saml-demo", "saml-demo-password"
METADATA = "/accounts/saml/{provider}/metadata/"


def trust_when_up(idp: SamlIdP, web_port: str) -> None:
    def metadata(host: str, provider: str) -> str:
        url = f"http://127.0.0.1:{web_port}" + METADATA.format(provider=provider)
        return httpx.get(url, headers={"Host": f"{host}:{web_port}"}, timeout=10).text

    def up() -> bool:
        try:
            return "EntityDescriptor" in metadata("127.0.0.1", "acme")
        except httpx.HTTPError:
            return False

    wait_for(up, 900, "the product's SAML metadata")
    for host in ("127.0.0.1", "localhost"):
        for provider in ("acme", "trusted"):
            idp.trust_sp(metadata(host, provider))
    print(f"Test SAML identity provider trusts the product: sign in with {USER} / {PASSWORD}.", flush=True)


def main() -> int:
    web_port = os.environ.get("WEB_PORT", "8000")
    state = Path(os.environ.get("DATA_DIR", ROOT / "var")) / "saml-demo"
    state.mkdir(parents=True, exist_ok=True)
    idp = SamlIdP(state, port=PORT)
    idp.add_user(USER, PASSWORD, "saml-demo@example.com", ["chat-admins", "researchers"])
    idp.start()
    threading.Thread(target=trust_when_up, args=(idp, web_port), daemon=True).start()
    env = {**os.environ, **product_variables(idp, state)}
    try:
        return subprocess.run(["make", "--no-print-directory", "dev"], cwd=ROOT, env=env).returncode
    except KeyboardInterrupt:
        return 0
    finally:
        idp.stop()


if __name__ == "__main__":
    sys.exit(main())
