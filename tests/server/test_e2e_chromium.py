"""The chat page at / in a real browser: headless Chromium (Debian's `chromium`) loads it from
`sluice serve`, a prompt is typed and sent with Enter, the reply streams in, and the token_sha the
page shows is the one the API gives for the same request. Screenshots of the chat and the Monitor
tab are kept in $SLUICE_BINARY_DIR/test-output/.

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages
separated by NUL bytes on fds 3 and 4), so no WebDriver or websocket package is needed.
"""
import base64
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time

import pytest

# A prompt that the small models answer at length (36-48 tokens), so even a model decoding
# 1000 tokens/s streams for long enough to be seen part-way.
PROMPT = "List the numbers 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and continue."
MAX_TOKENS = 48


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    # Debian's package, installed by tools/dev.sh; CI has it, so a missing browser fails there.
    pytest.fail("chromium is not installed: apt-get install chromium")


class DevTools:
    """A headless Chromium and a DevTools protocol session with one page."""

    def __init__(self, log_path, width: int = 1200, height: int = 900):
        self.profile = tempfile.mkdtemp(prefix="sluice-chromium-")
        self.log_path = log_path
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The browser reads commands on fd 3 and writes replies on fd 4; bash moves our pipe
        # ends there (no preexec_fn, which is unsafe with threads; not dash, which only
        # redirects single-digit descriptors).
        args = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--no-proxy-server",
                "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}", "about:blank"]
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                ["bash", "-c", f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w}', "bash", *args],
                pass_fds=(to_browser_r, from_browser_w), stdout=subprocess.DEVNULL, stderr=log)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._lock = threading.Lock()
        self._waiting: dict[int, queue.Queue] = {}
        self.events: queue.Queue = queue.Queue()
        self.exceptions: list = []     # Runtime.exceptionThrown: uncaught errors in the page
        self.console_errors: list = []  # console.error and failed loads
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()
        self.session = None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _read_loop(self):
        buf = b""
        while True:
            try:
                data = os.read(self._from_browser, 65536)
            except OSError:
                data = b""
            if not data:
                break
            buf += data
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._lock:
                        q = self._waiting.pop(msg["id"], None)
                    if q:
                        q.put(msg)
                else:
                    self._on_event(msg)
        with self._lock:
            for q in self._waiting.values():
                q.put({"error": {"message": "the browser closed its pipe"}})

    def _on_event(self, msg):
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.exceptions.append(params["exceptionDetails"])
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.console_errors.append(params)
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.console_errors.append(params["entry"])
        self.events.put(msg)

    def call(self, method: str, timeout: float = 60, **params):
        with self._lock:
            self._next_id += 1
            mid = self._next_id
            q = queue.Queue()
            self._waiting[mid] = q
        msg = {"id": mid, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        try:
            os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        except BrokenPipeError:
            raise AssertionError(f"DevTools {method}: the browser has exited ({self.proc.poll()}):\n"
                                 f"{self.log_tail()}") from None
        try:
            reply = q.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"DevTools {method}: no reply within {timeout} s") from None
        if "error" in reply:
            raise AssertionError(f"DevTools {method}: {reply['error']}")
        return reply["result"]

    def log_tail(self, n: int = 30) -> str:
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def eval(self, expression: str):
        """The value of a JavaScript expression in the page (awaited when it is a promise)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"page script failed: {expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"timed out after {timeout} s waiting for {what} ({expression})")

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except AssertionError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


# The last assistant message of the page, as the test reads it.
LAST_REPLY = """(() => {
  const all = document.querySelectorAll('#log article.msg.assistant');
  const a = all[all.length - 1];
  if (!a) return null;
  return {state: a.dataset.state, chunks: Number(a.dataset.chunks || 0),
          text: a.querySelector('.content').textContent, sha: a.dataset.tokenSha || null,
          meta: a.querySelector('.meta').textContent, error: (a.querySelector('.error') || {}).textContent || null};
})()"""


def drive_chat_page(base_url: str, out_dir, model_reply=None):
    """Loads the page, sends PROMPT greedily, returns what the page showed while and after
    streaming. model_reply(body) -> (text, token_sha) gives the API's answer to compare with."""
    browser = DevTools(out_dir / "chromium.log")
    try:
        browser.call("Page.navigate", url=base_url + "/")
        browser.wait_for("document.readyState === 'complete'", 30, "the page to load")
        browser.wait_for("document.getElementById('model-name').textContent !== '…'", 30,
                         "the model name from /v1/models")
        browser.wait_for("document.getElementById('server-state').dataset.ready === 'true'", 30,
                         "the page to see /ready")
        # Greedy and short, so the API call below must give the same tokens.
        browser.eval(f"""(() => {{
            const set = (id, v) => {{ const e = document.getElementById(id); e.value = v;
                                      e.dispatchEvent(new Event('input', {{bubbles: true}})); }};
            set('temperature', '0'); set('seed', '7'); set('max-tokens', '{MAX_TOKENS}');
            document.getElementById('prompt').focus(); return true; }})()""")
        # Every text the reply shows while it streams, recorded by the page itself (a
        # MutationObserver), so a fast model is seen as well as a slow one.
        browser.eval("""(() => {
            window.__partials = [];
            new MutationObserver(() => {
              const all = document.querySelectorAll('#log article.msg.assistant');
              const a = all[all.length - 1];
              if (a && a.dataset.state === 'streaming') window.__partials.push(a.querySelector('.content').textContent);
            }).observe(document.getElementById('log'), {subtree: true, childList: true, characterData: true});
            return true; })()""")
        # The reply trickles in at 4 KB/s (an SSE event is ~300 bytes), so that a model decoding
        # 1000 tokens/s is seen part-way as well as a slow one; the page loaded unthrottled.
        browser.call("Network.enable")
        browser.call("Network.emulateNetworkConditions", offline=False, latency=0,
                     downloadThroughput=4096, uploadThroughput=-1)
        # Typed and sent the way a person does: text into the focused box, then Enter.
        browser.call("Input.insertText", text=PROMPT)
        for kind in ("keyDown", "keyUp"):
            browser.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                         windowsVirtualKeyCode=13, nativeVirtualKeyCode=13)
        deadline = time.monotonic() + 120
        reply = None
        while time.monotonic() < deadline:
            reply = browser.eval(LAST_REPLY)
            if reply and reply["state"] != "streaming":
                break
            time.sleep(0.05)
        partials = browser.eval("window.__partials")
        browser.call("Network.emulateNetworkConditions", offline=False, latency=0,
                     downloadThroughput=-1, uploadThroughput=-1)
        browser.screenshot(out_dir / "chat_page.png")
        assert reply is not None, "no assistant message appeared"
        assert reply["state"] == "done", f"the reply ended as {reply['state']}: {reply['error']}"

        # The Monitor tab reads /metrics.
        browser.eval("document.getElementById('tab-monitor').click(), true")
        browser.wait_for("document.getElementById('metrics-state').textContent.startsWith('Updated')", 30,
                         "the Monitor tab to read /metrics")
        monitor = browser.eval("""(() => ({
            rows: document.querySelectorAll('#metrics-table tbody tr').length,
            toks: document.getElementById('m-toks').textContent,
            requests: document.getElementById('m-requests').textContent}))()""")
        browser.eval("document.querySelector('#panel-monitor details').open = true, true")
        browser.screenshot(out_dir / "monitor_tab.png")
        return {"reply": reply, "partials": partials, "monitor": monitor,
                "exceptions": list(browser.exceptions), "console_errors": list(browser.console_errors)}
    finally:
        browser.close()


def test_chat_page_streams_a_reply_with_the_api_token_sha(sluice_server, e2e_output_dir):
    seen = drive_chat_page(sluice_server.base_url, e2e_output_dir)
    reply = seen["reply"]
    assert not seen["exceptions"], f"uncaught errors in the page: {seen['exceptions']}"
    assert not seen["console_errors"], f"console errors in the page: {seen['console_errors']}"
    assert reply["text"].strip(), "the reply is empty"
    # Streamed: while the reply was streaming the page showed part of it, a beginning of the
    # final text (a page that waited for the whole reply would show nothing, then all of it).
    partial = sorted({t for t in seen["partials"] if t and len(t) < len(reply["text"])}, key=len)
    assert partial, f"no partial text shown while streaming: {seen['partials'][:20]}"
    assert all(reply["text"].startswith(t) for t in partial), partial
    assert reply["chunks"] >= 3, reply

    # The same request through the API, not streamed: the page must show the same tokens.
    status, body = sluice_server.post_json("/v1/chat/completions", {
        "model": sluice_server.model_id(), "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0, "seed": 7, "max_tokens": MAX_TOKENS})
    assert status == 200, body
    assert reply["sha"] == body["sluice"]["token_sha"], (reply, body["sluice"])
    assert reply["text"] == body["choices"][0]["message"]["content"]
    assert body["sluice"]["token_sha"] in reply["meta"], "the token_sha is not shown under the reply"
    assert "acceptance" in reply["meta"]

    assert seen["monitor"]["rows"] > 0, "the Monitor tab shows no metric"
    assert (e2e_output_dir / "chat_page.png").stat().st_size > 10_000
    assert (e2e_output_dir / "monitor_tab.png").stat().st_size > 10_000
