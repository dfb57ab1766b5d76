"""Driving Debian's Chromium: its flags, logging in through the form or at an identity provider,
waiting for images to settle."""

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
