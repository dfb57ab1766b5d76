"""The chat UI in a real browser (Debian's Chromium), against daphne and the real engine."""

import os
import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from conversations import services, turns
from conversations.models import Conversation, Message
from tests.support.browser import LOADS_SETTLED, log_in

pytestmark = pytest.mark.django_db(transaction=True)

# The README's picture of the chat; rewritten only on request, so a test run leaves the tree clean.
SCREENSHOT = Path(__file__).resolve().parents[2] / (
    "docs/chat.png" if os.environ.get("UPDATE_SCREENSHOTS") else "var/chat.png"
)


def wait_until_answered(page, timeout: float = 90_000) -> None:
    page.wait_for_selector(".message.assistant.generating", state="detached", timeout=timeout)


def last(page, selector: str):
    return page.locator(selector).last


HISTORY = [
    (
        "Plan a simple dinner for four.",
        "Here is a plan:\n\n1. **Starter**: tomato soup\n2. **Main**: roast chicken",
    ),
    (
        "What do I need for the soup?",
        "| Ingredient | Amount |\n|---|---|\n| Tomatoes | 1 kg |\n| Onion | 1 |",
    ),
    ("How long does the chicken take?", "About **80 minutes** at 190 °C, then 10 minutes of rest."),
    ("Any tips for crispy skin?", "- Dry the skin well\n- Salt it the night before\n- Start in a hot oven"),
]


def stored_history(user) -> Conversation:
    """A conversation long enough to scroll, stored as if it had been chatted."""
    conversation = services.conversation_create(
        user=user, settings_data={"max_tokens": 512, "min_tokens": 512, "temperature": 0}
    )
    for question, answer in HISTORY:
        turn = turns.chat_turn_start(user=user, conversation_id=conversation.pk, content=question)
        text = answer + "\n\n" + "Timing matters more than equipment, so read the whole recipe first. " * 8
        turns.message_finish(message_id=turn.assistant_message_id, content=text, status="complete")
    return conversation


def test_it_streams_follows_stops_regenerates_edits_flips_and_reloads(page, product_server):
    user = get_user_model().objects.create_user("carol", password="pw-carol-123")
    conversation = stored_history(user)
    log_in(page, product_server, "carol", "pw-carol-123")
    page.goto(f"{product_server}/c/{conversation.pk}/")
    page.wait_for_selector(".message.assistant")

    # Send with Enter; the answer grows in place while the page follows it.
    page.fill("#prompt", "Tell me a long story about a dragon who learns to cook.")
    page.keyboard.press("Enter")
    answer = page.locator(".message.assistant.generating .body")
    answer.wait_for(timeout=90_000)
    lengths = []
    followed = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len({n for n in lengths if n > 0}) < 3:
        lengths.append(len(answer.inner_text()))
        followed = followed or page.evaluate(
            "innerHeight + scrollY >= document.documentElement.scrollHeight - 60"
        )
        time.sleep(0.05)
    assert len({n for n in lengths if n > 0}) >= 2, f"text did not grow while streaming: {lengths}"
    assert followed, "the page did not follow the growing answer"

    # Scrolling up to read stops the following: the position stays while text still arrives.
    page.mouse.move(600, 300)
    page.evaluate(
        "window.scrolled = new Promise((done) => addEventListener('scrollend', done, {once: true}))"
    )
    page.mouse.wheel(0, -800)
    page.evaluate("window.scrolled")
    expect(page.locator("#jump")).to_be_visible()
    held = page.evaluate("scrollY")
    before = len(answer.inner_text())
    page.wait_for_function(
        "n => document.querySelector('.message.assistant.generating .body').innerText.length > n",
        arg=before + 40,
    )
    assert page.evaluate("scrollY") == held

    # Escape stops the answer; the partial text stays, marked stopped.
    page.keyboard.press("Escape")
    wait_until_answered(page)
    stopped = Message.objects.filter(conversation=conversation, role="assistant").latest("created_at")
    assert stopped.status == "stopped", (stopped.status, stopped.error_code, stopped.note)
    assert stopped.content
    assert "stopped" in last(page, ".message.assistant .meta").inner_text()

    # Per-conversation settings: shorter answers from now on.
    page.click("#open-settings")
    page.fill("#settings-form input[name=max_tokens]", "48")
    page.click("#settings-save")
    page.wait_for_selector("#settings-dialog", state="hidden")
    assert Conversation.objects.get(pk=conversation.pk).max_tokens == 48

    # Regenerate: a second version of the answer, with ‹ 2/2 › to flip between them.
    # Meanwhile the tab is in the background: its title says when the answer is done.
    page.evaluate("Object.defineProperty(document, 'hidden', {configurable: true, get: () => true})")
    last(page, ".message.assistant .regenerate").click()
    expect(last(page, ".message.assistant .version-label")).to_have_text("2/2")
    wait_until_answered(page)
    assert page.title().startswith("✓ ")
    page.evaluate(
        "Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});"
        "document.dispatchEvent(new Event('visibilitychange'))"
    )
    assert not page.title().startswith("✓")
    last(page, ".message.assistant .version-prev").click()
    assert last(page, ".message.assistant .version-label").inner_text() == "1/2"
    assert last(page, ".message.assistant .body").inner_text().strip() == stopped.content.strip()
    last(page, ".message.assistant .version-next").click()

    # Edit and resend: a new version of the question, sharing the earlier history.
    last(page, ".message.user .edit").click()
    page.fill(".editor textarea", "Write a Python function that adds two numbers, in a code block.")
    page.keyboard.press("Enter")
    expect(last(page, ".message.user .version-label")).to_have_text("2/2")
    wait_until_answered(page)
    assert page.locator(".message").count() == 10
    with page.expect_response("**/show"):
        last(page, ".message.user .version-prev").click()
    assert (
        last(page, ".message.user .body").inner_text()
        == "Tell me a long story about a dragon who learns to cook."
    )
    assert last(page, ".message.assistant .version-label").inner_text() == "2/2"

    # A reload shows the version chosen last, with its history.
    page.reload()
    page.wait_for_selector(".message.assistant")
    assert page.locator(".message").count() == 10
    assert (
        last(page, ".message.user .body").inner_text()
        == "Tell me a long story about a dragon who learns to cook."
    )
    with page.expect_response("**/show"):
        last(page, ".message.user .version-next").click()
    last(page, ".message.assistant .info").click()
    assert "first token" in last(page, ".message.assistant .figures").inner_text()
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    page.screenshot(path=str(SCREENSHOT))

    # An answer that finishes while the page is away is there after the reload.
    Conversation.objects.filter(pk=conversation.pk).update(max_tokens=80)
    page.fill("#prompt", "Say hello.")
    page.keyboard.press("Enter")
    page.wait_for_selector(".message.assistant.generating")
    page.reload()
    page.wait_for_selector(".message.assistant")
    wait_until_answered(page)
    newest = Message.objects.filter(conversation=conversation, role="assistant").latest("created_at")
    deadline = time.monotonic() + 30
    while newest.status == "generating" and time.monotonic() < deadline:
        time.sleep(0.2)
        newest.refresh_from_db()
    assert newest.status == "complete"
    assert last(page, ".message.assistant .body").inner_text().strip() == newest.content.strip()


def test_it_sends_a_message_typed_before_the_connection_is_up_once_it_is(page, product_server):
    get_user_model().objects.create_user("nina", password="pw-nina-1234")
    log_in(page, product_server, "nina", "pw-nina-1234")
    connection = {"open": False, "refused": 0}

    def route(ws):
        if connection["open"]:
            ws.connect_to_server()
        else:
            connection["refused"] += 1
            ws.close()

    page.route_web_socket("**/ws/chat/", route)
    page.goto(product_server + "/")
    deadline = time.monotonic() + 30
    while connection["refused"] == 0:  # the page tried to connect and was turned away
        assert time.monotonic() < deadline, "the page never opened its WebSocket"
        page.wait_for_timeout(50)
    page.fill("#prompt", "Say hello.")
    page.keyboard.press("Enter")
    expect(page.locator("#status")).to_contain_text("Connecting")
    connection["open"] = True
    expect(page.locator(".message.assistant .body").last).not_to_be_empty(timeout=90_000)
    wait_until_answered(page)
    question = Message.objects.get(conversation__owner__username="nina", role="user")
    assert question.content == "Say hello."
    assert Message.objects.get(parent=question).status == "complete"


def test_it_searches_renames_and_deletes_conversations(page, product_server):
    user = get_user_model().objects.create_user("dora", password="pw-dora-1234")
    penguins = turns.chat_turn_start(user=user, conversation_id=None, content="What do penguins eat?")
    turns.message_finish(message_id=penguins.assistant_message_id, content="Mostly krill.", status="complete")
    turns.chat_turn_start(user=user, conversation_id=None, content="Tell me about volcanoes")
    log_in(page, product_server, "dora", "pw-dora-1234")
    assert page.locator("#conversation-list .conv").count() == 2

    # Shift+Enter adds a line; nothing is sent.
    page.fill("#prompt", "first line")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("second line")
    assert page.input_value("#prompt") == "first line\nsecond line"
    assert page.locator(".message").count() == 0

    page.fill("#search", "KRILL")
    expect(page.locator("#conversation-list .conv")).to_have_count(1)
    assert page.locator("#conversation-list .conv-title").inner_text() == "What do penguins eat?"
    # The text it matched, the match marked.
    expect(page.locator("#conversation-list .conv-snippet mark")).to_have_text("krill")
    page.fill("#search", "")
    expect(page.locator("#conversation-list .conv")).to_have_count(2)

    row = page.locator(f'.conv[data-id="{penguins.conversation_id}"]')
    row.hover()
    row.locator(".conv-rename").click()
    page.fill(".conv-title-input", "Antarctic birds")
    with page.expect_response("**/rename"):
        page.keyboard.press("Enter")
    # The list shows the new title once the page has read the response.
    expect(row.locator(".conv-title")).to_have_text("Antarctic birds")
    assert Conversation.objects.get(pk=penguins.conversation_id).title == "Antarctic birds"

    page.once("dialog", lambda dialog: dialog.accept())
    row.hover()
    with page.expect_response("**/delete"):
        row.locator(".conv-delete").click()
    expect(row).to_have_count(0)
    assert not Conversation.objects.filter(pk=penguins.conversation_id).exists()


XSS_PAYLOADS = [
    '<img src=x onerror="window.__owned=1">',
    "<script>window.__owned=2</script>",
    "[click](javascript:window.__owned=3)",
    "[click](JaVaScRiPt:window.__owned=4)",
    "[click](&#106;avascript:window.__owned=5)",
    "<javascript:window.__owned=6>",
    '<a href="javascript:window.__owned=7">a</a>',
    "![x](javascript:window.__owned=8)",
    '<svg onload="window.__owned=9"></svg>',
    '<iframe src="javascript:window.__owned=10"></iframe>',
    "[data](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX19vd25lZD0xMTwvc2NyaXB0Pg==)",
    '<details open ontoggle="window.__owned=12">x</details>',
    "```html\n<script>window.__owned=13</script>\n```",
    '[ok](https://example.com "title") and <https://example.org>',
    "| a | b |\n|---|---|\n| <img src=x onerror=window.__owned=14> | `code` |",
]

# The start of an async page function: StreamRenderer, and parsed(), the characters of Markdown
# parsed since, counted by wrapping markdown-it's render from outside the product's code.
PARSE_COUNTER = """async () => {
    const { StreamRenderer } = await import('/static/frontend/markdown.js');
    const proto = Object.getPrototypeOf(window.markdownit());
    const plainRender = proto.render;
    let parsedChars = 0;
    proto.render = function (src, env) {
        parsedChars += src.length;
        return plainRender.call(this, src, env);
    };
    const parsed = () => parsedChars;
"""

SAFE_DOM = """(root) => {
    const bad = [];
    for (const el of root.querySelectorAll('*')) {
        const tag = el.tagName.toUpperCase();
        const forbidden = ['SCRIPT', 'IMG', 'IFRAME', 'SVG', 'DETAILS', 'OBJECT', 'EMBED', 'STYLE'];
        if (forbidden.includes(tag)) bad.push(tag);
        for (const attr of el.attributes) if (/^on/i.test(attr.name)) bad.push(attr.name);
        if (el.tagName === 'A') {
            const href = el.getAttribute('href') || '';
            if (!/^(https?:|mailto:)/i.test(href)) bad.push('href ' + href);
            if (el.target !== '_blank' || !/noopener/.test(el.rel)) bad.push('link ' + href);
        }
    }
    return bad;
}"""


def test_it_renders_markdown_and_never_lets_script_reach_the_page(page, product_server):
    user = get_user_model().objects.create_user("dave", password="pw-dave-1234")
    conversation = Conversation.objects.create(owner=user, title="<img src=x onerror=window.__owned=99>")
    parent = None
    for payload in XSS_PAYLOADS:
        parent = Message.objects.create(
            conversation=conversation, parent=parent, role="user", content=payload
        )
        parent = Message.objects.create(
            conversation=conversation, parent=parent, role="assistant", content=payload
        )
    Conversation.objects.filter(pk=conversation.pk).update(current_leaf=parent)
    log_in(page, product_server, "dave", "pw-dave-1234")
    page.goto(f"{product_server}/c/{conversation.pk}/")
    page.wait_for_selector(".message.assistant")
    assert page.locator(".message.assistant").count() == len(XSS_PAYLOADS)
    assert page.eval_on_selector("#messages", SAFE_DOM) == []
    assert page.locator("#conversation-list img, #chat-title img").count() == 0
    assert page.locator(".message.user .body").first.inner_text() == XSS_PAYLOADS[0]
    assert page.locator(".message.assistant .codeblock code").inner_text().strip() == (
        "<script>window.__owned=13</script>"
    )
    assert page.locator(".message.assistant table td code").inner_text() == "code"
    assert page.locator('.message.assistant a[href="https://example.com"]').count() == 1

    # The streaming path: each payload arrives in small pieces, split mid-tag.
    streamed = page.evaluate(
        """async (payloads) => {
            const { StreamRenderer } = await import('/static/frontend/markdown.js');
            const answer = document.createElement('div');
            answer.className = 'message assistant';
            const box = document.createElement('div');
            box.className = 'body';
            answer.appendChild(box);
            document.getElementById('messages').appendChild(answer);
            const renderer = new StreamRenderer(box);
            const text = payloads.join('\\n\\n');
            for (let i = 0; i < text.length; i += 3) {
                renderer.append(text.slice(i, i + 3));
                renderer.flush();
            }
            return box.childElementCount;
        }""",
        XSS_PAYLOADS,
    )
    assert streamed > 0
    assert page.eval_on_selector("#messages", SAFE_DOM) == []
    page.evaluate(LOADS_SETTLED)
    assert page.evaluate("window.__owned") is None

    # A 4,000-token answer streamed token by token is parsed about once, not once per token.
    cost = page.evaluate(
        PARSE_COUNTER
        + """
            const box = document.createElement('div');
            const renderer = new StreamRenderer(box);
            let text = '';
            for (let i = 0; i < 4000; i++) {
                const token = i % 400 === 0 ? '\\n```\\ncode\\n' : i % 400 === 10 ? '\\n```\\n\\n'
                    : i % 30 === 29 ? 'end.\\n\\n' : 'word ';
                text += token;
                renderer.append(token);
                renderer.flush();
            }
            return { parsed: parsed(), length: text.length };
        }"""
    )
    assert cost["parsed"] < 40 * cost["length"], cost

    # Nor is a long code block: while it is open its text is appended as it comes, and it is
    # rendered (highlighted, with its copy button) once, when its closing fence arrives.
    code = page.evaluate(
        PARSE_COUNTER
        + """
            const box = document.createElement('div');
            const renderer = new StreamRenderer(box);
            let text = 'Here:\\n```python\\n';
            renderer.append(text);
            renderer.flush();
            for (let i = 0; i < 4000; i++) {
                const token = i % 12 === 11 ? '\\n' : 'x = 1; ';
                text += token;
                renderer.append(token);
                renderer.flush();
            }
            const shown = box.querySelector('pre code').textContent.length;
            const parsedBeforeClose = parsed();
            renderer.append('\\n```\\n');
            renderer.flush();
            const blocks = box.querySelectorAll('.codeblock').length;
            return { parsed: parsedBeforeClose, shown, blocks, length: text.length };
        }"""
    )
    assert code["parsed"] < code["length"] and code["shown"] > 0.9 * code["length"], code
    assert code["blocks"] == 1, code

    # A code block's copy button puts its code, as text, on the clipboard.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.evaluate(
        """async () => {
            const { render } = await import('/static/frontend/markdown.js');
            const box = document.createElement('div');
            box.id = 'copy-test';
            document.getElementById('messages').appendChild(box);
            render(box, 'Run:\\n\\n```sh\\necho "<b>hi</b>"\\n```\\n');
        }"""
    )
    page.click("#copy-test .codeblock button.copy")
    expect(page.locator("#copy-test button.copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == 'echo "<b>hi</b>"\n'

    # Phone width: no sideways scrolling, the list folds behind a button.
    page.set_viewport_size({"width": 390, "height": 800})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.locator("#toggle-sidebar").is_visible()
    assert not page.locator("#sidebar").is_visible()
    page.click("#toggle-sidebar")
    assert page.locator("#sidebar").is_visible()
