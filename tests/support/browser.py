"""Driving Debian's Chromium: its flags, logging in through the form or at an identity provider,
the chat's model picker and a message sent over its socket, waiting for images to settle."""

import json

BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Resolves once an image requested now has failed to load, a task later: a payload's own
# image load or handler, started while the payloads were rendered, has had its turn by then.
LOADS_SETTLED = """() => new Promise((resolve) => {
    const probe = new Image();
    probe.onerror = probe.onload = () => setTimeout(resolve);
    probe.src = '/static/no-such-image-' + Math.random() + '.png';
})"""


def log_in(page, base: str, username: str, password: str, path: str = "/accounts/login/") -> None:
    """Log in through the form; returns once the page it leads to has loaded, its scripts run,
    so what the test types next has handlers to go to."""
    page.goto(base + path)
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.click("[type=submit]")


def sign_in_at_provider(page, product: str, *, button: str, form_at: str, fields: dict, submit: str):
    """Sign in from the product's login page through an identity provider's form, as a person does
    (`button` on the login page, the form at an address starting `form_at`): the chat's socket,
    opened once the browser is back at the product."""
    page.goto(product + "/accounts/login/")
    with page.expect_navigation():
        page.click(button)
    assert page.url.startswith(form_at)
    for selector, value in fields.items():
        page.fill(selector, value)
    with page.expect_websocket(lambda socket: socket.url.endswith("/ws/chat/"), timeout=30_000) as opened:
        with page.expect_navigation(url=product + "/"):
            page.click(submit)
    return opened.value


def picker_models(page) -> list[str]:
    """The models the chat settings dialog's picker offers."""
    page.click("#open-settings")
    return page.locator("#settings-model option").all_inner_texts()


def send_refused(page, product: str, conversation) -> object:
    """Open `conversation`, whose model its owner may not use, and send a message as a person does:
    the page's `chat.send` over its socket is refused with the product's error, shown in the page,
    the text given back to the composer and nothing stored. The chat's socket."""
    with page.expect_websocket(lambda socket: socket.url.endswith("/ws/chat/"), timeout=30_000) as opened:
        page.goto(f"{product}/c/{conversation.pk}/")
    socket = opened.value
    page.fill("#prompt", "Summarise this.")
    with (
        socket.expect_event("framesent", _of_type("chat.send")) as sent,
        socket.expect_event("framereceived", _of_type("chat.error")) as refused,
    ):
        page.keyboard.press("Enter")
    assert json.loads(sent.value)["conversation"] == conversation.pk
    detail = f"the model {conversation.model_name!r} of this conversation is not available to you"
    refusal = json.loads(refused.value)
    assert (refusal["code"], refusal["detail"]) == ("invalid_field", detail)
    assert page.locator("#status").inner_text() == detail
    assert page.input_value("#prompt") == "Summarise this."
    assert not conversation.messages.exists()
    return socket


def _of_type(kind: str):
    return lambda payload: json.loads(payload).get("type") == kind
