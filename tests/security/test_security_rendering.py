"""No text from the model, a user or a document ever runs in the browser, and every page sends a
Content-Security-Policy without 'unsafe-inline' scripts.

Model output comes from the stand-in engine (harness.stand_in_engine: the product server runs in
its own process, so this is how its answers are scripted); it streams the payload corpus a few
characters at a time, so payloads arrive split across tokens. The same corpus is typed by the
user, becomes conversation titles, search results and the names, summaries and errors of a bulk
job in the admin. Sanitizing must catch all of it: the test also requires that the browser
reported no CSP violation, i.e. the policy never had to step in.
"""

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from apitokens.services import token_issue
from audit.services import conversation_read_record
from conversations import services, turns
from conversations.models import ConversationDocument
from documents.uploads import DocumentInput
from harness.stand_in_engine import StandInEngine, serving
from jobs import services as job_services
from jobs.models import Document, Job, Result
from tests.support.browser import LOADS_SETTLED, log_in
from tests.support.product import running_daphne
from usage.services import usage_record

pytestmark = pytest.mark.django_db(transaction=True)

# Each payload, if it ever ran, would set window.__owned to its number.
PAYLOADS = [
    "<script>window.__owned=1</script>",
    '<img src=x onerror="window.__owned=2">',
    "<svg onload=window.__owned=3>",
    "<svg><script>window.__owned=4</script></svg>",
    '<a href="javascript:window.__owned=5">link</a>',
    "[md link](javascript:window.__owned=6)",
    "[md link](JaVaScRiPt&#58;window.__owned=7)",
    '![md image](x.png" onerror="window.__owned=8)',
    "![md image](javascript:window.__owned=9)",
    "[data link](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX19vd25lZD0xMDwvc2NyaXB0Pg==)",
    '<iframe src="data:text/html,<script>parent.__owned=11</script>"></iframe>',
    '<iframe srcdoc="<script>parent.__owned=12</script>"></iframe>',
    '<details open ontoggle="window.__owned=13">x</details>',
    '<input autofocus onfocus="window.__owned=14">',
    "<math><mtext><table><mglyph><style><img src=x onerror=window.__owned=15></style></mglyph>"
    "</table></mtext></math>",
    '<object data="javascript:window.__owned=16"></object>',
    '<a href="jav&#x09;ascript:window.__owned=17">tab</a>',
    '<form action="javascript:window.__owned=18"><button>go</button></form>',
    '<meta http-equiv="refresh" content="0;url=javascript:window.__owned=19">',
    '"><img src=x onerror=window.__owned=20>',
    "</title><script>window.__owned=21</script>",
    "`code` <b onmouseover=window.__owned=22>bold</b>",
]
CORPUS = "\n\n".join(PAYLOADS)

SAFE_DOM = """(root) => {
    const bad = [];
    for (const el of root.querySelectorAll('*')) {
        const tag = el.tagName.toUpperCase();
        const forbidden = ['SCRIPT', 'IMG', 'IFRAME', 'SVG', 'MATH', 'DETAILS', 'OBJECT', 'EMBED', 'FORM',
                           'META', 'BASE', 'INPUT', 'STYLE'];
        if (forbidden.includes(tag) && !el.closest('[data-trusted]')) bad.push(tag);
        for (const attr of el.attributes) {
            if (/^on/i.test(attr.name) || attr.name === 'srcdoc') bad.push(tag + ' ' + attr.name);
        }
        for (const name of ['href', 'src', 'action', 'formaction', 'data']) {
            const value = (el.getAttribute(name) || '').trim();
            if (value && /^(javascript|data|vbscript):/i.test(value.replace(/[\\s\\u0000-\\u001f]/g, ''))) {
                bad.push(tag + ' ' + name + '=' + value);
            }
        }
    }
    return bad;
}"""

# The admin's own pages hold forms, inputs, filters (details), icons and script files; none may come
# from a document, and none carries an event handler or a script URL.
ADMIN_SAFE_DOM = """(root) => {
    const bad = [];
    for (const el of root.querySelectorAll('*')) {
        const tag = el.tagName.toUpperCase();
        const foreign = ['SVG', 'MATH', 'IFRAME', 'OBJECT', 'EMBED', 'META', 'BASE', 'STYLE'];
        if (foreign.includes(tag)) bad.push(tag);
        if (tag === 'SCRIPT' && !el.src) bad.push('inline script');
        if (tag === 'IMG' && !el.getAttribute('src').startsWith('/static/')) bad.push('img ' + el.src);
        for (const attr of el.attributes) {
            if (/^on/i.test(attr.name) || attr.name === 'srcdoc') bad.push(tag + ' ' + attr.name);
            if (/^(javascript|data|vbscript):/i.test(attr.value.replace(/[\\s\\u0000-\\u001f]/g, ''))) {
                bad.push(tag + ' ' + attr.name + '=' + attr.value);
            }
        }
    }
    return bad;
}"""

MARKUP_MODEL = "<b>bold</b> <i>model</i>"

WATCH = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', (e) => {
    window.__violations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


@pytest.fixture(scope="module")
def scripted_engine():
    with serving(StandInEngine(text=CORPUS, chunk=3)) as url:
        yield url


@pytest.fixture(scope="module")
def site(django_db_setup, django_db_blocker, scripted_engine):
    # A second model whose name is markup (a name cannot hold "=" or ","): model names are shown as text.
    models = f"{settings.INFERENCE_MODEL_NAME}={scripted_engine},{MARKUP_MODEL}={scripted_engine}"
    with running_daphne(scripted_engine, INFERENCE_MODELS=models) as server:
        yield server.url


def assert_strict_csp(headers: dict) -> None:
    policy = headers.get("content-security-policy", "")
    directives = {d.split()[0]: d.split()[1:] for d in policy.split(";") if d.strip()}
    assert directives.get("script-src") == ["'self'"], policy
    assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy, policy
    assert directives.get("object-src") == ["'none'"] and directives.get("frame-ancestors") == ["'none'"]


@pytest.fixture
def watched(browser):
    """A page that records CSP violations and the CSP header of every document it loads."""
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.add_init_script(WATCH)
    page = context.new_page()
    page.documents = []
    page.on(
        "response",
        lambda r: (
            page.documents.append((r.url, r.all_headers())) if r.request.resource_type == "document" else None
        ),
    )
    yield page
    context.close()


def assert_safe_chat(page) -> None:
    """Where text from users and the model is rendered: messages, the list, the title."""
    for root in ("#messages", "#conversation-list", "#chat-title"):
        assert page.eval_on_selector(root, SAFE_DOM) == [], root


def assert_nothing_ran(page) -> None:
    page.evaluate(LOADS_SETTLED)
    assert page.evaluate("window.__owned") is None
    assert page.evaluate("window.__violations") == []
    for url, headers in page.documents:
        assert_strict_csp(headers), url


def test_it_shows_model_names_as_text(watched, site):
    page = watched
    get_user_model().objects.create_user("mod", password="pw-mod-123456")
    log_in(page, site, "mod", "pw-mod-123456")
    page.click("#open-settings")
    assert page.locator("#settings-model option").all_inner_texts() == [
        settings.INFERENCE_MODEL_NAME,
        MARKUP_MODEL,
    ]
    assert page.locator("#settings-dialog b, #settings-dialog i").count() == 0
    assert page.eval_on_selector("#settings-dialog", ADMIN_SAFE_DOM) == []
    assert_nothing_ran(page)


def test_it_runs_no_payload_from_model_output_user_input_titles_or_search(watched, site):
    page = watched
    get_user_model().objects.create_user("eve", password="pw-eve-123456")
    log_in(page, site, "eve", "pw-eve-123456")
    page.wait_for_selector("#prompt")

    # User input, and through its first line the conversation's title; the answer is the corpus.
    page.fill("#prompt", CORPUS)
    page.keyboard.press("Enter")
    # The scripted engine may finish before a check for the generating state could see it.
    page.wait_for_selector(".message.assistant", timeout=30_000)
    page.wait_for_selector(".message.assistant.generating", state="detached", timeout=60_000)
    assert page.locator(".message.user .body").first.inner_text() == CORPUS
    assert_safe_chat(page)
    assert page.locator("#conversation-list .conv-title").first.inner_text().startswith("<script>")
    # The tab's title is the conversation's, as text.
    assert page.evaluate("() => document.title").startswith("<script>")
    assert_nothing_ran(page)

    # Rename to a payload in the sidebar.
    row = page.locator("#conversation-list .conv").first
    row.hover()
    row.locator(".conv-rename").click()
    page.fill(".conv-title-input", PAYLOADS[2])
    with page.expect_response("**/rename"):
        page.keyboard.press("Enter")
    assert row.locator(".conv-title").inner_text() == PAYLOADS[2]

    # Search results are rendered from the store API's JSON.
    page.fill("#search", "owned")
    # A function, not an expression string: the policy forbids eval, which Playwright uses for strings.
    page.wait_for_function(
        "() => document.querySelector('#conversation-list').classList.contains('searching')"
    )
    assert page.locator("#conversation-list .conv-title").first.inner_text() == PAYLOADS[2]
    # The search's snippet of the corpus, its match marked: text, never markup.
    assert page.locator("#conversation-list .conv-snippet mark").count() >= 1
    assert_safe_chat(page)
    assert_nothing_ran(page)

    # Reloaded: the stored conversation is rendered from the page's JSON data and the template.
    conversation_id = row.get_attribute("data-id")
    page.goto(f"{site}/c/{conversation_id}/")
    page.wait_for_selector(".message.assistant .body")
    assert page.title() == PAYLOADS[2] + " · Chat"
    assert page.locator("#chat-title").inner_text() == PAYLOADS[2]
    answer = page.locator(".message.assistant .body").first.inner_text()
    assert "window.__owned=1" in answer  # the script's text is shown as text
    assert_safe_chat(page)
    assert_nothing_ran(page)
    assert len(page.documents) >= 3


def test_it_shows_the_names_of_the_documents_a_question_was_sent_with_as_text(watched, site):
    page = watched
    user = get_user_model().objects.create_user("docs", password="pw-docs-123456")
    conversation = services.conversation_create(user=user)
    for payload in PAYLOADS[:4]:
        ConversationDocument.objects.create(conversation=conversation, name=payload, text="x", tokens=1)
    turn = turns.chat_turn_start(user=user, conversation_id=conversation.pk, content="Read them.")
    turns.message_finish(message_id=turn.assistant_message_id, content="Done.", status="complete")
    log_in(page, site, "docs", "pw-docs-123456", f"/accounts/login/?next=/c/{conversation.pk}/")
    shown = page.locator(".message.user .turn-documents li")
    expect(shown).to_have_count(4)
    assert [name.strip() for name in shown.all_inner_texts()] == PAYLOADS[:4]
    assert_safe_chat(page)
    assert_nothing_ran(page)


def test_it_runs_no_payload_from_documents_in_the_admins_job_views(watched, site):
    page = watched
    staff = get_user_model().objects.create_superuser("jobstaff", password="pw-jobstaff-1234")
    job = job_services.job_create(
        owner=staff,
        documents=[DocumentInput(payload, "Some text.") for payload in PAYLOADS[:12]],
        name=PAYLOADS[1],
        start=False,
    )
    for document, payload in zip(job.documents.order_by("pk"), reversed(PAYLOADS), strict=False):
        if document.pk % 2:
            Document.objects.filter(pk=document.pk).update(status="failed", error=payload)
        else:
            Document.objects.filter(pk=document.pk).update(status="done")
            Result.objects.create(
                job=job,
                document=document,
                summary=payload,
                document_tokens=1,
                prompt_tokens=1,
                completion_tokens=1,
            )
    Job.objects.filter(pk=job.pk).update(instruction=PAYLOADS[4])
    log_in(page, site, "jobstaff", "pw-jobstaff-1234", "/admin/login/")
    for path in ("/admin/jobs/job/", f"/admin/jobs/job/{job.pk}/change/", "/admin/jobs/job/add/"):
        page.goto(site + path)
        page.wait_for_load_state("networkidle")
        assert page.eval_on_selector("#content", ADMIN_SAFE_DOM) == [], path
    page.goto(f"{site}/admin/jobs/job/{job.pk}/change/")
    assert PAYLOADS[0] in page.locator("#content").inner_text()
    page.wait_for_selector("[data-job-progress][data-status]", state="attached")  # a poll has rendered
    assert_nothing_ran(page)

    # The staff dashboard, the admin index and the login form send the policy too.
    for path in ("/monitoring/", "/admin/", "/"):
        page.goto(site + path)
        page.wait_for_load_state("networkidle")
    assert_nothing_ran(page)
    paths = {url.removeprefix(site).split("?")[0] for url, _ in page.documents}
    assert {"/admin/login/", "/admin/jobs/job/", "/monitoring/", "/admin/", "/"} <= paths


def test_it_runs_no_payload_from_shared_pages_key_names_usage_or_the_record_of_reads(watched, site):
    page = watched
    root = get_user_model().objects.create_superuser("keyroot", password="pw-keyroot-1234")
    for payload in PAYLOADS[:8]:
        token_issue(user=root, scopes=["openai"], name=payload[:100])
    # Usernames pass Django's validator in every form; one made straight in the database may not.
    raw = get_user_model().objects.create(username=PAYLOADS[3][:150])
    usage_record(user_id=raw.pk, source="api", prompt_tokens=10**6, cached_tokens=0, completion_tokens=1)
    usage_record(user_id=root.pk, source="chat", prompt_tokens=5, cached_tokens=1, completion_tokens=2)
    conversation_read_record(
        reader=root, owner_id=raw.pk, conversation_id=1, through="store_detail", detail=PAYLOADS[5]
    )
    turn = turns.chat_turn_start(user=root, conversation_id=None, content=PAYLOADS[6])
    turns.message_finish(message_id=turn.assistant_message_id, content=CORPUS, status="complete")
    link = services.conversation_share(user=root, conversation_id=turn.conversation_id)
    log_in(page, site, "keyroot", "pw-keyroot-1234", "/admin/login/")
    for path, root_selector in [
        (f"/s/{link.token}/", "#messages"),
        ("/keys/", "main"),
        ("/usage/", "main"),
        ("/monitoring/", "#dashboard"),
        ("/admin/audit/conversationread/", "#content"),
        ("/admin/usage/usageday/", "#content"),
    ]:
        page.goto(site + path)
        page.wait_for_load_state("networkidle")
        checker = SAFE_DOM if path == "/usage/" or path.startswith("/s/") else ADMIN_SAFE_DOM
        assert page.eval_on_selector(root_selector, checker) == [], path
    page.goto(f"{site}/s/{link.token}/")
    page.wait_for_selector("#messages[data-rendered='2']", state="attached")  # the payloads were drawn
    assert PAYLOADS[6] in page.locator("#messages .user").inner_text()
    page.goto(site + "/keys/")
    assert PAYLOADS[0][:100] in page.locator("#keys").inner_text()
    page.goto(site + "/monitoring/")
    assert PAYLOADS[3][:150] in page.locator("#top-users").inner_text()
    assert_nothing_ran(page)
