"""Screenshots of the built docs site with headless Chromium, and a check that its navigation and search work.

Builds the site (`mkdocs build --strict` into build/site), serves it on a loopback port (the search runs in a web
worker, which needs http://, not file://) and drives headless Chromium over the DevTools protocol:

1. the home page            -> docs/img/home.png
2. a click on "LangGraph and LangChain" in the navigation; the page it opens -> docs/img/langgraph.png
3. a search for "BudgetMiddleware"; waits for the results -> docs/img/search.png

Fails when the click does not open the page or the search finds nothing. Not run by `make test`; Chromium comes
from `make services`. Needs `websockets` (installed with the test extra).
    .venv/bin/python scripts/screenshot_docs.py [--out docs/img] [--no-build]
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "build" / "site"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
WIDTH, HEIGHT = 1440, 1000


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("no chromium on PATH: run `make services` (scripts/ensure_services.sh installs it)")


class Page:
    """One Chromium tab over the DevTools protocol (only what this script needs)."""

    def __init__(self, ws_url: str) -> None:
        self.ws = connect(ws_url, max_size=None)
        self.ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self.ids)
        self.ws.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == number:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def eval(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, what: str, seconds: float = 30) -> Any:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.2)
        raise SystemExit(f"timed out waiting for {what}")

    def shot(self, path: Path) -> None:
        time.sleep(0.5)  # let fonts and the last layout settle
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        print(f"{path.relative_to(ROOT)}: {self.eval('location.href')}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--no-build", action="store_true", help="use build/site as it is")
    args = parser.parse_args()
    if not args.no_build:
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict"], cwd=ROOT, env=env, check=True)
    if not (SITE / "search" / "search_index.json").is_file():
        raise SystemExit(f"{SITE} has no search index: build the site first")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(SITE)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        browser = subprocess.Popen([chromium(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                    f"--window-size={WIDTH},{HEIGHT}", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            for _ in range(300):
                if port_file.is_file() and port_file.read_text().strip():
                    break
                time.sleep(0.1)
            port = port_file.read_text().split()[0]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
                targets = json.load(answer)
            page = Page(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
            page.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1,
                      mobile=False)
            ready = "document.readyState === 'complete'"

            page.call("Page.navigate", url=base)
            page.wait_for(f"{ready} && location.href === {json.dumps(base)}", "the home page")
            page.shot(args.out / "home.png")

            page.eval("[...document.querySelectorAll('nav a')].find(a => a.textContent.trim() === "
                      "'LangGraph and LangChain').click()")
            page.wait_for(f"{ready} && location.pathname.endsWith('/integrations/langgraph/') && "
                          "document.querySelector('h1').textContent.includes('LangGraph')",
                          "the LangGraph page opened from the navigation")
            page.shot(args.out / "langgraph.png")

            page.call("Page.navigate", url=base + "?q=BudgetMiddleware")
            found = page.wait_for("document.querySelectorAll('.md-search-result__item').length",
                                  "search results for BudgetMiddleware")
            meta = page.eval("document.querySelector('.md-search-result__meta').textContent")
            page.shot(args.out / "search.png")
            print(f"search for BudgetMiddleware: {found} results ({meta})")
            page.ws.close()
        finally:
            browser.terminate()
            browser.wait(timeout=30)
            server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
