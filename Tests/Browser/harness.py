"""Processes, browser and waiting helpers for the browser tests (Tests/Browser/web_sessions.py).

Everything here runs on 127.0.0.1: the OpenID Connect provider fixture, the example server instances, a small
"attacker" site, and headless Chromium driven by Debian's chromedriver. Nothing is downloaded: Selenium is pointed
at /usr/bin/chromedriver and Debian's Chromium binary, and Selenium Manager is switched off (SE_OFFLINE).

Ordering never relies on sleeping: a process is ready when it prints its ready line (read from its stdout with a
timeout), and every other wait is a WebDriverWait on a condition, with a timeout.
"""
import base64
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never try to download a browser or a driver

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMEDRIVER = "/usr/bin/chromedriver"
# Debian's chromium package installs the browser in /usr/lib/chromium; /usr/bin/chromium is a shell launcher.
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium")

# A JWT (or any JWS/JWE in compact form) starts with the base64url of '{"' : "eyJ".
JWT_SHAPED = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")

# No proxy for anything: all traffic goes to 127.0.0.1 directly.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class HarnessError(Exception):
    """The harness could not set something up (not a failed assertion about the example)."""


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(condition, timeout, message, poll=0.05):
    """Polls `condition` (a function of no argument) until it returns a truthy value, which is returned; raises
    AssertionError with `message` after `timeout` seconds. Built on WebDriverWait, which needs no browser."""
    try:
        return WebDriverWait(None, timeout, poll_frequency=poll).until(lambda _: condition())
    except TimeoutException:
        raise AssertionError(f"{message} (waited {timeout} s)") from None


def http(method, url, body=None, headers=None, timeout=10):
    """One request without proxy and without following redirects: (status, headers, text)."""
    data = None
    headers = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with DIRECT.open(request, timeout=timeout) as answer:
            return answer.status, answer.headers, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


class Process:
    """A child process whose stdout lines are copied to a log file and offered to `wait_for_line`, and whose
    stderr goes to the same log file."""

    def __init__(self, name, argv, log_path, stdin=subprocess.DEVNULL, env=None):
        self.name = name
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.lines = queue.Queue()
        self.popen = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=self.log, env=env,
                                      start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.popen.stdout:
            self.log.write(raw)
            self.log.flush()
            self.lines.put(raw.decode(errors="replace").rstrip("\n"))
        self.lines.put(None)  # end of output

    def wait_for_line(self, predicate, timeout):
        """The first stdout line matching `predicate`; raises HarnessError when the process ends first or after
        `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise HarnessError(f"{self.name}: no ready line within {timeout} s; log: {self.log_path}")
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise HarnessError(f"{self.name} exited ({self.popen.wait()}) before it was ready; log: "
                                   f"{self.log_path}\n{tail(self.log_path)}")
            if predicate(line):
                return line

    def terminate(self, timeout=30):
        """SIGTERM, then the exit status (SIGKILL and None when it is still running after `timeout` s)."""
        if self.popen.poll() is not None:
            return self.popen.returncode
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait()

    def close(self):
        self.kill()
        self.log.close()


def tail(path, lines=40):
    try:
        with open(path, errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""


class Provider:
    """The OpenID Connect provider fixture (Tests/UserSessionsOpenIDConnectTests/Fixtures/oidc_provider.py); `name`
    names its log (NAME.log in `workdir`)."""

    def __init__(self, script, workdir, name="provider"):
        self.process = Process(name, ["python3", script], os.path.join(workdir, f"{name}.log"),
                               stdin=subprocess.PIPE)
        port = self.process.wait_for_line(lambda line: line.strip().isdigit(), timeout=60).strip()
        self.base = f"http://127.0.0.1:{port}"

    def control(self, path, body=None):
        status, _, text = http("POST", self.base + path, body=body if body is not None else {})
        if status != 200:
            raise HarnessError(f"provider {path}: HTTP {status} {text}")
        return json.loads(text)

    def stats(self):
        status, _, text = http("GET", self.base + "/control/stats")
        if status != 200:
            raise HarnessError(f"provider /control/stats: HTTP {status}")
        return json.loads(text)

    def pushed_requests(self):
        """The parameters of every authorization request pushed so far (PAR), in order."""
        status, _, text = http("GET", self.base + "/control/par-requests")
        if status != 200:
            raise HarnessError(f"provider /control/par-requests: HTTP {status}")
        return json.loads(text)["requests"]

    def close(self):
        if self.process.popen.stdin:
            self.process.popen.stdin.close()  # the fixture exits when its stdin closes
        self.process.close()


class Example:
    """One instance of the example server (HummingbirdServer serve …), restartable on the same port. It keeps its
    records in PostgreSQL (`postgres_url`), in files under `store`, or in memory. With `fapi_key`, a (PEM file, kid)
    pair, it runs in the FAPI 2.0 mode (`--fapi-client-key FILE --fapi-client-key-id KID`) instead of
    authenticating with the client secret."""

    def __init__(self, name, binary, provider, workdir, postgres_url=None, port=None, store=None, fapi_key=None):
        self.name, self.binary, self.provider, self.workdir = name, binary, provider, workdir
        self.postgres_url, self.store, self.fapi_key = postgres_url, store, fapi_key
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(workdir, f"example-{name}.log")
        self.process = None
        self.starts = 0

    def argv(self):
        argv = [self.binary, "serve", "--port", str(self.port), "--issuer", self.provider.base,
                "--client-id", "example-app"]
        if self.fapi_key:
            argv += ["--fapi-client-key", self.fapi_key[0], "--fapi-client-key-id", self.fapi_key[1]]
        else:
            argv += ["--client-secret", "example-secret"]
        argv += ["--public-url", self.base, "--upstream", self.provider.base + "/api", "--sign-in-key", SIGN_IN_KEY]
        if self.postgres_url:
            argv += ["--postgres-url", self.postgres_url]
        elif self.store:
            argv += ["--store", self.store]
        return argv

    def start(self):
        self.starts += 1
        self.process = Process(f"example {self.name}", self.argv(), self.log_path)
        ready = f"listening on {self.base}"
        self.process.wait_for_line(lambda line: ready in line, timeout=60)

    def stop(self):
        """SIGTERM; returns the exit status (None if it had to be killed after 30 s)."""
        status = self.process.terminate(timeout=30)
        self.process.close()
        return status

    def close(self):
        if self.process:
            self.process.close()


# The key every example instance seals pending sign-ins with (a fleet shares one), fresh for each run.
SIGN_IN_KEY = base64.b64encode(os.urandom(32)).decode()


def resident_kib(pid):
    """The resident memory of process `pid` in KiB (VmRSS)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


class AttackerSite:
    """A page on another site (http://localhost:PORT, while the example is http://127.0.0.1:P) that submits a
    form to the example as soon as it loads: a cross-site form POST, the classic CSRF."""

    def __init__(self):
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's naming
                parts = urllib.parse.urlsplit(self.path)
                target = urllib.parse.parse_qs(parts.query).get("target", [""])[0]
                if parts.path == "/blank":  # a page of the attacker's origin to run scripts from
                    page = b"<!doctype html><title>Nothing here</title>"
                else:
                    page = (f'<!doctype html><title>Win a prize</title><form id="f" method="post" '
                            f'action="{_escape(target)}"><input type="hidden" name="prize" value="1"></form>'
                            f'<script>document.getElementById("f").submit()</script>').encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                site.visits += 1

            def log_message(self, *args):
                pass

        self.visits = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://localhost:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def page_posting_to(self, url):
        return self.origin + "/?" + urllib.parse.urlencode({"target": url})

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _escape(text):
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")


def chromium_binary():
    for candidate in CHROMIUM_CANDIDATES:
        if os.access(candidate, os.X_OK):
            return candidate
    raise HarnessError("Debian's chromium is not installed (apt-get install -y chromium chromium-driver)")


def new_browser():
    """Headless Chromium through Debian's chromedriver, with a fresh profile, that resolves no name but the
    loopback ones and records network events (for Set-Cookie headers and response statuses)."""
    if not os.access(CHROMEDRIVER, os.X_OK):
        raise HarnessError("Debian's chromedriver is not installed (apt-get install -y chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium_binary()
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
        "--disable-dev-shm-usage",
        "--window-size=1024,720",
        "--no-first-run",
        "--no-default-browser-check",
        "--no-proxy-server",
        # Nothing but loopback: any other host name fails to resolve, and no background service calls home.
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-domain-reliability",
        "--disable-client-side-phishing-detection",
        "--disable-sync",
        "--disable-default-apps",
        "--no-pings",
        "--password-store=basic",
    ):
        options.add_argument(argument)
    options.add_experimental_option("prefs", {"credentials_enable_service": False,
                                              "profile.password_manager_enabled": False})
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    service = Service(executable_path=CHROMEDRIVER)
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    return Browser(driver)


class Browser:
    """A WebDriver with the few helpers the scenarios share. Network events are accumulated from Chromium's
    performance log, which is drained on every read."""

    def __init__(self, driver):
        self.driver = driver
        self.events = []

    def wait(self, condition, timeout, message):
        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.05).until(lambda d: condition(d))
        except TimeoutException:
            raise AssertionError(f"{message} (waited {timeout} s; at {self.driver.current_url})") from None

    def network_events(self):
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method", "").startswith("Network."):
                self.events.append(message)
        return self.events

    def set_cookie_headers(self):
        """Every Set-Cookie header the browser received so far, raw, in order."""
        headers = []
        for event in self.network_events():
            if event["method"] != "Network.responseReceivedExtraInfo":
                continue
            for name, value in event["params"].get("headers", {}).items():
                if name.lower() == "set-cookie":
                    headers += value.split("\n")
        return headers

    def response_headers(self, url_prefix):
        """(url, headers) of every response whose URL starts with `url_prefix`, with the raw headers Chromium saw
        (Set-Cookie included)."""
        urls = {}
        found = []
        for event in self.network_events():
            params = event["params"]
            if event["method"] == "Network.requestWillBeSent":
                urls[params["requestId"]] = params["request"]["url"]
            elif event["method"] == "Network.responseReceivedExtraInfo":
                url = urls.get(params["requestId"], "")
                if url.startswith(url_prefix):
                    found.append((url, params.get("headers", {})))
        return found

    def response_statuses(self, url_prefix):
        """(url, status) of every response whose URL starts with `url_prefix` (redirects included)."""
        found = []
        for event in self.network_events():
            params = event["params"]
            if event["method"] == "Network.responseReceived":
                response = params["response"]
            elif event["method"] == "Network.requestWillBeSent" and params.get("redirectResponse"):
                response = params["redirectResponse"]
            else:
                continue
            if response["url"].startswith(url_prefix):
                found.append((response["url"], response["status"]))
        return found

    def requested_urls(self, url_prefix, method="GET"):
        """Every URL starting with `url_prefix` the browser sent a `method` request to (redirects included), in
        order."""
        found = []
        for event in self.network_events():
            if event["method"] == "Network.requestWillBeSent":
                request = event["params"]["request"]
                if request["method"] == method and request["url"].startswith(url_prefix):
                    found.append(request["url"])
        return found

    def all_cookies(self):
        """Every cookie the browser holds, on every site (Chrome DevTools Protocol)."""
        return self.driver.execute_cdp_cmd("Storage.getCookies", {})["cookies"]

    def fetch(self, path, headers=None, method="GET"):
        """fetch() from the current page (same origin, its cookies): {"status", "body"}; redirects are not
        followed (status 0)."""
        return self.driver.execute_async_script(
            """
            const [path, headers, method, done] = arguments;
            fetch(path, {method, headers, credentials: "same-origin", redirect: "manual", cache: "no-store"})
                .then(async (r) => done({status: r.status, body: await r.text()}))
                .catch((e) => done({status: -1, body: String(e)}));
            """,
            path, headers or {}, method)

    def storage(self):
        """localStorage and sessionStorage of the current page, as two dicts."""
        return self.driver.execute_script(
            """
            const dump = (s) => Object.fromEntries(Array.from({length: s.length}, (_, i) => [s.key(i),
                s.getItem(s.key(i))]));
            return [dump(window.localStorage), dump(window.sessionStorage)];
            """)

    def screenshot(self, path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.driver.save_screenshot(path)

    def quit(self):
        try:
            self.driver.quit()
        except Exception:  # noqa: BLE001 - the browser may already be gone; nothing else to clean
            pass


def remove_tree(path):
    shutil.rmtree(path, ignore_errors=True)
