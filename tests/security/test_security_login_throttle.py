"""Login attempts are throttled per username and per client address, in the real Redis."""

import secrets

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def small_limits(settings):
    settings.LOGIN_FAILURES_PER_USERNAME = 3
    settings.LOGIN_FAILURES_PER_IP = 5
    settings.LOGIN_THROTTLE_SECONDS = 60


def fresh_address() -> str:
    return "10.{}.{}.{}".format(*secrets.token_bytes(3))


def fresh_user(password: str = "pw-right-12345"):
    return get_user_model().objects.create_user(f"u-{secrets.token_hex(4)}", password=password)


def log_in(client, username: str, password: str, address: str, path: str = "/accounts/login/"):
    return client.post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


def test_it_refuses_even_the_right_password_after_too_many_failures_for_a_username(client):
    user = fresh_user()
    for _ in range(3):
        assert log_in(client, user.username, "wrong", fresh_address()).status_code == 200
    refused = log_in(client, user.username, "pw-right-12345", fresh_address())
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert b"Too many failed login attempts" in refused.content
    assert "_auth_user_id" not in client.session
    # The username is spelled in another case: still the same account's count.
    assert log_in(client, user.username.upper(), "pw-right-12345", fresh_address()).status_code == 429


def test_it_refuses_an_address_that_guesses_at_many_usernames(client):
    address = fresh_address()
    for _ in range(5):
        assert log_in(client, f"nobody-{secrets.token_hex(4)}", "guess", address).status_code == 200
    victim = fresh_user()
    assert log_in(client, victim.username, "pw-right-12345", address).status_code == 429
    # Someone else, from their own address, is not affected.
    assert log_in(client, victim.username, "pw-right-12345", fresh_address()).status_code == 302


def test_it_throttles_the_admin_login_too(client):
    staff = fresh_user()
    staff.is_staff = True
    staff.save()
    for _ in range(3):
        assert log_in(client, staff.username, "wrong", fresh_address(), "/admin/login/").status_code == 200
    response = log_in(client, staff.username, "pw-right-12345", fresh_address(), "/admin/login/")
    assert response.status_code == 429
    # The count is per username across both forms.
    assert log_in(client, staff.username, "pw-right-12345", fresh_address()).status_code == 429


def test_it_forgets_a_usernames_failures_once_it_logs_in(client):
    user = fresh_user()
    for _ in range(2):
        log_in(client, user.username, "wrong", fresh_address())
    assert log_in(client, user.username, "pw-right-12345", fresh_address()).status_code == 302
    client.post("/accounts/logout/")
    for _ in range(2):
        assert log_in(client, user.username, "wrong", fresh_address()).status_code == 200
    assert log_in(client, user.username, "pw-right-12345", fresh_address()).status_code == 302


@pytest.mark.django_db(transaction=True)
async def test_it_throttles_requests_served_asynchronously(async_client, settings):
    # The test ASGI client always comes from 127.0.0.1: only the username's count is under test here.
    settings.LOGIN_FAILURES_PER_IP = 1000
    user = await sync_to_async(fresh_user)()
    wrong = {"username": user.username, "password": "wrong"}
    for _ in range(3):
        assert (await async_client.post("/accounts/login/", wrong)).status_code == 200
    right = {"username": user.username, "password": "pw-right-12345"}
    assert (await async_client.post("/accounts/login/", right)).status_code == 429


def test_look_alike_usernames_count_for_the_account_they_log_in_to(client):
    user = get_user_model().objects.create_user("carol", password="pw-right-12345")
    # Full-width letters: the login form normalises them (NFKC) to the account's own name.
    for _ in range(3):
        assert log_in(client, "ｃａｒｏｌ", "wrong", fresh_address()).status_code == 200
    assert log_in(client, "ｃａｒｏｌ", "another guess", fresh_address()).status_code == 429
    assert log_in(client, user.username, "pw-right-12345", fresh_address()).status_code == 429


def test_a_parallel_burst_gets_no_more_tries_than_the_limit(settings):
    from concurrent.futures import ThreadPoolExecutor

    from accounts.throttle import attempt

    username, address = f"burst-{secrets.token_hex(4)}", fresh_address()
    settings.LOGIN_FAILURES_PER_IP = 1000
    with ThreadPoolExecutor(max_workers=50) as pool:
        waits = list(pool.map(lambda _: attempt(username=username, address=address), range(50)))
    assert sum(1 for wait in waits if wait == 0) == 3


def test_a_forged_forwarded_address_is_ignored_unless_a_trusted_proxy_sent_it(client, settings):
    address = fresh_address()
    for _ in range(5):
        forged = {"HTTP_X_FORWARDED_FOR": fresh_address()}
        response = client.post(
            "/accounts/login/", {"username": f"x-{secrets.token_hex(4)}", "password": "guess"},
            REMOTE_ADDR=address, **forged,
        )  # fmt: skip
        assert response.status_code == 200
    victim = fresh_user()
    assert log_in(client, victim.username, "pw-right-12345", address).status_code == 429

    # Behind a configured proxy, the client it names is the one counted, each on its own.
    settings.TRUSTED_PROXIES = ["192.0.2.0/24"]
    clients = [fresh_address() for _ in range(6)]
    for one in clients:
        response = client.post(
            "/accounts/login/", {"username": f"y-{secrets.token_hex(4)}", "password": "guess"},
            REMOTE_ADDR="192.0.2.7", HTTP_X_FORWARDED_FOR=f"{one}, 192.0.2.9",
        )  # fmt: skip
        assert response.status_code == 200


def test_an_ipv6_client_counts_as_its_slash_64(client):
    network = "2001:db8:{:x}:{:x}::".format(*secrets.token_bytes(2))
    for host in range(1, 6):
        assert log_in(client, f"z-{secrets.token_hex(4)}", "guess", f"{network}{host}").status_code == 200
    victim = fresh_user()
    assert log_in(client, victim.username, "pw-right-12345", f"{network}beef").status_code == 429


@pytest.mark.parametrize(
    "path",
    [
        "/accounts/password_reset/",
        "/accounts/password_reset/done/",
        "/accounts/reset/MQ/set-password/",
        "/accounts/password_change/",
        "/accounts/password_change/done/",
    ],
)
def test_only_login_and_logout_are_mounted_of_djangos_account_views(client, path):
    """Reset and change views nobody uses would be unthrottled ways in (mail sent, passwords tried)."""
    assert client.get(path).status_code == 404
    assert client.post(path, {"email": "a@example.com"}).status_code == 404
