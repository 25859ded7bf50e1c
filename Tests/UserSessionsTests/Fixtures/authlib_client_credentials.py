#!/usr/bin/env python3
"""An OAuth 2.0 authorization server on Authlib for the server's own tokens (needs authlib and flask).

Listens on 127.0.0.1 (port 0 unless --port) and prints the chosen port as the first line of stdout.

POST /token          Authlib's own ClientCredentialsGrant (RFC 6749 section 4.4), with client_secret_basic and
                     client_secret_post checked by Authlib against the one registered client (--client-id,
                     --client-secret; --auth says which method it is registered with). A wrong secret is Authlib's
                     401 invalid_client. Scopes must be among --scopes (else invalid_scope); the token's scope is the
                     requested one.
                     Token exchange (RFC 8693, grant_type urn:ietf:params:oauth:grant-type:token-exchange) as a
                     custom Authlib grant: same client authentication, subject_token must be an access token this
                     server issued that has not expired (else invalid_grant), subject_token_type must be the access
                     token type and audience is required (else invalid_request); answers with issued_token_type.
                     With --auth private_key_jwt the client authenticates with an ES256 assertion (RFC 7523) instead,
                     verified by Authlib against a key the server makes at start: aud must be the issuer
                     (http://127.0.0.1:<port>), jti is never accepted twice (else invalid_client).
GET  /stats          JSON counters: token_requests (every POST /token), client_credentials and token_exchanges (tokens
                     issued per grant), invalid_client, held_requests, last_scope, last_audience, last_auth (basic,
                     post or private_key_jwt).
GET  /admin/client-key {"pem", "kid"}: with --auth private_key_jwt, the client's private key (PKCS #8 PEM).
POST /admin/issue    {"access_token": ...}: an access token of a user, for token exchange.
POST /admin/config   JSON {"expires_in": n} (the lifetime of issued tokens; default 3600) and/or {"mode":
                     "normal|error500"}.
POST /admin/expire   every token issued so far expires now (an exchange presenting one fails with invalid_grant).
POST /admin/hold     token requests wait (after they are counted) until POST /admin/release.
"""
import argparse
import os
import secrets
import signal
import sys
import threading
import time

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, grants
from authlib.oauth2.rfc6749.errors import InvalidGrantError, InvalidRequestError, UnauthorizedClientError
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7523 import JWTBearerClientAssertion
from joserfc.jwk import ECKey
from flask import Flask, jsonify, request
from werkzeug.serving import make_server

ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


class State:
    def __init__(self, args):
        self.lock = threading.Lock()
        self.args = args
        self.expires_in = 3600
        self.mode = "normal"
        self.gate = threading.Event()
        self.gate.set()
        self.tokens = {}  # access token -> expiry (time.time())
        self.issuer = ""
        self.client_key = ECKey.generate_key("P-256", {"kid": "client-es256", "alg": "ES256"})
        self.used_jtis = set()
        self.stats = {
            "token_requests": 0,
            "client_credentials": 0,
            "token_exchanges": 0,
            "invalid_client": 0,
            "held_requests": 0,
            "last_scope": None,
            "last_audience": None,
            "last_auth": None,
        }

    def count(self, name, value=1):
        with self.lock:
            self.stats[name] += value

    def remember(self, token):
        with self.lock:
            self.tokens[token["access_token"]] = time.time() + token.get("expires_in", self.expires_in)

    def is_active(self, access_token):
        with self.lock:
            expiry = self.tokens.get(access_token)
        return expiry is not None and time.time() < expiry


class Client(ClientMixin):
    """The one registered client, with the authentication method it is registered with."""

    def __init__(self, client_id, secret, method):
        self.client_id = client_id
        self.secret = secret
        self.method = method

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return None

    def get_allowed_scope(self, scope):
        # No scope asks for the default one: the empty scope.
        return scope or ""

    def check_redirect_uri(self, redirect_uri):
        return False

    def check_client_secret(self, client_secret):
        return secrets.compare_digest(client_secret.encode(), self.secret.encode())

    def check_endpoint_auth_method(self, method, endpoint):
        return endpoint == "token" and method == self.method

    def check_response_type(self, response_type):
        return False

    def check_grant_type(self, grant_type):
        return grant_type in (ClientCredentialsGrant.GRANT_TYPE, TokenExchangeGrant.GRANT_TYPE)


class PrivateKeyJWT(JWTBearerClientAssertion):
    """private_key_jwt: Authlib checks the signature, iss = sub, aud and exp; the jti is remembered here."""

    CLIENT_AUTH_METHOD = "private_key_jwt"

    def get_audiences(self):
        return [STATE.issuer]

    def validate_jti(self, claims, jti):
        with STATE.lock:
            if jti in STATE.used_jtis:
                return False
            STATE.used_jtis.add(jti)
            return True

    def resolve_client_public_key(self, client):
        return ECKey.import_key(STATE.client_key.as_dict(private=False))


AUTH_METHODS = ["client_secret_basic", "client_secret_post", "private_key_jwt"]


class ClientCredentialsGrant(grants.ClientCredentialsGrant):
    """Authlib's grant, with every client authentication method allowed and its tokens counted."""

    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS

    def create_token_response(self):
        status, body, headers = super().create_token_response()
        STATE.count("client_credentials")
        with STATE.lock:
            STATE.stats["last_scope"] = body.get("scope")
        return status, body, headers


class TokenExchangeGrant(grants.BaseGrant, grants.TokenEndpointMixin):
    """RFC 8693 token exchange for an access token this server issued, as a custom Authlib grant."""

    GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS

    def validate_token_request(self):
        client = self.authenticate_token_endpoint_client()
        if not client.check_grant_type(self.GRANT_TYPE):
            raise UnauthorizedClientError()
        form = self.request.form
        if not form.get("subject_token") or form.get("subject_token_type") != ACCESS_TOKEN_TYPE:
            raise InvalidRequestError("subject_token and an access token subject_token_type are required")
        if not form.get("audience"):
            raise InvalidRequestError("audience is required")
        if not STATE.is_active(form.get("subject_token")):
            raise InvalidGrantError("the subject token is not active")
        self.request.client = client
        self.validate_requested_scope()

    def create_token_response(self):
        form = self.request.form
        token = self.generate_token(scope=self.request.scope, include_refresh_token=False)
        token["issued_token_type"] = ACCESS_TOKEN_TYPE
        self.save_token(token)
        STATE.count("token_exchanges")
        with STATE.lock:
            STATE.stats["last_audience"] = form.get("audience")
            STATE.stats["last_scope"] = token.get("scope")
        return 200, token, self.TOKEN_RESPONSE_HEADER


def make_app(args):
    app = Flask(__name__)
    method = args.auth if args.auth == "private_key_jwt" else "client_secret_" + args.auth
    client = Client(args.client_id, args.client_secret, method)

    def query_client(client_id):
        return client if client_id == client.client_id else None

    def save_token(token, request):
        STATE.remember(token)

    server = AuthorizationServer(app, query_client=query_client, save_token=save_token)
    server.scopes_supported = args.scopes.split()
    server.register_token_generator(
        "default",
        BearerTokenGenerator(
            access_token_generator=lambda **_: "al-" + secrets.token_urlsafe(16),
            expires_generator=lambda client, grant_type: STATE.expires_in,
        ),
    )
    server.register_grant(ClientCredentialsGrant)
    server.register_grant(TokenExchangeGrant)
    server.register_client_auth_method("private_key_jwt", PrivateKeyJWT())

    @app.post("/token")
    def token():
        STATE.count("token_requests")
        with STATE.lock:
            STATE.stats["last_auth"] = "private_key_jwt" if request.form.get("client_assertion") else \
                "basic" if request.headers.get("Authorization") else "post"
            held = not STATE.gate.is_set()
            if held:
                STATE.stats["held_requests"] += 1
        if held:
            STATE.gate.wait()
            STATE.count("held_requests", -1)
        if STATE.mode == "error500":
            return jsonify(error="server_error"), 500
        response = server.create_token_response()
        if response.status_code == 401:
            STATE.count("invalid_client")
        return response

    @app.get("/stats")
    def stats():
        with STATE.lock:
            return jsonify(STATE.stats)

    @app.post("/admin/issue")
    def issue():
        token = {"access_token": "user-" + secrets.token_urlsafe(16), "expires_in": STATE.expires_in}
        STATE.remember(token)
        return jsonify(access_token=token["access_token"])

    @app.post("/admin/config")
    def config():
        settings = request.get_json(force=True, silent=True) or {}
        if "expires_in" in settings:
            STATE.expires_in = int(settings["expires_in"])
        if "mode" in settings:
            STATE.mode = settings["mode"]
        return jsonify(ok=True)

    @app.post("/admin/expire")
    def expire():
        with STATE.lock:
            for access_token in STATE.tokens:
                STATE.tokens[access_token] = 0
        return jsonify(ok=True)

    @app.get("/admin/client-key")
    def client_key():
        return jsonify(pem=STATE.client_key.as_pem(private=True).decode(), kid=STATE.client_key.kid)

    @app.post("/admin/hold")
    def hold():
        STATE.gate.clear()
        return jsonify(ok=True)

    @app.post("/admin/release")
    def release():
        STATE.gate.set()
        return jsonify(ok=True)

    return app


def exit_when_parent_goes_away():
    # Standard input is a pipe the test keeps open: its end means the test process is gone.
    try:
        sys.stdin.read()
    finally:
        os._exit(0)


STATE = None


def main():
    global STATE
    # A parent may start us with signals blocked (threads of a Swift test process do): unblock them so that
    # terminate() works.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, signal.valid_signals())
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    threading.Thread(target=exit_when_parent_goes_away, daemon=True).start()
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--auth", choices=["basic", "post", "private_key_jwt"], default="basic")
    parser.add_argument("--client-id", default="client")
    parser.add_argument("--client-secret", default="client-secret")
    parser.add_argument("--scopes", default="orders.read orders.write a b")
    args = parser.parse_args()
    STATE = State(args)
    http = make_server("127.0.0.1", args.port, make_app(args), threaded=True)
    STATE.issuer = f"http://127.0.0.1:{http.server_port}"
    print(http.server_port, flush=True)
    http.serve_forever()


if __name__ == "__main__":
    main()
