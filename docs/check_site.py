"""Open every page of the built documentation site in headless Chromium, as a reader's browser would.

    mkdocs build --strict -d site        # with JAXSYS_SITE_URL=http://localhost/jaxsys/ (see below)
    python docs/check_site.py site [--screenshots docs/screenshots]

The site is served over HTTP under a sub-path (``/jaxsys/``, as on a project page), with a missing path
answered by the site's 404 page (as GitHub Pages and most static hosts do). Each page is loaded in
Chromium (Debian's ``chromium`` package, driven through the DevTools protocol over a pipe: no
browser-automation library needed), and these are problems:

- a JavaScript exception, or an error on the console;
- a resource the page asks for that does not load (stylesheets, scripts, images), or answers >= 400;
- an image that did not render (``naturalWidth == 0``), plots in notebooks included;
- on the 404 page (opened at a missing path two levels deep), its own stylesheet not applied.

Build the site with ``JAXSYS_SITE_URL`` ending in ``/jaxsys/`` (mkdocs writes the 404 page's links
absolute, from ``site_url``'s path), or the 404 check reports its stylesheet missing. With
``--screenshots DIR`` it saves the home page, a notebook and an API page as PNG (for the README).
Used by tests/test_docs.py when Chromium is installed; the exit status is the number of problems.
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import json
import os
import pathlib
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any


PREFIX = "/jaxsys/"
# name: (page, script run before the picture: the notebook scrolled to its first plot)
SCREENSHOTS = {
    "home.png": ("", ""),
    "notebook.png": (
        "notebooks/07_hybrid_systems/",
        "document.images[0].scrollIntoView({block: 'center'})",
    ),
    "api.png": ("api/simulation/", ""),
}


def find_chromium() -> str | None:
    """The Chromium (or Chrome) executable: ``$JAXSYS_CHROMIUM``, else the first on ``PATH``."""
    given = os.environ.get("JAXSYS_CHROMIUM")
    if given:
        return given
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the site under `PREFIX`; a missing path gets the site's 404 page with status 404."""

    def __init__(self, *args: Any, site: str, **kwargs: Any) -> None:
        self._site = site
        super().__init__(*args, directory=site, **kwargs)

    def translate_path(self, path: str) -> str:
        path = path.split("?", 1)[0].split("#", 1)[0]
        if not path.startswith(PREFIX):
            return os.path.join(self._site, "__outside_the_site__", "missing")
        return super().translate_path("/" + path[len(PREFIX) :])

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        page = os.path.join(self._site, "404.html")
        if code != 404 or not os.path.exists(page):
            super().send_error(code, message, explain)
            return
        body = pathlib.Path(page).read_bytes()
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class _Browser:
    """Headless Chromium driven through the DevTools protocol over a pipe (``--remote-debugging-pipe``:
    JSON messages separated by NUL bytes, commands on fd 3, answers and events on fd 4)."""

    def __init__(self, executable: str, width: int = 1280, height: int = 900) -> None:
        self._profile = tempfile.mkdtemp(prefix="jaxsys_chromium_")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        # (the browser reads fd 3 and writes fd 4: a fresh interpreter puts the pipe's ends there and
        # execs it, so that no Python code runs between fork and exec in this multithreaded (JAX)
        # process; dash's redirections take single-digit fds only)
        place = (
            "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
            "os.execv(sys.argv[3], sys.argv[3:])"
        )
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                place,
                str(to_browser_r),
                str(from_browser_w),
                executable,
                "--headless=new",
                "--remote-debugging-pipe",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            pass_fds=(to_browser_r, from_browser_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._answers: dict[int, queue.Queue[dict[str, Any]]] = {}
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            session=True,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _read(self) -> None:
        buffer = b""
        while True:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message and message["id"] in self._answers:
                    self._answers[message["id"]].put(message)
                else:
                    self.events.put(message)

    def call(self, method: str, session: bool = False, timeout: float = 60.0, **params: Any) -> dict[str, Any]:
        """Send one DevTools command (to the page when ``session``) and wait for its answer."""
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            self._answers[ident] = queue.Queue()
        message: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        try:
            answer = self._answers[ident].get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"Chromium did not answer {method} within {timeout} s") from None
        finally:
            self._answers.pop(ident, None)
        if "error" in answer:
            raise RuntimeError(f"Chromium: {method}: {answer['error']}")
        return answer.get("result", {})

    def drain(self) -> list[dict[str, Any]]:
        out = []
        while True:
            try:
                out.append(self.events.get_nowait())
            except queue.Empty:
                return out

    def open(self, url: str, timeout: float = 30.0, settle: float = 0.5) -> list[dict[str, Any]]:
        """Load ``url``; returns the page's events from the navigation until it settled."""
        self.drain()
        self.call("Page.navigate", session=True, url=url)
        events: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        loaded = False
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.1)
            except queue.Empty:
                continue
            events.append(event)
            if event.get("method") == "Page.loadEventFired":
                loaded = True
                break
        if not loaded:
            raise TimeoutError(f"{url} did not finish loading within {timeout} s")
        time.sleep(settle)  # (scripts that run after the load event: search, tabs, MathJax)
        return events + self.drain()

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def screenshot(self, path: pathlib.Path) -> None:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5.0)
        except (TimeoutError, RuntimeError, OSError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        os.close(self._to_browser)
        self._reader.join(timeout=5)  # (the browser gone, its end of the pipe reads empty)
        if not self._reader.is_alive():
            os.close(self._from_browser)
        shutil.rmtree(self._profile, ignore_errors=True)


_IMAGES = """Array.from(document.images)
  .filter(i => !(i.complete && i.naturalWidth > 0))
  .map(i => (i.currentSrc || i.src || '(no src)').slice(0, 80))"""
_STYLED = """(() => { const s = Array.from(document.styleSheets).filter(x => x.href && x.href.includes('main.'));
  return s.length > 0 && getComputedStyle(document.body).fontFamily.length > 0 &&
         getComputedStyle(document.querySelector('.md-header')).position !== 'static'; })()"""


def _problems_in(events: list[dict[str, Any]], origin: str) -> list[str]:
    problems = []
    failed_requests: dict[str, str] = {}
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            problems.append(f"JavaScript exception: {text.splitlines()[0] if text else details}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            problems.append(f"console.{params['type']}: {args[:200]}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            problems.append(f"console: {entry.get('text', '')[:200]} ({entry.get('url', '')})")
        elif method == "Network.requestWillBeSent":
            failed_requests[params["requestId"]] = params["request"]["url"]
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            url = failed_requests.get(params["requestId"], "?")
            problems.append(f"did not load: {url} ({params.get('errorText')})")
        elif method == "Network.responseReceived":
            response = params["response"]
            if response["status"] >= 400 and params.get("type") != "Document":
                problems.append(f"HTTP {response['status']}: {response['url']}")
            if not response["url"].startswith((origin, "data:")):
                problems.append(f"loads a third-party resource: {response['url'][:120]}")
    return problems


def check_site(site: str | os.PathLike[str], screenshots: str | os.PathLike[str] | None = None) -> list[str]:
    """Every problem a reader's browser shows on the built ``site`` (see the module docstring), as
    ``"page: problem"`` lines; empty when every page is clean."""
    site = str(pathlib.Path(site).resolve())
    executable = find_chromium()
    if executable is None:
        raise FileNotFoundError("Chromium not found: apt-get install chromium (or set JAXSYS_CHROMIUM)")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, site=site))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    browser = _Browser(executable)
    problems: list[str] = []
    try:
        pages = sorted(
            str(p.parent.relative_to(site)) + "/" if p.parent != pathlib.Path(site) else ""
            for p in pathlib.Path(site).rglob("index.html")
        )
        for page in pages:
            url = origin + PREFIX + page
            events = browser.open(url)
            found = _problems_in(events, origin)
            broken = browser.evaluate(_IMAGES) or []
            found += [f"image not rendered: {src}" for src in broken]
            # (every notebook of this site draws at least one plot)
            notebook = page.startswith("notebooks/") and page != "notebooks/"
            if notebook and not browser.evaluate("document.images.length"):
                found.append("no image on a notebook page")
            problems += [f"/{page}: {p}" for p in found]
        missing = origin + PREFIX + "no/such/page/"
        events = browser.open(missing)
        found = [p for p in _problems_in(events, origin) if "404" not in p]
        if not browser.evaluate(_STYLED):
            found.append("the 404 page's stylesheet is not applied (build with JAXSYS_SITE_URL=.../jaxsys/)")
        problems += [f"404 page at {missing[len(origin) :]}: {p}" for p in found]
        if screenshots is not None:
            out = pathlib.Path(screenshots)
            out.mkdir(parents=True, exist_ok=True)
            for name, (page, script) in SCREENSHOTS.items():
                browser.open(origin + PREFIX + page, settle=1.0)
                if script:
                    browser.evaluate(script)
                    time.sleep(0.5)
                browser.screenshot(out / name)
    finally:
        browser.close()
        server.shutdown()
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", help="the built site (mkdocs build -d SITE)")
    parser.add_argument("--screenshots", help="save home, notebook and API page screenshots here")
    args = parser.parse_args()
    problems = check_site(args.site, args.screenshots)
    for p in problems:
        print(p)
    print(f"{len(problems)} problems")
    return min(len(problems), 255)


if __name__ == "__main__":
    sys.exit(main())
