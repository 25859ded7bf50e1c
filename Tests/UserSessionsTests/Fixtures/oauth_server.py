#!/usr/bin/env python3
"""A small OAuth 2.0 token endpoint for the refresh tests (python3 standard library only).

Listens on 127.0.0.1 (port 0 unless --port) and prints the chosen port as the first line of stdout.

POST /token          refresh_token grant (RFC 6749 section 6). Refresh tokens rotate on every use; a reused
                     token is answered with invalid_grant and its whole family is revoked.
                     client_credentials grant (RFC 6749 section 4.4): a new access token "cc-..." per request, for the
                     requested scope (echoed) and resource indicators (RFC 8707, repeatable); counted in
                     client_credentials, last_resources.
                     token exchange (RFC 8693, grant_type urn:ietf:params:oauth:grant-type:token-exchange): the
                     subject_token must be an active access token of a family (else invalid_grant) and audience is
                     required (else invalid_request); answers "tx-..." with issued_token_type; counted in
                     token_exchanges, last_audience.
GET  /stats          JSON counters: token_requests, refreshes, invalid_grant, redirect_target_hits, revocations,
                     last_token_type_hint, ...
POST /admin/issue    JSON {"refresh_token", "access_token"}: a new token family. With a JSON body {"count": n}:
                     {"families": [[refresh_token, access_token], ...]}, n new families at once.
POST /admin/revoke   revokes every family.
POST /admin/reset_peak   stats' peak_in_flight (the most token requests answered at once) starts again from now.
POST /admin/hold     token requests wait (after they are counted) until POST /admin/release; /stats counts
                     held_requests, the requests waiting now.
POST /admin/mode     JSON {"mode": "normal|error500|garbage|invalid_client|slow|redirect|status|
                     redirect_other_host|nested|huge|sized|truncated", "delay": seconds, "expires_in": n,
                     "status": n, "redirect_status": n, "bytes": n, "omit_refresh_token": bool,
                     "final_after": n, "final_expires_in": n, "client_expires_in": n}
                     client_expires_in: the lifetime of client-credentials and exchanged tokens (default 3600);
                     final_after applies to client-credentials grants too (counted apart from refreshes).
                     premature_grants counts client-credentials grants for a scope whose last token had more than
                     half its lifetime left (a client that asked twice for one expiry).
                     final_after: once n refreshes succeeded, later answers use final_expires_in as their lifetime
                     (so that processes sharing a user settle on one long-lived token after exactly n expiries).
                     redirect: redirect_status (307 unless set) to http://127.0.0.1:<port>/elsewhere;
                     redirect_other_host: redirect_status to http://localhost:<port>/elsewhere (another host name
                     for this server);
                     nested: a 200 of 100,000 nested arrays; huge: a 200 whose body is a valid token
                     response of 50 MB; sized: a 200 whose body is a valid token response of exactly "bytes" bytes;
                     truncated: a 200 whose body stops short of its Content-Length.
POST /revoke         RFC 7009 token revocation, with the same client authentication and the same modes as /token:
                     form fields token and token_type_hint. Revoking a refresh token revokes its whole family;
                     revoking an access token revokes that token. Unknown tokens get 200 too; a missing token is 400
                     invalid_request.
POST /introspect     form field token -> {"active": bool} (no authentication; for the tests).
GET|POST /elsewhere  the redirect target: counts redirect_target_hits, and redirect_target_saw_secret when the
                     request carried a refresh token, a client secret or an Authorization header.
Client authentication is checked according to --auth (basic, post or none) with --client-id/--client-secret.

DPoP (RFC 9449), for the fleet tests: a refresh with a `DPoP` header has its proof verified (joserfc, imported only
then: typ dpop+jwt, alg ES256/EdDSA/RS256, the header's public jwk verifies the signature, htm POST, htu the token
endpoint, iat within 60 s, jti never seen before); a family is bound to the thumbprint (RFC 7638) of its first
proof, and a later refresh with another key or without a proof is answered 400 invalid_dpop_proof, rotating nothing.
The answer to a refresh with a proof says token_type DPoP. /stats: refresh_jkts (the thumbprint of each successful
refresh's proof, null without one), dpop_refused.
"""
import argparse
import base64
import itertools
import json
import os
import secrets
import signal
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class State:
    def __init__(self, args):
        self.lock = threading.Lock()
        self.args = args
        self.mode = "normal"
        self.delay = 0.0
        self.status = 500
        self.redirect_status = 307
        self.bytes = 1024
        self.expires_in = args.expires_in
        self.omit_refresh_token = False
        self.final_after = None
        self.final_expires_in = 3600
        self.client_expires_in = 3600
        self.gate = threading.Event()
        self.gate.set()
        self.families = {}  # family id -> revoked flag
        self.tokens = {}  # refresh token -> {"family": id, "used": bool}
        self.access_tokens = {}  # access token -> {"family": id, "revoked": bool}
        self.family_ids = itertools.count(1)
        self.stats = {
            "token_requests": 0,
            "refreshes": 0,
            "invalid_grant": 0,
            "invalid_client": 0,
            "reuse_detected": 0,
            "redirect_target_hits": 0,
            "redirect_target_saw_secret": 0,
            "last_auth": None,
            "last_scope": None,
            "revocations": 0,
            "last_token_type_hint": None,
            "client_credentials": 0,
            "token_exchanges": 0,
            "last_resources": None,
            "last_audience": None,
            "held_requests": 0,
            "premature_grants": 0,
            "last_traceparent": None,
            "in_flight": 0,
            "peak_in_flight": 0,
            "refresh_jkts": [],
            "dpop_refused": 0,
        }
        self.family_jkts = {}  # family id -> the thumbprint its refresh tokens are bound to
        self.dpop_jtis = set()
        self.last_client_grant = {}  # scope -> (time issued, lifetime)

    def new_family(self):
        family = next(self.family_ids)
        self.families[family] = False
        return family

    def issue(self, family):
        refresh_token = "rt-" + secrets.token_urlsafe(12)
        access_token = "at-" + secrets.token_urlsafe(12)
        self.tokens[refresh_token] = {"family": family, "used": False}
        self.access_tokens[access_token] = {"family": family, "revoked": False}
        return refresh_token, access_token

    def is_active(self, token):
        """Whether a refresh or access token would still be honoured (call with the lock held)."""
        refresh = self.tokens.get(token)
        if refresh is not None:
            return not refresh["used"] and not self.families.get(refresh["family"])
        access = self.access_tokens.get(token)
        if access is not None:
            return not access["revoked"] and not self.families.get(access["family"])
        return False


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    @property
    def state(self):
        return self.server.state

    def reply(self, status, body, content_type="application/json", headers=()):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        # Said out loud, so that pooling clients never send the next request on this connection.
        self.send_header("Connection", "close")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    def truncated_reply(self, data):
        """Announces more bytes than it sends, then closes the connection."""
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data) + 1000))
        self.end_headers()
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def elsewhere(self, body):
        """The redirect target, for a client that follows a redirect (with a GET, or re-sending a POST)."""
        carried = (b"refresh_token" in body or b"client_secret" in body
                   or self.headers.get("Authorization") is not None)
        with self.state.lock:
            self.state.stats["redirect_target_hits"] += 1
            if carried:
                self.state.stats["redirect_target_saw_secret"] += 1
        self.reply(200, {"access_token": "at-elsewhere", "token_type": "Bearer", "expires_in": 3600})

    def do_GET(self):
        if self.path == "/stats":
            with self.state.lock:
                self.reply(200, dict(self.state.stats))
        elif self.path == "/elsewhere":
            self.elsewhere(b"")
        else:
            self.reply(404, {"error": "not_found"})

    def do_POST(self):
        body = self.read_body()
        if self.path == "/token":
            self.token(body)
        elif self.path == "/revoke":
            self.revoke(body)
        elif self.path == "/introspect":
            token = urllib.parse.parse_qs(body.decode(), keep_blank_values=True).get("token", [""])[0]
            with self.state.lock:
                active = self.state.is_active(token)
            self.reply(200, {"active": active})
        elif self.path == "/elsewhere":
            self.elsewhere(body)
        elif self.path == "/admin/issue":
            count = json.loads(body or b"{}").get("count")
            with self.state.lock:
                issued = [self.state.issue(self.state.new_family()) for _ in range(count or 1)]
            if count is None:
                self.reply(200, {"refresh_token": issued[0][0], "access_token": issued[0][1]})
            else:
                self.reply(200, {"families": issued})
        elif self.path == "/admin/reset_peak":
            with self.state.lock:
                self.state.stats["peak_in_flight"] = self.state.stats["in_flight"]
            self.reply(200, {"peak_in_flight": self.state.stats["peak_in_flight"]})
        elif self.path == "/admin/revoke":
            with self.state.lock:
                for family in self.state.families:
                    self.state.families[family] = True
            self.reply(200, {"revoked": True})
        elif self.path == "/admin/hold":
            self.state.gate.clear()
            self.reply(200, {"held": True})
        elif self.path == "/admin/release":
            self.state.gate.set()
            self.reply(200, {"held": False})
        elif self.path == "/admin/mode":
            settings = json.loads(body or b"{}")
            with self.state.lock:
                self.state.mode = settings.get("mode", self.state.mode)
                self.state.delay = float(settings.get("delay", self.state.delay))
                self.state.status = int(settings.get("status", self.state.status))
                self.state.redirect_status = int(settings.get("redirect_status", self.state.redirect_status))
                self.state.bytes = int(settings.get("bytes", self.state.bytes))
                self.state.omit_refresh_token = bool(settings.get("omit_refresh_token", self.state.omit_refresh_token))
                if "expires_in" in settings:
                    self.state.expires_in = settings["expires_in"]
                if "final_after" in settings:
                    self.state.final_after = settings["final_after"]
                if "final_expires_in" in settings:
                    self.state.final_expires_in = settings["final_expires_in"]
                if "client_expires_in" in settings:
                    self.state.client_expires_in = settings["client_expires_in"]
            self.reply(200, {"mode": self.state.mode})
        else:
            self.reply(404, {"error": "not_found"})

    def revoke(self, body):
        state = self.state
        if self.mode_reply():
            return
        parsed = urllib.parse.parse_qs(body.decode(), keep_blank_values=True)
        self.form = {key: values[0] for key, values in parsed.items()}
        with state.lock:
            forced = state.mode == "invalid_client"
        reason = "forced by mode" if forced else self.client_error()
        if reason:
            with state.lock:
                state.stats["invalid_client"] += 1
            return self.reply(401, {"error": "invalid_client", "error_description": reason},
                              headers=[("WWW-Authenticate", "Basic")])
        token = self.form.get("token")
        if not token:
            return self.reply(400, {"error": "invalid_request", "error_description": "no token"})
        with state.lock:
            state.stats["revocations"] += 1
            state.stats["last_token_type_hint"] = self.form.get("token_type_hint")
            refresh = state.tokens.get(token)
            access = state.access_tokens.get(token)
            if refresh is not None:
                state.families[refresh["family"]] = True
            elif access is not None:
                access["revoked"] = True
        # RFC 7009 section 2.2: 200 whether or not the token was known, with no body to speak of.
        self.reply(200, b"", "text/plain")

    def client_error(self):
        """Returns None when client authentication is right, else the reason."""
        args = self.state.args
        form = self.form
        header = self.headers.get("Authorization")
        if args.auth == "basic":
            if not header or not header.startswith("Basic "):
                return "missing basic authentication"
            try:
                decoded = base64.b64decode(header[6:], validate=True).decode()
                raw_id, raw_secret = decoded.split(":", 1)
            except Exception:
                return "malformed basic authentication"
            client_id = urllib.parse.unquote_plus(raw_id)
            client_secret = urllib.parse.unquote_plus(raw_secret)
            if "client_secret" in form:
                return "more than one authentication method"
        elif args.auth == "post":
            if header:
                return "more than one authentication method"
            client_id = form.get("client_id")
            client_secret = form.get("client_secret")
        else:
            if header or "client_secret" in form:
                return "public clients send no secret"
            client_id = form.get("client_id")
            client_secret = args.client_secret
        if client_id != args.client_id or client_secret != args.client_secret:
            return "unknown client or wrong secret"
        return None

    def mode_reply(self):
        """Answers as the current mode says; returns True when it did (mode normal or invalid_client: False)."""
        state = self.state
        with state.lock:
            mode, delay, status = state.mode, state.delay, state.status
            if mode in ("redirect", "redirect_other_host"):
                status = state.redirect_status
            elif mode == "sized":
                status = state.bytes
        if delay:
            time.sleep(delay)
        return self.mode_answer(mode, status)

    def mode_answer(self, mode, status):
        """status is the redirect's status for mode redirect, and the body's size for mode sized."""
        if mode == "error500":
            self.reply(500, {"error": "server_error"})
            return True
        if mode == "status":
            self.reply(status, b"<html>status</html>", "text/html")
            return True
        if mode == "garbage":
            self.reply(200, b"<html>this is not json</html>", "text/html")
            return True
        if mode == "redirect":
            location = "http://127.0.0.1:%d/elsewhere" % self.server.server_address[1]
            self.reply(status, b"", "text/plain", headers=[("Location", location)])
            return True
        if mode == "redirect_other_host":
            location = "http://localhost:%d/elsewhere" % self.server.server_address[1]
            self.reply(status, b"", "text/plain", headers=[("Location", location)])
            return True
        if mode == "nested":
            self.reply(200, b"[" * 100000 + b"]" * 100000)
            return True
        if mode == "huge":
            self.reply(200, b'{"access_token": "' + b"a" * (50 * 1024 * 1024) + b'", "token_type": "Bearer"}')
            return True
        if mode == "sized":
            head = b'{"access_token": "at-sized", "token_type": "Bearer", "expires_in": 3600, "padding": "'
            self.reply(200, head + b"a" * max(0, status - len(head) - 2) + b'"}')
            return True
        if mode == "truncated":
            self.truncated_reply(b'{"access_token": "at-cut", "token_type": "Bea')
            return True
        return False

    def token(self, body):
        """Answers a token request; in_flight counts the ones being answered now, peak_in_flight the most at once
        since the last POST /admin/reset_peak (the restart-storm benchmark reads it)."""
        state = self.state
        with state.lock:
            state.stats["in_flight"] += 1
            state.stats["peak_in_flight"] = max(state.stats["peak_in_flight"], state.stats["in_flight"])
        try:
            self.answer_token(body)
        finally:
            with state.lock:
                state.stats["in_flight"] -= 1

    def answer_token(self, body):
        state = self.state
        with state.lock:
            state.stats["token_requests"] += 1
            state.stats["held_requests"] += 1
            # The W3C trace context a traced transport propagates (the tracing tests check it).
            state.stats["last_traceparent"] = self.headers.get("traceparent")
        state.gate.wait()
        with state.lock:
            state.stats["held_requests"] -= 1
        if self.mode_reply():
            return
        with state.lock:
            mode = state.mode
        parsed = urllib.parse.parse_qs(body.decode(), keep_blank_values=True)
        self.form = {key: values[0] for key, values in parsed.items()}
        self.resources = parsed.get("resource", [])
        reason = "forced by mode" if mode == "invalid_client" else self.client_error()
        with state.lock:
            state.stats["last_auth"] = "basic" if self.headers.get("Authorization") else (
                "post" if "client_secret" in self.form else "none")
            state.stats["last_scope"] = self.form.get("scope")
            if reason:
                state.stats["invalid_client"] += 1
                return self.reply(401, {"error": "invalid_client", "error_description": reason},
                                  headers=[("WWW-Authenticate", "Basic")])
            grant_type = self.form.get("grant_type")
            if grant_type == "client_credentials":
                return self.client_credentials()
            if grant_type == "urn:ietf:params:oauth:grant-type:token-exchange":
                return self.token_exchange()
            if grant_type != "refresh_token":
                return self.reply(400, {"error": "unsupported_grant_type"})
            token = self.form.get("refresh_token")
            record = state.tokens.get(token)
            if record is None:
                state.stats["invalid_grant"] += 1
                return self.reply(400, {"error": "invalid_grant", "error_description": "unknown refresh token"})
            family = record["family"]
            if state.families.get(family):
                state.stats["invalid_grant"] += 1
                return self.reply(400, {"error": "invalid_grant", "error_description": "revoked"})
            if record["used"]:
                state.families[family] = True
                state.stats["invalid_grant"] += 1
                state.stats["reuse_detected"] += 1
                # Echoes the token it was sent, as careless servers do; clients must not repeat it.
                return self.reply(400, {"error": "invalid_grant",
                                        "error_description": "refresh token %s reused; family revoked" % token})
            jkt, refusal = self.dpop_thumbprint(state, family)
            if refusal:
                state.stats["dpop_refused"] += 1
                return self.reply(400, {"error": "invalid_dpop_proof", "error_description": refusal})
            record["used"] = True
            state.stats["refresh_jkts"].append(jkt)
            refresh_token, access_token = state.issue(family)
            state.stats["refreshes"] += 1
            expires_in = state.expires_in
            if state.final_after is not None and state.stats["refreshes"] >= state.final_after:
                expires_in = state.final_expires_in
            response = {"access_token": access_token, "token_type": "DPoP" if jkt else "Bearer",
                        "refresh_token": refresh_token, "expires_in": expires_in}
            if state.omit_refresh_token:
                del response["refresh_token"]
            if self.form.get("scope"):
                response["scope"] = self.form["scope"]
        self.reply(200, response)


    def dpop_thumbprint(self, state, family):
        """(the thumbprint of the request's valid DPoP proof or None, the reason it is refused or None); binds the
        family to the first proof's key. Called under state.lock."""
        proof = self.headers.get_all("DPoP") or []
        bound = state.family_jkts.get(family)
        if not proof:
            return None, ("the refresh token is bound to a DPoP key" if bound else None)
        if len(proof) != 1:
            return None, "more than one DPoP header"
        try:
            from joserfc import jws
            from joserfc.jwk import ECKey, OKPKey, RSAKey
            header = json.loads(base64.urlsafe_b64decode(proof[0].split(".")[0] + "=="))
            classes = {"EC": ECKey, "OKP": OKPKey, "RSA": RSAKey}
            if header.get("typ") != "dpop+jwt" or header.get("alg") not in ("ES256", "EdDSA", "RS256"):
                return None, "not a DPoP proof"
            jwk = header.get("jwk") or {}
            if any(name in jwk for name in ("d", "p", "q")):
                return None, "the proof's jwk is private"
            key = classes[jwk["kty"]].import_key(jwk)
            claims = json.loads(jws.deserialize_compact(proof[0], key, algorithms=[header["alg"]]).payload)
        except Exception as error:  # noqa: BLE001 - any failure is a refused proof
            return None, "the proof does not verify (%s)" % type(error).__name__
        target = "http://127.0.0.1:%d/token" % self.server.server_port
        if claims.get("htm") != "POST" or claims.get("htu") != target:
            return None, "the proof is for another request"
        if not isinstance(claims.get("iat"), int) or abs(time.time() - claims["iat"]) > 60:
            return None, "the proof is stale"
        jkt = key.thumbprint()
        if (jkt, claims.get("jti")) in state.dpop_jtis or not isinstance(claims.get("jti"), str):
            return None, "the proof's jti was used before"
        state.dpop_jtis.add((jkt, claims["jti"]))
        if bound and bound != jkt:
            return None, "the refresh token is bound to another key"
        state.family_jkts[family] = jkt
        return jkt, None

    def client_credentials(self):
        """RFC 6749 section 4.4 (called with the lock held)."""
        state = self.state
        state.stats["client_credentials"] += 1
        state.stats["last_resources"] = sorted(self.resources)
        if self.form.get("scope") == "forbidden":
            return self.reply(400, {"error": "invalid_scope", "error_description": "scope forbidden is not allowed"})
        access_token = "cc-" + secrets.token_urlsafe(12)
        state.access_tokens[access_token] = {"family": None, "revoked": False}
        # A grant for a scope whose last token has more than half its life left: the client asked twice per expiry.
        now = time.time()
        scope_key = self.form.get("scope") or ""
        previous = state.last_client_grant.get(scope_key)
        if previous is not None and now < previous[0] + previous[1] / 2:
            state.stats["premature_grants"] += 1
        expires_in = state.client_expires_in
        if state.final_after is not None and state.stats["client_credentials"] >= state.final_after:
            expires_in = state.final_expires_in
        state.last_client_grant[scope_key] = (now, float(expires_in))
        response = {"access_token": access_token, "token_type": "Bearer", "expires_in": expires_in}
        if self.form.get("scope"):
            response["scope"] = self.form["scope"]
        return self.reply(200, response)

    def token_exchange(self):
        """RFC 8693 (called with the lock held)."""
        state = self.state
        state.stats["token_exchanges"] += 1
        audience = self.form.get("audience")
        state.stats["last_audience"] = audience
        if not audience:
            return self.reply(400, {"error": "invalid_request", "error_description": "audience is required"})
        if self.form.get("subject_token_type") != "urn:ietf:params:oauth:token-type:access_token":
            return self.reply(400, {"error": "invalid_request", "error_description": "unsupported subject type"})
        if not state.is_active(self.form.get("subject_token", "")):
            return self.reply(400, {"error": "invalid_grant", "error_description": "subject token not active"})
        access_token = "tx-" + secrets.token_urlsafe(12)
        state.access_tokens[access_token] = {"family": None, "revoked": False}
        response = {"access_token": access_token, "token_type": "Bearer", "expires_in": state.client_expires_in,
                    "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"}
        if self.form.get("scope"):
            response["scope"] = self.form["scope"]
        return self.reply(200, response)


def exit_when_parent_goes_away():
    """The test keeps our stdin open; when it ends (even by a crash), stdin closes and we exit."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        os._exit(0)


def main():
    # A parent may start us with signals blocked (threads of a Swift test process do): unblock them so that
    # terminate() works.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, signal.valid_signals())
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    threading.Thread(target=exit_when_parent_goes_away, daemon=True).start()
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--auth", choices=["basic", "post", "none"], default="basic")
    parser.add_argument("--client-id", default="client")
    parser.add_argument("--client-secret", default="client-secret")
    parser.add_argument("--expires-in", default=3600)
    args = parser.parse_args()
    # A deep accept queue: the benchmark opens a thousand connections at once.
    ThreadingHTTPServer.request_queue_size = 1024
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.state = State(args)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
