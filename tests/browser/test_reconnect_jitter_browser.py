"""The chat page's reconnects spread (static/frontend/connection.js, full jitter): sockets that one
restart cut together come back over the backoff window, not in lockstep. Chromium runs the page's
own module; its WebSocket is a stand-in that opens and is then cut, as a web process's restart cuts it."""

import statistics

import pytest

CONNECTIONS = 200

# Every Connection's sockets open, then all are cut at one moment; each reconnect's time is kept.
CUT_TOGETHER = """
async ([count]) => {
  const { Connection } = await import("/static/frontend/connection.js");
  const sockets = [], reopened = [];
  let cutAt = null;
  class CutSocket extends EventTarget {
    static OPEN = 1;
    constructor() {
      super();
      this.readyState = 0;
      if (cutAt !== null) { reopened.push(performance.now() - cutAt); return; }
      sockets.push(this);
      setTimeout(() => { this.readyState = 1; this.dispatchEvent(new Event("open")); }, 0);
    }
    send() {}
    close() {}
  }
  window.WebSocket = CutSocket;
  const quiet = { onOpen() {}, onFrame() {}, onLost() {}, onLoggedOut() {} };
  for (let i = 0; i < count; i++) new Connection("/ws/chat/", quiet).open();
  await new Promise((done) => setTimeout(done, 100));
  cutAt = performance.now();
  for (const socket of sockets) {
    socket.readyState = 3;
    socket.dispatchEvent(new CloseEvent("close", { code: 1006 }));
  }
  await new Promise((done) => setTimeout(done, 1500));
  return { opened: sockets.length, reopened };
}
"""


@pytest.mark.django_db(transaction=True)
def test_sockets_cut_together_reconnect_spread_over_the_backoff_window(page, product_server):
    page.goto(product_server + "/accounts/login/")
    result = page.evaluate(CUT_TOGETHER, [CONNECTIONS])
    assert result["opened"] == CONNECTIONS
    delays = sorted(result["reopened"])
    assert len(delays) == CONNECTIONS, "every cut socket tries again within its first bound"
    # Full jitter over the first bound (500 ms): spread across it, not one instant for all.
    assert delays[0] < 100 and delays[-1] > 400, delays
    assert statistics.pstdev(delays) > 80, "reconnects in lockstep"
    quarters = [sum(1 for d in delays if q * 125 <= d < (q + 1) * 125) for q in range(4)]
    assert min(quarters) >= CONNECTIONS // 8, quarters
