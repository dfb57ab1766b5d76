"""The chat page's peripheral modules in Chromium: importing one does nothing (no DOM lookup, listener,
timer, request or DOM change) until chat.js mounts it on the root it works in; and a sidebar row's title
uses the row's width while the row's buttons are hidden, leaving room for them once they show."""

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from conversations import services
from tests.support.browser import log_in

pytestmark = pytest.mark.django_db(transaction=True)

# Each module chat.js mounts, and the function it mounts it with.
MOUNTED = {
    "sidebar.js": "mountSidebar",
    "settings.js": "mountSettings",
    "documents.js": "mountDocuments",
    "conversation-menu.js": "mountConversationMenu",
    "shortcuts.js": "mountShortcuts",
    "collections.js": "mountCollections",
    "collection-hash.js": "mountCollectionHash",
}

# Imports `url` in a page with none of the chat's DOM, recording what the import does to the page.
IMPORT_WATCHED = """
async (url) => {
  const before = document.documentElement.outerHTML;
  const globals = Object.getOwnPropertyNames(window).sort().join();
  const calls = [];
  const restore = [];
  const watch = (owner, name) => {
    const original = owner[name];
    if (typeof original !== "function") return;
    owner[name] = function (...args) {
      calls.push(name + "(" + args.filter((a) => typeof a === "string").join(", ") + ")");
      return original.apply(this, args);
    };
    restore.push(() => { owner[name] = original; });
  };
  watch(EventTarget.prototype, "addEventListener");
  watch(EventTarget.prototype, "dispatchEvent");
  for (const owner of [Document.prototype, Element.prototype, DocumentFragment.prototype]) {
    for (const name of ["getElementById", "querySelector", "querySelectorAll", "getElementsByClassName",
                        "getElementsByTagName", "getElementsByName"]) {
      watch(owner, name);
    }
  }
  for (const name of ["setTimeout", "setInterval", "requestAnimationFrame", "queueMicrotask", "fetch"]) {
    watch(window, name);
  }
  watch(History.prototype, "pushState");
  watch(History.prototype, "replaceState");
  let error = null;
  let exported = {};
  try {
    const module = await import(url);
    exported = Object.fromEntries(Object.entries(module).map(([name, value]) => [name, typeof value]));
  } catch (failure) {
    error = String(failure);
  } finally {
    for (const undo of restore.reverse()) undo();
  }
  await new Promise((done) => setTimeout(done, 50)); // anything the import left for later has run
  return {
    error,
    calls,
    exported,
    domChanged: document.documentElement.outerHTML !== before,
    globalsChanged: Object.getOwnPropertyNames(window).sort().join() !== globals,
  };
}
"""


@pytest.mark.parametrize("module", list(MOUNTED))
def test_importing_a_peripheral_module_changes_nothing(page, product_server, module):
    page.goto(product_server + "/accounts/login/")  # a page without the chat's DOM
    result = page.evaluate(IMPORT_WATCHED, f"/static/frontend/{module}")
    assert result["error"] is None, result["error"]
    assert result["calls"] == [], f"{module} does this on import: {result['calls']}"
    assert not result["domChanged"], f"importing {module} changed the page"
    assert not result["globalsChanged"], f"importing {module} added a global"
    assert result["exported"].get(MOUNTED[module]) == "function", result["exported"]


# The sidebar mounted on a root outside the document: it finds its elements in that root alone.
MOUNT_DETACHED_SIDEBAR = """
async () => {
  const { mountSidebar } = await import("/static/frontend/sidebar.js");
  const before = document.documentElement.outerHTML;
  const root = document.createElement("div");
  root.innerHTML = '<aside id="sidebar"><input type="search" id="search"><nav id="conversation-list"></nav>'
    + '<p id="sidebar-status"></p></aside><main class="chat"><button id="toggle-sidebar"></button></main>';
  const now = new Date().toISOString();
  const sidebar = mountSidebar(root, [
    { id: 1, title: "First", updated_at: now, pinned: false },
    { id: 2, title: "Second", updated_at: now, pinned: true },
  ]);
  sidebar.touch(3, "Third");
  sidebar.setActive(3);
  root.querySelector("#toggle-sidebar").click();
  return {
    titles: [...root.querySelectorAll(".conv-title")].map((t) => t.textContent),
    active: root.querySelector(".conv.active").dataset.id,
    open: root.querySelector("#sidebar").classList.contains("open"),
    domChanged: document.documentElement.outerHTML !== before,
  };
}
"""


def test_the_sidebar_works_in_the_root_it_is_given(page, product_server):
    page.goto(product_server + "/accounts/login/")
    result = page.evaluate(MOUNT_DETACHED_SIDEBAR)
    assert result["titles"] == ["Second", "Third", "First"]  # pinned first, then the newest activity
    assert result["active"] == "3" and result["open"] and not result["domChanged"], result


# Where a sidebar row's title ends, how wide it is and how many of its characters show; where the
# row's buttons begin and whether they show.
MEASURE_ROW = """
(row) => {
  const link = row.querySelector(".conv-link");
  const title = row.querySelector(".conv-title");
  const actions = row.querySelector(".conv-actions");
  const box = title.getBoundingClientRect();
  const style = getComputedStyle(link);
  const padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
  const text = title.firstChild;
  const range = document.createRange();
  let visible = 0;
  for (let i = 0; i < text.length; i++) {
    range.setStart(text, i);
    range.setEnd(text, i + 1);
    if (range.getBoundingClientRect().right <= box.right + 0.5) visible++;
  }
  return {
    rowWidth: row.getBoundingClientRect().width,
    rowHeight: row.getBoundingClientRect().height,
    padding,
    titleWidth: box.width,
    titleRight: box.right,
    visible,
    charWidth: title.scrollWidth / text.length,
    actionsLeft: actions.getBoundingClientRect().left,
    actionsShown: getComputedStyle(actions).opacity === "1",
  };
}
"""

LONG_TITLE = "Planning a two-week walking holiday through the hills of the Scottish Highlands in May"


def test_a_sidebar_title_uses_the_row_until_its_buttons_show(page, product_server):
    user = get_user_model().objects.create_user("wren", password="pw-wren-123456")
    long = services.conversation_create(user=user)
    services.conversation_rename(user=user, conversation_id=long.pk, title=LONG_TITLE)
    other = services.conversation_create(user=user)
    services.conversation_rename(user=user, conversation_id=other.pk, title="Short")
    log_in(page, product_server, "wren", "pw-wren-123456")
    page.mouse.move(1150, 780)  # away from the sidebar: no row is hovered
    row = page.locator(f'.conv[data-id="{long.pk}"]')
    expect(row).to_have_count(1)
    expect(row.locator(".conv-title")).to_have_attribute("title", LONG_TITLE)

    # Buttons hidden (not hovered, not focused, not the current one): the title has the row's width.
    hidden = row.evaluate(MEASURE_ROW)
    assert not hidden["actionsShown"]
    assert hidden["titleWidth"] >= hidden["rowWidth"] - hidden["padding"] - 2, hidden
    fits = (hidden["rowWidth"] - hidden["padding"]) / hidden["charWidth"]
    assert hidden["visible"] > 17 and hidden["visible"] >= fits - 3, hidden

    # Hovered: the buttons show beside the title, which makes room for them; the row keeps its height.
    row.hover()
    expect(row.locator(".conv-actions")).to_have_css("opacity", "1")
    hovered = row.evaluate(MEASURE_ROW)
    assert hovered["titleRight"] <= hovered["actionsLeft"] + 0.5, hovered
    assert hovered["titleWidth"] < hidden["titleWidth"], hovered
    assert hovered["rowHeight"] == hidden["rowHeight"], hovered
    # The hovered buttons work where they are drawn.
    row.locator(".conv-rename").click()
    expect(row.locator(".conv-title-input")).to_be_focused()
    page.keyboard.press("Escape")
    expect(row.locator(".conv-rename")).to_be_focused()

    # The keyboard in the row (the mouse away): the buttons show, the title makes room.
    page.mouse.move(1150, 780)
    focused = row.evaluate(MEASURE_ROW)
    assert focused["actionsShown"] and focused["titleRight"] <= focused["actionsLeft"] + 0.5, focused
    page.locator("#search").focus()
    expect(row.locator(".conv-actions")).to_have_css("opacity", "0")
    assert row.evaluate(MEASURE_ROW)["titleWidth"] == hidden["titleWidth"]

    # The current conversation's row shows its buttons, the title beside them.
    page.goto(f"{product_server}/c/{long.pk}/")
    page.mouse.move(1150, 780)
    expect(row).to_have_class("conv active")
    current = row.evaluate(MEASURE_ROW)
    assert current["actionsShown"] and current["titleRight"] <= current["actionsLeft"] + 0.5, current
    # Another row, meanwhile, still has its full width.
    short = page.locator(f'.conv[data-id="{other.pk}"]').evaluate(MEASURE_ROW)
    assert short["titleWidth"] >= short["rowWidth"] - short["padding"] - 2, short
