"""A headless Chromium driven over the DevTools protocol on a pipe, for the report tests.

No driver binary and no Python dependency: Chromium's ``--remote-debugging-pipe`` reads
commands on fd 3 and writes replies and events on fd 4, each a JSON message ended by a NUL
byte. The tests need only a few commands: open a page, evaluate a script, click at a point
(a real mouse event), take a screenshot, and the console errors the page raised.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
VIEWPORT = (1400, 900)


def find_browser() -> str | None:
    """The first Chromium-family browser on PATH (None: the browser tests skip)."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless browser with one page; use as a context manager."""

    def __init__(self, binary: str, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._profile = tempfile.TemporaryDirectory(prefix="fp-chromium-")
        child_in, self._write = os.pipe()
        self._read, child_out = os.pipe()
        # bash puts the child's ends on fds 3 and 4, then becomes the browser (no preexec_fn:
        # it is unsafe in a process with threads, as pytest-xdist workers are; dash takes
        # single-digit fds only)
        wire = f'exec "$0" "$@" 3<&{child_in} 4>&{child_out}'
        shell = shutil.which("bash") or "/bin/bash"
        self._proc = subprocess.Popen(
            [shell, "-c", wire, binary, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--disable-extensions", "--disable-background-networking",
             "--mute-audio", f"--user-data-dir={self._profile.name}",
             "--remote-debugging-pipe", f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(child_in, child_out),
        )  # fmt: skip
        os.close(child_in)
        os.close(child_out)
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        self.events: list[dict[str, Any]] = []

    # -- protocol ------------------------------------------------------------------------
    def send(self, method: str, params: dict[str, Any] | None = None, *, page: bool = True):
        """Send one command (to the page's session unless ``page`` is False); its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if page and self._session:
            message["sessionId"] = self._session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str) -> dict[str, Any]:
        """The next event named ``method`` (earlier events are kept in :attr:`events`)."""
        while True:
            message = self._receive()
            self.events.append(message)
            if message.get("method") == method:
                return message.get("params", {})

    def _receive(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._read], [], [], max(left, 0))
            if not ready:
                raise BrowserError(f"no reply from the browser in {self.timeout_s} s")
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise BrowserError("the browser closed its pipe")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(raw)

    # -- page ----------------------------------------------------------------------------
    def open(self, path: Path) -> float:
        """Load ``path`` in a fresh page; the seconds until its load event. Events (and so
        console errors) are counted from here."""
        self.events = []
        target = self.send("Target.createTarget", {"url": "about:blank"}, page=False)
        attached = self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, page=False
        )
        self._session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        width, height = VIEWPORT
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        began = time.perf_counter()
        self.send("Page.navigate", {"url": path.resolve().as_uri()})
        self.wait_for("Page.loadEventFired")
        return time.perf_counter() - began

    def evaluate(self, expression: str) -> Any:
        """The value of a script run in the page (an exception in it fails the test)."""
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"script failed: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real left click (mouse pressed and released) in the middle of ``selector``."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1},
            )

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def console_errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls and error log entries seen so far."""
        errors = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                errors.append(params["exceptionDetails"].get("text", "exception"))
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                errors.append(" ".join(str(a.get("value")) for a in params.get("args", [])))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                errors.append(params["entry"].get("text", "log error"))
        return errors

    # -- lifetime ------------------------------------------------------------------------
    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(BrowserError, OSError):
            self.send("Browser.close", page=False)
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._write)
        os.close(self._read)
        self._profile.cleanup()
