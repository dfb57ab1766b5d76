"""A SAML 2.0 identity provider for the tests: pysaml2's `Server`, served over HTTP on a free port.

It speaks the real protocol: it publishes its metadata, takes the product's AuthnRequest over the
Redirect or POST binding, shows a sign-in form, and posts back a Response whose assertion it signs
with a key and certificate made when it starts (xmlsec1, Debian's package, signs). Its users have an
e-mail address and groups. A test can ask for the next response to be bad in one way (`fault`):
unsigned, signed by another key or with SHA-1, altered after signing, expired, for another audience, sent to
another address (Destination) or for another recipient.
Every response it sent is kept (`sent`), so a test can post one again."""

import base64
import html
import re
import shutil
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from saml2 import BINDING_HTTP_POST, BINDING_HTTP_REDIRECT
from saml2.config import IdPConfig
from saml2.metadata import entity_descriptor
from saml2.saml import NAME_FORMAT_URI, NAMEID_FORMAT_PERSISTENT, NameID
from saml2.server import Server
from saml2.xmldsig import DIGEST_SHA1, DIGEST_SHA256, SIG_RSA_SHA1, SIG_RSA_SHA256

from tests.support.saml_keys import write_key_pair

# The attribute names the product reads by default (docs/configuration.md): mail by its OID,
# and the groups attribute.
EMAIL = "urn:oid:0.9.2342.19200300.100.1.3"
GROUPS = "groups"
# An attribute some providers send; the product ignores it (sso.saml): every user here says yes.
EMAIL_VERIFIED = "http://schemas.auth0.com/email_verified"
FAULTS = {"unsigned", "foreign_key", "altered", "expired", "audience", "destination", "recipient", "sha1"}


@dataclass
class IdPUser:
    password: str
    email: str
    groups: list[str] = field(default_factory=list)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args) -> None:
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class SamlIdP:
    """The identity provider: `start()`, `trust_sp(metadata_xml)`, then sign-ins; `stop()`."""

    def __init__(self, folder: Path, port: int = 0) -> None:
        self.folder = folder
        self.users: dict[str, IdPUser] = {}
        self.fault: str | None = None
        self.sent: list[str] = []
        self.sp_metadata: list[str] = []
        self._lock = threading.Lock()
        self._httpd = None
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))
            self.port = probe.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.entity_id = self.base + "/metadata"
        self.key, self.cert = write_key_pair(folder, "idp")
        self.other_key, self.other_cert = write_key_pair(folder, "forger")

    def start(self) -> None:
        self._httpd = make_server(
            "127.0.0.1", self.port, self._app, server_class=_ThreadingServer, handler_class=_QuietHandler
        )
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def trust_sp(self, metadata_xml: str) -> None:
        """Take a service provider's metadata (its entity id, its assertion consumer service)."""
        self.sp_metadata.append(metadata_xml)

    def add_user(self, username: str, password: str, email: str, groups: list[str]) -> None:
        self.users[username] = IdPUser(password, email, list(groups))

    def metadata(self) -> str:
        return str(entity_descriptor(self._config(self.key, self.cert)))

    def _config(self, key: Path, cert: Path, lifetime_minutes: int = 15) -> IdPConfig:
        config = IdPConfig()
        config.load(
            {
                "entityid": self.entity_id,
                "xmlsec_binary": shutil.which("xmlsec1"),
                "key_file": str(key),
                "cert_file": str(cert),
                "metadata": {"inline": list(self.sp_metadata)},
                "service": {
                    "idp": {
                        "endpoints": {
                            "single_sign_on_service": [
                                (self.base + "/sso/redirect", BINDING_HTTP_REDIRECT),
                                (self.base + "/sso/post", BINDING_HTTP_POST),
                            ],
                            "single_logout_service": [(self.base + "/slo/redirect", BINDING_HTTP_REDIRECT)],
                        },
                        "policy": {
                            "default": {
                                "lifetime": {"minutes": lifetime_minutes},
                                "attribute_restrictions": None,
                                "name_form": NAME_FORMAT_URI,
                            }
                        },
                        "name_id_format": [NAMEID_FORMAT_PERSISTENT],
                        "want_authn_requests_signed": False,
                    }
                },
            }
        )
        return config

    # HTTP

    def _app(self, environ, start_response):
        path = environ["PATH_INFO"]
        method = environ["REQUEST_METHOD"]
        if method == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            form = urllib.parse.parse_qs(environ["wsgi.input"].read(length).decode())
        else:
            form = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        values = {name: items[0] for name, items in form.items()}
        if path == "/metadata" and method == "GET":
            return self._reply(start_response, "200 OK", self.metadata(), "text/xml")
        if path in ("/sso/redirect", "/sso/post"):
            binding = BINDING_HTTP_REDIRECT if path == "/sso/redirect" else BINDING_HTTP_POST
            return self._reply(start_response, "200 OK", self._login_form(values, binding, error=""))
        if path == "/login" and method == "POST":
            return self._sign_in(start_response, values)
        if path == "/logout":
            location = self.logout_url(values["username"], values["sp"], signed=values.get("signed") != "no")
            start_response("302 Found", [("Location", location)])
            return [b""]
        if path == "/slo/redirect":
            return self._reply(
                start_response, "200 OK", "<!doctype html><title>Signed out</title><h1>Signed out</h1>"
            )
        return self._reply(start_response, "404 Not Found", "not found", "text/plain")

    @staticmethod
    def _reply(start_response, status: str, body: str, content_type: str = "text/html"):
        start_response(status, [("Content-Type", f"{content_type}; charset=utf-8")])
        return [body.encode()]

    @staticmethod
    def _login_form(values: dict, binding: str, error: str) -> str:
        hidden = "".join(
            f'<input type="hidden" name="{name}" value="{html.escape(values.get(name, ""))}">'
            for name in ("SAMLRequest", "RelayState")
        )
        return (
            "<!doctype html><title>Test identity provider</title><h1>Test identity provider</h1>"
            f"<p>{html.escape(error)}</p>"
            '<form method="post" action="/login">'
            f'{hidden}<input type="hidden" name="binding" value="{binding}">'
            '<label>Username <input name="username" autocomplete="off"></label>'
            '<label>Password <input name="password" type="password"></label>'
            '<button type="submit">Sign in</button></form>'
        )

    def _sign_in(self, start_response, values: dict):
        user = self.users.get(values.get("username", ""))
        if user is None or user.password != values.get("password"):
            page = self._login_form(values, values.get("binding", BINDING_HTTP_REDIRECT), "Wrong password")
            return self._reply(start_response, "401 Unauthorized", page)
        response, destination = self.respond(
            values["SAMLRequest"], values.get("binding", BINDING_HTTP_REDIRECT), values.get("username"), user
        )
        return self._reply(
            start_response, "200 OK", self.post_form(destination, response, values.get("RelayState"))
        )

    # SAML

    def respond(self, saml_request: str, binding: str, username: str, user: IdPUser) -> tuple[str, str]:
        """The signed Response (base64) to an AuthnRequest, made bad in the way `fault` says (once),
        and the address it goes to."""
        with self._lock:
            fault, self.fault = self.fault, None
        key, cert = (self.other_key, self.other_cert) if fault == "foreign_key" else (self.key, self.cert)
        server = Server(config=self._config(key, cert, lifetime_minutes=-30 if fault == "expired" else 15))
        request = server.parse_authn_request(saml_request, binding).message
        sp_entity_id = request.issuer.text
        destination = request.assertion_consumer_service_url
        if not destination:
            destination = server.metadata.assertion_consumer_service(sp_entity_id, BINDING_HTTP_POST)[0][
                "location"
            ]
        elsewhere = destination.replace("/acs/", "/elsewhere/acs/")
        recipient = elsewhere if fault in ("destination", "recipient") else destination
        response = server.create_authn_response(
            identity={EMAIL: [user.email], GROUPS: list(user.groups), EMAIL_VERIFIED: ["true"]},
            in_response_to=request.id,
            destination=recipient,
            sp_entity_id="https://elsewhere.example/saml/metadata/" if fault == "audience" else sp_entity_id,
            name_id=NameID(format=NAMEID_FORMAT_PERSISTENT, text=f"idp-{username}"),
            authn={"class_ref": "urn:oasis:names:tc:SAML:2.0:ac:classes:Password"},
            sign_assertion=fault != "unsigned",
            sign_response=False,
            sign_alg=SIG_RSA_SHA1 if fault == "sha1" else SIG_RSA_SHA256,
            digest_alg=DIGEST_SHA1 if fault == "sha1" else DIGEST_SHA256,
        )
        xml = str(response)
        if fault == "recipient":
            # The Response's own Destination (outside the signed assertion) made right again: only
            # the signed SubjectConfirmationData's Recipient names another address.
            xml = xml.replace(f'Destination="{elsewhere}"', f'Destination="{destination}"', 1)
        if fault == "altered":
            # The signed assertion's e-mail changed after signing: the digest no longer matches.
            xml = xml.replace(user.email, "mallory@example.com", 1)
        encoded = _b64(xml)
        self.sent.append(encoded)
        return encoded, destination

    def logout_url(self, username: str, sp_entity_id: str, signed: bool = True, forged: bool = False) -> str:
        """The product's single logout address with a LogoutRequest for the user (Redirect binding),
        as the identity provider sends the browser when the user signs out there; `forged`: signed
        by another key."""
        key, cert = (self.other_key, self.other_cert) if forged else (self.key, self.cert)
        server = Server(config=self._config(key, cert))
        location = server.metadata.single_logout_service(sp_entity_id, BINDING_HTTP_REDIRECT, "spsso")[0][
            "location"
        ]
        request_id, request = server.create_logout_request(
            location,
            sp_entity_id,
            name_id=NameID(format=NAMEID_FORMAT_PERSISTENT, text=f"idp-{username}"),
            sign=False,
            sign_alg=SIG_RSA_SHA256,
            digest_alg=DIGEST_SHA256,
        )
        info = server.apply_binding(
            BINDING_HTTP_REDIRECT, str(request), location, sign=signed, sigalg=SIG_RSA_SHA256
        )
        return dict(info["headers"])["Location"]

    @staticmethod
    def post_form(destination: str, saml_response: str, relay_state: str | None) -> str:
        """The page that posts a Response to the product (the HTTP-POST binding), submitted by script."""
        relay = (
            f'<input type="hidden" name="RelayState" value="{html.escape(relay_state)}">'
            if relay_state
            else ""
        )
        return (
            "<!doctype html><title>Signing in</title>"
            f'<form id="saml" method="post" action="{html.escape(destination)}">'
            f'<input type="hidden" name="SAMLResponse" value="{saml_response}">{relay}'
            '<noscript><button type="submit">Continue</button></noscript></form>'
            "<script>document.getElementById('saml').submit()</script>"
        )


def _b64(xml: str) -> str:
    return base64.b64encode(xml.encode()).decode()


def form_fields(page: str) -> dict[str, str]:
    """The hidden fields and the action of a page's form (the IdP's post-back page)."""
    fields = {name: html.unescape(value) for name, value in re.findall(r'name="(\w+)" value="([^"]*)"', page)}
    action = re.search(r'action="([^"]*)"', page)
    if action:
        fields["action"] = html.unescape(action.group(1))
    return fields
