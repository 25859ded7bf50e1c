#!/usr/bin/env python3
"""A remote token-cache endpoint for tests (python3 standard library only).

Protocol:
  POST  form fields unique_id, token_info  -> {"status": "true"}
  GET   ?unique_id=...                     -> {"status": "true", "token_info": "..."}
  errors: {"status": "false", "errorCode": "...", "errorMessage": "..."}
          30001 invalid input, 50001 write failure, 50002 nothing stored, 50003 unsupported method

Records are files named after unique_id in a temporary directory (or in the directory --storage names, which the
server removes when it exits); a unique_id that is empty, contains "/", "\\",
NUL or "..", or starts with "." is refused with 30001.

Usage: token_cache_server.py [--mode MODE] [--storage DIRECTORY]. Binds 127.0.0.1 on a free port and prints the port as the first line of
stdout. Exits when stdin reaches end of file (the test process went away) or on SIGTERM.

Modes (also switchable at run time with GET /__control?mode=MODE[&code=CODE]):
  normal       the protocol as above
  html         every request gets 200 with an HTML page
  write-fail   every POST gets 50001
  http-500     every request gets HTTP 500 with a plain-text body
  redirect     every request gets 307 to /__redirected on this server (which answers {"status": "true"})
  hang         requests are held for 5 seconds before the normal answer
  echo-reject  every POST gets 30001 with an errorMessage that echoes token_info
  reject       every request gets {"status": "false"} with the error code given as code=... (default 50001)
  truncated    every request gets 200 with a Content-Length larger than the body it sends, then the connection closes
  canned       every request gets 200 (application/json) with the raw body last sent with POST /__canned

GET /__last returns {"method", "content_type", "body", "query"} of the last protocol request (raw, undecoded), and
"redirected": "true" once any client followed a redirect.

Like the classic PHP endpoint, a POST stores strip_tags(unique_id) and strip_tags(token_info): strip_tags below is a
port of PHP 8's (checked against php-cli 8.2 on 40,000 generated strings). It removes NUL bytes and everything from a
"<" that is not followed by white space up to the matching ">" (or to the end), with PHP's rules for quotes inside
tags, "<?" processing instructions, "<!" declarations and "<!-- -->" comments; a ">" outside a tag is kept.

Endpoints for the HTTP layer's tests (any method):
  /__huge?bytes=N   200 with a body of N bytes ("a"), written in 64 KiB chunks while the client keeps reading
  /__redirect       307 to /__redirected
  /__hang           holds the request until GET /__release (or 60 s), then answers {"status": "true"}
  /__release        releases every held /__hang request (later ones answer at once)
  /__stats          {"hung": number of /__hang requests that arrived, "huge_bytes_sent": bytes /__huge managed to write}
"""

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"mode": "normal", "code": "50001", "last": {}, "canned": b"", "hung": 0, "huge_bytes_sent": 0}
LOCK = threading.Lock()
RELEASE = threading.Event()
MODES = {"normal", "html", "write-fail", "http-500", "redirect", "hang", "echo-reject", "reject", "truncated", "canned"}


def strip_tags(text):
    """PHP's strip_tags without an allow list: a port of php_strip_tags_ex's state machine (PHP 8)."""
    s = text
    n = len(s)
    out = []
    state = 0  # 0 text, 1 tag, 2 PHP (<?), 3 declaration (<!), 4 comment (<!--)
    depth = 0
    in_q = ""
    lc = ""
    br = 0
    is_xml = False
    i = 0

    def at(k):
        return s[k] if 0 <= k < n else "\0"

    while i < n:
        c = s[i]
        if state == 0:
            if c == "\0":
                pass
            elif c == "<":
                if in_q:
                    pass
                elif at(i + 1) in " \t\n\r\v\f":
                    out.append(c)
                else:
                    lc = "<"
                    state = 1
            elif c == ">":
                if depth:
                    depth -= 1
                elif not in_q:
                    out.append(c)
            else:
                out.append(c)
        elif state == 1:
            if c == "<":
                if not in_q and at(i + 1) not in " \t\n\r\v\f":
                    depth += 1
            elif c == ">":
                if depth:
                    depth -= 1
                elif in_q:
                    pass
                else:
                    lc = ">"
                    if not (is_xml and at(i - 1) == "-"):
                        in_q = ""
                        state = 0
                        is_xml = False
            elif c in "\"'":
                if i != 0 and (not in_q or c == in_q):
                    in_q = "" if in_q else c
            elif c == "!":
                if at(i - 1) == "<":
                    state = 3
                    lc = c
            elif c == "?":
                if at(i - 1) == "<":
                    br = 0
                    state = 2
        elif state == 2:
            if c == "(":
                if lc not in "\"'" or lc == "":
                    lc = "("
                    br += 1
            elif c == ")":
                if lc not in "\"'" or lc == "":
                    lc = ")"
                    br -= 1
            elif c == ">":
                if depth:
                    depth -= 1
                elif not in_q and not br and lc != '"' and at(i - 1) == "?":
                    in_q = ""
                    state = 0
            elif c in "\"'":
                if i >= 1 and at(i - 1) != "\\":
                    if lc == c:
                        lc = ""
                    elif lc != "\\":
                        lc = c
                if i != 0 and (not in_q or c == in_q):
                    in_q = "" if in_q else c
            elif c in "lL":
                if i > 4 and at(i - 1) in "mM" and at(i - 2) in "xX" and at(i - 3) == "?" and at(i - 4) == "<":
                    state = 1
                    is_xml = True
        elif state == 3:
            if c == ">":
                if depth:
                    depth -= 1
                elif not in_q:
                    in_q = ""
                    state = 0
            elif c in "\"'":
                if i != 0 and at(i - 1) != "\\" and (not in_q or c == in_q):
                    in_q = "" if in_q else c
            elif c == "-":
                if at(i - 1) == "-" and at(i - 2) == "!":
                    state = 4
            elif c in "eE":
                if i > 6 and s[i - 6:i].lower() == "doctyp" and at(i - 7) == "!" and at(i - 8) == "<":
                    state = 1
        else:
            if c == ">" and not in_q and at(i - 1) == "-" and at(i - 2) == "-":
                in_q = ""
                state = 0
        i += 1
    return "".join(out)


def valid_unique_id(unique_id):
    return (
        bool(unique_id)
        and "/" not in unique_id
        and "\\" not in unique_id
        and "\x00" not in unique_id
        and ".." not in unique_id
        and not unique_id.startswith(".")
        and len(unique_id.encode("utf-8")) <= 255
    )


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    storage = None

    def log_message(self, *args):
        pass

    def send_json(self, payload, status=200):
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_text(self, status, content_type, text, extra_headers=()):
        body = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra_headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def fail(self, code, message):
        self.send_json({"status": "false", "errorCode": code, "errorMessage": message})

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def record(self, body):
        parsed = urllib.parse.urlsplit(self.path)
        with LOCK:
            STATE["last"] = {
                "method": self.command,
                "content_type": self.headers.get("Content-Type", ""),
                "body": body.decode("latin-1"),
                "query": parsed.query,
            }

    def special_mode(self, body):
        """Answers according to a non-normal mode; returns True when it did."""
        with LOCK:
            mode = STATE["mode"]
        if mode == "hang":
            time.sleep(5)
            return False
        if mode == "html":
            self.send_text(200, "text/html", "<html><body><h1>Maintenance</h1></body></html>")
            return True
        if mode == "http-500":
            self.send_text(500, "text/plain", "internal server error")
            return True
        if mode == "redirect":
            port = self.server.server_address[1]
            self.send_text(307, "text/plain", "moved", [("Location", "http://127.0.0.1:%d/__redirected" % port)])
            return True
        if mode == "reject":
            with LOCK:
                code = STATE["code"]
            self.fail(code, "rejected by the test with " + code)
            return True
        if mode == "truncated":
            body = b'{"status": "true", "token_info": "{\\"user_info\\": {\\"id'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body) + 1000))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True
            return True
        if mode == "canned":
            with LOCK:
                canned = STATE["canned"]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(canned)))
            self.end_headers()
            self.wfile.write(canned)
            return True
        if mode == "write-fail" and self.command == "POST":
            self.fail("50001", "cannot write token information")
            return True
        if mode == "echo-reject" and self.command == "POST":
            fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
            echoed = fields.get("token_info", [""])[0]
            self.fail("30001", "rejected token_info " + echoed)
            return True
        return False

    def http_layer_endpoint(self):
        """Answers the HTTP layer's test endpoints; returns True when it did."""
        parsed = urllib.parse.urlsplit(self.path)
        if parsed.path == "/__huge":
            size = int(urllib.parse.parse_qs(parsed.query).get("bytes", ["0"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b"a" * 65536
            sent = 0
            try:
                while sent < size:
                    part = chunk[: min(len(chunk), size - sent)]
                    self.wfile.write(part)
                    sent += len(part)
                    with LOCK:
                        STATE["huge_bytes_sent"] = sent
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading, as it should past its limit
            self.close_connection = True
            return True
        if parsed.path == "/__redirect":
            port = self.server.server_address[1]
            self.send_text(307, "text/plain", "moved", [("Location", "http://127.0.0.1:%d/__redirected" % port)])
            return True
        if parsed.path == "/__hang":
            with LOCK:
                STATE["hung"] += 1
            RELEASE.wait(60)
            try:
                self.send_json({"status": "true"})
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout)
            return True
        if parsed.path == "/__release":
            RELEASE.set()
            self.send_json({"released": "true"})
            return True
        if parsed.path == "/__stats":
            with LOCK:
                self.send_json({"hung": STATE["hung"], "huge_bytes_sent": STATE["huge_bytes_sent"]})
            return True
        return False

    def control(self):
        parsed = urllib.parse.urlsplit(self.path)
        if self.http_layer_endpoint():
            return True
        if parsed.path == "/__control":
            query = urllib.parse.parse_qs(parsed.query)
            mode = query.get("mode", [""])[0]
            if mode not in MODES:
                self.send_text(400, "text/plain", "unknown mode")
                return True
            with LOCK:
                STATE["mode"] = mode
                STATE["code"] = query.get("code", ["50001"])[0]
            self.send_json({"mode": mode})
            return True
        if parsed.path == "/__redirected":
            # A client that follows redirects gets a valid-looking answer here, so the test can tell.
            with LOCK:
                STATE["redirected"] = True
            self.send_json({"status": "true"})
            return True
        if self.command != "GET":
            return False
        if parsed.path == "/__last":
            with LOCK:
                last = dict(STATE["last"])
                last["redirected"] = "true" if STATE.get("redirected") else "false"
            self.send_json(last)
            return True
        return False

    def do_GET(self):
        if self.control():
            return
        self.record(b"")
        if self.special_mode(b""):
            return
        query = urllib.parse.urlsplit(self.path).query
        try:
            fields = urllib.parse.parse_qs(query, keep_blank_values=True, errors="strict")
        except (UnicodeDecodeError, ValueError):
            return self.fail("30001", "the query is not valid")
        unique_id = fields.get("unique_id", [""])[0]
        if not valid_unique_id(unique_id):
            return self.fail("30001", "unique_id is missing or not acceptable")
        path = os.path.join(self.storage, unique_id)
        try:
            with open(path, "r", encoding="utf-8") as handle:
                token_info = handle.read()
        except FileNotFoundError:
            return self.fail("50002", "no token information stored")
        except (OSError, UnicodeDecodeError):
            return self.fail("50002", "token information is unreadable")
        self.send_json({"status": "true", "token_info": token_info})

    def do_POST(self):
        body = self.read_body()
        if urllib.parse.urlsplit(self.path).path == "/__canned":
            # The raw body that mode "canned" serves from now on.
            with LOCK:
                STATE["canned"] = body
            self.send_json({"canned": str(len(body))})
            return
        if self.control():
            return
        self.record(body)
        if self.special_mode(body):
            return
        try:
            fields = urllib.parse.parse_qs(body.decode("utf-8"), keep_blank_values=True, errors="strict")
        except (UnicodeDecodeError, ValueError):
            return self.fail("30001", "the form body is not valid")
        # What the classic endpoint does to its input before it stores it.
        unique_id = strip_tags(fields.get("unique_id", [""])[0])
        if not valid_unique_id(unique_id) or "token_info" not in fields:
            return self.fail("30001", "unique_id or token_info is missing or not acceptable")
        token_info = strip_tags(fields["token_info"][0])
        path = os.path.join(self.storage, unique_id)
        try:
            temporary = path + ".tmp"
            with open(temporary, "w", encoding="utf-8") as handle:
                handle.write(token_info)
            os.replace(temporary, path)
        except OSError:
            return self.fail("50001", "cannot write token information")
        self.send_json({"status": "true"})

    def unsupported(self):
        self.read_body()
        self.record(b"")
        self.fail("50003", "unsupported method " + self.command)

    do_PUT = unsupported
    do_DELETE = unsupported
    do_PATCH = unsupported


def main():
    mode = "normal"
    storage = None
    arguments = sys.argv[1:]
    while arguments:
        if len(arguments) >= 2 and arguments[0] == "--mode" and arguments[1] in MODES:
            mode = arguments[1]
        elif len(arguments) >= 2 and arguments[0] == "--storage" and os.path.isdir(arguments[1]):
            # A directory of the test's own, so that it can read the data files as they are on disk.
            storage = arguments[1]
        else:
            print("usage: token_cache_server.py [--mode MODE] [--storage DIRECTORY]", file=sys.stderr)
            sys.exit(2)
        arguments = arguments[2:]
    STATE["mode"] = mode
    if storage is None:
        storage = tempfile.mkdtemp(prefix="token-cache-")
    Handler.storage = storage
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True

    def watch_stdin():
        # The test holds our stdin open; end of file means it is gone, so we go too.
        try:
            while sys.stdin.buffer.read(4096):
                pass
        finally:
            shutil.rmtree(storage, ignore_errors=True)
            os._exit(0)

    threading.Thread(target=watch_stdin, daemon=True).start()
    # The test ends us with SIGTERM: leave through `finally` so that the storage directory goes too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    finally:
        shutil.rmtree(storage, ignore_errors=True)


if __name__ == "__main__":
    main()
