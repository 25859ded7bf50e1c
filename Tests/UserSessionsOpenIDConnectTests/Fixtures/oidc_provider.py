#!/usr/bin/env python3
"""An OpenID Connect provider on 127.0.0.1 for the sign-in tests, built on Authlib (and Flask/Werkzeug).

Listens on 127.0.0.1, port 0, prints the chosen port as the first line of stdout, and exits when stdin reaches end
of file (so it dies with the test process). The issuer is http://127.0.0.1:<port>.

Authorization code flow with PKCE (S256 required), consent skipped:
GET  /.well-known/openid-configuration   discovery
GET  /jwks                               the public keys (RS256, ES256, EdDSA; kids change on rotation)
GET  /authorize                          the login form (hidden fields carry the request)
POST /authorize                          username/password (alice/wonderland, bob/builder) -> 302 to the
                                         redirect_uri with code, state and iss (RFC 9207)
POST /token                              authorization_code grant (client_secret_basic, client_secret_post, none,
                                         private_key_jwt)
POST /revoke                             RFC 7009 revocation of refresh tokens (the client's own method); not in
                                         the discovery document: tests name it
POST /par                                pushed authorization requests (RFC 9126), when switched on: authenticates
                                         the client, keeps the request for 60 s under a one-use request_uri, which
                                         GET/POST /authorize accept (with client_id) in place of the parameters
GET  /userinfo                           Bearer access token -> claims
GET  /logout                             end_session_endpoint: checks id_token_hint, 302 to
                                         post_logout_redirect_uri?state=…
Clients: web-app / web-secret (basic), post-app / post-secret (post), public-app (none); redirect URI
http://127.0.0.1/callback, post-logout redirect URI http://127.0.0.1/signed-out.

The browser client example-app / example-secret (basic) is the web-session example's (Examples/HummingbirdServer):
- redirect URIs: any http://127.0.0.1:<port>/…/callback or http://localhost:<port>/…/callback; post-logout redirect
  URIs: any http URL on those hosts;
- grants authorization_code and refresh_token; every token response carries a refresh token, and each refresh
  rotates it: presenting a spent one revokes the whole family (invalid_grant), as RFC 9700 recommends;
- a login through the form opens a provider session (cookie op_session); a later GET /authorize with a live one
  signs in without the form; GET /logout ends the session named by the id_token_hint's sid and clears the cookie;
- back-channel logout tokens for its users' sub or sid are addressed to it (aud example-app) unless `aud` is given.
GET  /api/profile                        the upstream API: Bearer access token -> {"sub", "name", "email",
                                         "token_number"} (the user's count of access tokens issued so far); an
                                         expired or unknown token -> 401 invalid_token

Test control (JSON bodies):
POST /control/misbehave  {"id_token": fault, "mixup_iss": bool, "replay_code": bool, "userinfo_sub": s,
                          "authorize_error": code}; each applies to the next response it concerns only.
                          faults: alg_none, hs256_public_key, unknown_kid, wrong_aud, wrong_iss, wrong_nonce,
                          no_nonce, expired, iat_future, multiple_aud_without_azp, wrong_at_hash
POST /control/sign-with  {"alg": "RS256" | "ES256" | "EdDSA"}: the algorithm of later ID tokens
POST /control/rotate     new keys (new kids) for every algorithm; the JWKS serves only the new ones
POST /control/without-kid {"decoys": n}: from now on no key of the JWKS has a kid and no token header carries one;
                          the JWKS lists n other RSA keys (decoys, RS256) before the real ones
POST /control/misbehave  {"refresh_id_token": fault}: the next refresh response's ID token (by default every
                          refresh of example-app carries a valid one): none, wrong_sub, wrong_iss, wrong_aud,
                          bad_signature, expired
POST /control/misbehave  {"hold_redirect": true}: the next browser login answers a page linking to the callback
                          (id "callback") instead of redirecting to it
POST /control/misbehave  {"discovery_duplicate": true}: the next discovery document carries "issuer" twice
POST /control/logout-token {"sub", "sid", "fault": nonce|no_event|wrong_aud|no_sub_or_sid|alg_none, "jti"}
                          -> {"logout_token": …}: a back-channel logout token, returned to the test
POST /control/send-logout {"uri", and the fields of /control/logout-token} -> {"status": n}: mints the same token
                          and POSTs it as application/x-www-form-urlencoded `logout_token=…` to uri (a loopback
                          http URL only: host 127.0.0.1, localhost or [::1]; anything else is refused with 400),
                          5 s timeout, no proxy, no redirect followed; n is the receiver's HTTP status (502 when
                          it could not be reached)
POST /control/token-lifetime {"seconds": n}: expires_in of example-app's later access tokens (default 3600)
POST /control/expire-access-tokens      every access token issued so far is rejected as expired from now on
POST /control/client-key {"client", "alg": "RS256" | "ES256" | "EdDSA", "audience": "issuer" | "endpoint"}
                          -> {"pem", "kid"}: the client authenticates with private_key_jwt from now on, with a new
                          key whose private half (PKCS #8 PEM) is returned; assertions are verified by Authlib
                          (signature, iss = sub = client id, aud, exp, jti never seen before) and must have an iat
                          and live at most 5 min; aud must be the issuer ("issuer", default) or the URL of the
                          endpoint the request was sent to ("endpoint")
POST /control/par        {"enabled": bool, "required": bool}: the discovery document names /par (enabled) and says
                          require_pushed_authorization_requests (required); when required, /authorize refuses a
                          request without request_uri (400 invalid_request)
POST /control/misbehave  {"echo_assertion": true}: the next token request is refused with invalid_client and its
                          client_assertion as the error_description
POST /control/misbehave  {"par": "no_request_uri" | "bad_expires_in" | "server_error" | "invalid_client" |
                          "redirect"}: the next answer of /par (redirect: a 307 to /par)
GET  /control/par-requests the parameters of every request pushed so far (client_assertion left out)
POST /control/dpop       {"enabled": bool (default true), "required", "nonce", "resource_nonce"} -> {"ok", "nonce"}:
                          DPoP (RFC 9449), off by default (a DPoP header is then ignored and every token is Bearer).
                          Enabled: discovery lists dpop_signing_alg_values_supported ES256, EdDSA, RS256; a DPoP
                          header at /token, /par, /revoke, /api/profile, /userinfo must hold exactly one proof:
                          compact JWS, typ dpop+jwt, alg ES256 | EdDSA | RS256, a public jwk (no d, p, q, …) that
                          verifies it, a string jti never seen before for that key, htm = the method, htu = issuer
                          + path exactly, iat within 60 s of now, at resources ath = b64url(sha256(token)); the
                          jti is spent even when the answer is use_dpop_nonce. A bad proof -> 400
                          {"error": "invalid_dpop_proof", "error_description": why} at /token, /par, /revoke (checked
                          before client authentication); 401 with WWW-Authenticate: DPoP error="invalid_dpop_proof"
                          at resources. required: /token refuses a request without proof (invalid_dpop_proof).
                          nonce (/token, /par, /revoke) and resource_nonce (/api/profile, /userinfo): one current
                          nonce, new each time this is posted with either on; a proof without it -> 400
                          use_dpop_nonce (resources: 401, WWW-Authenticate: DPoP error="use_dpop_nonce",
                          error_description="…"), with header DPoP-Nonce; with nonce on every 200 of /token
                          carries DPoP-Nonce too.
                          Binding: a token request with a valid proof gets token_type DPoP, its access token and
                          its refresh token bound to the proof's jkt (RFC 7638 SHA-256); a refresh keeps the
                          family's binding and needs a proof of its key, else 400 invalid_dpop_proof (no rotation,
                          family kept); a code asked for with dpop_jkt (front channel or pushed) is redeemed with a
                          proof of that key only. A bound access token needs Authorization: DPoP <token> and a
                          proof of its key (else 401 invalid_token, WWW-Authenticate: DPoP …); as Bearer -> 401
                          invalid_token; /api/profile then adds "cnf": {"jkt"}. /par: the proof's jkt becomes the
                          request's dpop_jkt (a different dpop_jkt in the form -> 400 invalid_dpop_proof).
POST /control/misbehave  {"dpop_downgrade": true}: the next 200 of /token says token_type Bearer (still bound);
                          {"dpop_nonce_again": true}: the next token request whose proof passes every check is
                          answered use_dpop_nonce with a new current nonce
POST /control/fapi       {"enabled": bool (default true)}: FAPI 2.0: PAR enabled and required, DPoP on and required
                          at /token, client authentication private_key_jwt only at /token, /par, /revoke (any other
                          -> 401 invalid_client, before the proof is looked at); discovery says so
                          (token_endpoint_auth_methods_supported ["private_key_jwt"]); switching it off restores the
                          PAR and DPoP switches' own settings
GET  /control/stats      counters: jwks_requests, token_requests, token_errors, last_auth, logouts, refreshes,
                          refresh_reuse_detected, provider_sessions (live), api_requests, api_unauthorized,
                          api_requests_with_cookies, revocations, last_auth_revocation, last_auth_par,
                          par_requests, front_channel_refused, assertion_replays, dpop_token_requests (token
                          requests whose proof was accepted), dpop_refused (invalid_dpop_proof answers),
                          dpop_replays, dpop_nonce_challenges (use_dpop_nonce answers), dpop_revocations (/revoke
                          requests with an accepted proof), refresh_jkts (per 200 refresh: the proof's jkt or null),
                          ...
"""
import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

os.environ.setdefault("AUTHLIB_INSECURE_TRANSPORT", "1")  # loopback only: the tests speak plain HTTP

from authlib.integrations.flask_oauth2 import AuthorizationServer  # noqa: E402
from authlib.oauth2.rfc6749 import ClientMixin, AuthorizationCodeMixin, InvalidClientError, grants  # noqa: E402
from authlib.oauth2.rfc6749 import OAuth2Error  # noqa: E402
from authlib.oauth2.rfc7009 import RevocationEndpoint  # noqa: E402
from authlib.oauth2.rfc7523 import JWTBearerClientAssertion  # noqa: E402
from authlib.oauth2.rfc7636 import CodeChallenge  # noqa: E402
from authlib.oidc.core.grants import OpenIDCode  # noqa: E402
from authlib.oauth2.rfc6750 import BearerTokenGenerator  # noqa: E402
from flask import Flask, g, jsonify, redirect, request  # noqa: E402
from joserfc import jws, jwt  # noqa: E402
from joserfc.errors import JoseError  # noqa: E402
from joserfc.jwk import ECKey, OKPKey, RSAKey  # noqa: E402
from werkzeug.datastructures import CombinedMultiDict, MultiDict  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402

REDIRECT_URI = "http://127.0.0.1/callback"
POST_LOGOUT_URI = "http://127.0.0.1/signed-out"
USERS = {
    "alice": {"password": "wonderland", "sub": "248289761001", "email": "alice@example.com", "name": "Alice Liddell"},
    "bob": {"password": "builder", "sub": "90342.ASDFJWFA", "email": "bob@example.com", "name": "Bob Builder"},
}
ALGORITHMS = ("RS256", "ES256", "EdDSA")
BROWSER_CLIENT = "example-app"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


def is_loopback_http(uri, path_suffix=""):
    parts = urllib.parse.urlsplit(uri)
    return parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS and parts.port is not None \
        and parts.path.endswith(path_suffix) and not parts.fragment


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.issuer = ""
        self.generation = 0
        self.keys = {}
        self.rotate()
        self.sign_with = "RS256"
        self.codes = {}
        self.tokens = {}  # access token -> AccessRecord
        self.refresh_tokens = {}  # refresh token -> RefreshRecord
        self.revoked_families = set()
        self.tokens_issued = {}  # user name -> access tokens issued
        self.token_lifetime = 3600
        self.provider_sessions = {}  # op_session cookie value -> (user name, sid)
        self.browser_subjects = set()
        self.browser_sids = set()
        self.last_code = None
        self.faults = {}
        self.without_kid = False
        self.decoys = []
        self.assertion_audience = "issuer"
        self.used_jtis = set()
        self.par_enabled = False
        self.par_required = False
        self.pushed = {}  # request_uri -> (client_id, parameters, expiry)
        self.pushed_log = []
        self.fapi = False
        self.dpop_enabled = False
        self.dpop_required = False
        self.dpop_nonce_required = False  # at /token, /par and /revoke
        self.dpop_resource_nonce = False  # at /api/profile and /userinfo
        self.dpop_nonce = None
        self.dpop_jtis = set()  # (jkt, jti) of every proof seen
        self.stats = {"revocations": 0, "last_auth_revocation": None, "last_auth_par": None, "par_requests": 0,
                      "front_channel_refused": 0, "assertion_replays": 0,
                      "jwks_requests": 0, "token_requests": 0, "token_errors": 0, "last_auth": None,
                      "logouts": 0, "last_logout_state": None, "userinfo_requests": 0, "authorizations": 0,
                      "refreshes": 0, "refresh_reuse_detected": 0, "api_requests": 0, "api_unauthorized": 0,
                      "api_requests_with_cookies": 0, "dpop_token_requests": 0, "dpop_refused": 0,
                      "dpop_replays": 0, "dpop_nonce_challenges": 0, "dpop_revocations": 0, "refresh_jkts": []}

    def rotate(self):
        self.generation += 1
        g = self.generation
        self.keys = {
            "RS256": RSAKey.generate_key(2048, {"kid": f"rsa-{g}", "use": "sig", "alg": "RS256"}),
            "ES256": ECKey.generate_key("P-256", {"kid": f"ec-{g}", "use": "sig", "alg": "ES256"}),
            "EdDSA": OKPKey.generate_key("Ed25519", {"kid": f"ed-{g}", "use": "sig", "alg": "EdDSA"}),
        }

    def take_fault(self, name):
        with self.lock:
            return self.faults.pop(name, None)


STATE = State()


class AccessRecord:
    def __init__(self, user, expires, number, jkt=None):
        self.user, self.expires, self.number = user, expires, number
        self.jkt = jkt  # the thumbprint of the DPoP key it is bound to, None for a Bearer token


class RefreshRecord:
    def __init__(self, client_id, user, scope, family, sid, jkt=None):
        self.client_id, self.user, self.scope, self.family, self.sid = client_id, user, scope, family, sid
        self.jkt = jkt  # the family's DPoP key thumbprint, None when unbound
        self.spent = False

    def check_client(self, client):
        return client.get_client_id() == self.client_id

    def get_scope(self):
        return self.scope


class Client(ClientMixin):
    def __init__(self, client_id, secret, method):
        self.client_id, self.secret, self.method = client_id, secret, method
        self.public_key = None

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return REDIRECT_URI

    def get_allowed_scope(self, scope):
        return " ".join(s for s in scope.split() if s in ("openid", "profile", "email", "offline_access"))

    def check_redirect_uri(self, redirect_uri):
        if self.client_id == BROWSER_CLIENT:
            return is_loopback_http(redirect_uri, "/callback")
        return redirect_uri == REDIRECT_URI

    def check_client_secret(self, client_secret):
        return self.secret is not None and hmac.compare_digest(client_secret, self.secret)

    def check_endpoint_auth_method(self, method, endpoint):
        with STATE.lock:
            STATE.stats["last_auth" if endpoint == "token" else f"last_auth_{endpoint}"] = method
            fapi = STATE.fapi
        # FAPI 2.0 allows private_key_jwt only (fapi_refusal answers first; this keeps Authlib from trying others).
        return method == self.method and (method == "private_key_jwt" or not fapi)

    def check_response_type(self, response_type):
        return response_type == "code"

    def check_grant_type(self, grant_type):
        if self.client_id == BROWSER_CLIENT:
            return grant_type in ("authorization_code", "refresh_token")
        return grant_type == "authorization_code"


CLIENTS = {
    "web-app": Client("web-app", "web-secret", "client_secret_basic"),
    "post-app": Client("post-app", "post-secret", "client_secret_post"),
    "public-app": Client("public-app", None, "none"),
    BROWSER_CLIENT: Client(BROWSER_CLIENT, "example-secret", "client_secret_basic"),
}


class Code(AuthorizationCodeMixin):
    def __init__(self, code, client_id, redirect_uri, scope, user, nonce, challenge, method, sid, dpop_jkt=None):
        self.code, self.client_id, self.redirect_uri, self.scope = code, client_id, redirect_uri, scope
        self.user, self.nonce, self.code_challenge, self.code_challenge_method = user, nonce, challenge, method
        self.sid = sid
        self.dpop_jkt = dpop_jkt  # RFC 9449 §10: only a proof of this key redeems the code
        self.auth_time = int(time.time())

    def get_redirect_uri(self):
        return self.redirect_uri

    def get_scope(self):
        return self.scope

    def get_nonce(self):
        return self.nonce

    def get_auth_time(self):
        return self.auth_time

    def get_acr(self):
        return None

    def get_amr(self):
        return None


class User:
    def __init__(self, name):
        self.name = name
        self.info = USERS[name]

    def get_user_id(self):
        return self.info["sub"]


AUTH_METHODS = ["private_key_jwt", "client_secret_basic", "client_secret_post", "none"]
ENDPOINTS = {"/token": "token", "/revoke": "revocation", "/par": "par"}


class PrivateKeyJWT(JWTBearerClientAssertion):
    """private_key_jwt (RFC 7523 §2.2): Authlib verifies the signature, iss = sub, aud and exp; this adds the jti
    cache, the iat and a lifetime of at most 5 minutes."""
    CLIENT_AUTH_METHOD = "private_key_jwt"

    def get_audiences(self):
        with STATE.lock:
            mode = STATE.assertion_audience
        return [STATE.issuer] if mode == "issuer" else [STATE.issuer + request.path]

    def validate_jti(self, claims, jti):
        with STATE.lock:
            if (claims["sub"], jti) in STATE.used_jtis:
                STATE.stats["assertion_replays"] += 1
                return False
            STATE.used_jtis.add((claims["sub"], jti))
            return True

    def verify_claims(self, claims):
        super().verify_claims(claims)
        iat = claims.get("iat")
        if not isinstance(iat, int) or claims["exp"] - iat > 300 or iat > time.time() + 60:
            raise InvalidClientError(description="the assertion needs an iat and a lifetime of at most 5 minutes")

    def process_assertion_claims(self, assertion, resolve_key):
        # joserfc leaves EdDSA out of its default algorithms; the client may sign with any of the three.
        try:
            token = jwt.decode(assertion, resolve_key, algorithms=list(ALGORITHMS))
        except JoseError as error:
            raise InvalidClientError(description=error.description) from error
        self.verify_claims(token.claims)
        return token.claims

    def resolve_client_public_key(self, client):
        if client.public_key is None:
            raise InvalidClientError(description="the client has no key")
        return client.public_key

    def authenticate_client(self, client):
        if client.check_endpoint_auth_method(self.CLIENT_AUTH_METHOD, ENDPOINTS.get(request.path, "token")):
            return client
        raise InvalidClientError(description="the client does not authenticate with private_key_jwt")


PROOF_ALGORITHMS = {  # alg -> key class, kty, crv
    "ES256": (ECKey, "EC", "P-256"), "EdDSA": (OKPKey, "OKP", "Ed25519"), "RS256": (RSAKey, "RSA", None)}
PRIVATE_MEMBERS = ("d", "p", "q", "dp", "dq", "qi", "oth", "k")
PROOF_WINDOW = 60  # seconds either side of now that a proof's iat may lie


class ProofRegistry(jws.JWSRegistry):
    # A proof's header carries its jwk: an RSA modulus alone outgrows joserfc's default 512 bytes.
    max_header_length = 4096


PROOF_READER = ProofRegistry(algorithms=list(PROOF_ALGORITHMS))
PROOF_REGISTRIES = {alg: ProofRegistry(algorithms=[alg]) for alg in PROOF_ALGORITHMS}  # each alg only itself


class ProofRefused(Exception):
    """A DPoP proof that does not pass; the message says why (it becomes the error_description)."""


def dpop_switches():
    """(on, required at /token) for DPoP: FAPI 2.0 implies both."""
    with STATE.lock:
        return STATE.dpop_enabled or STATE.fapi, STATE.dpop_required or STATE.fapi


def proof_header():
    """The request's DPoP header, None without one. Werkzeug joins repeated headers with commas, which a compact JWS
    never holds: a comma means two headers."""
    values = request.headers.getlist("DPoP")
    if not values:
        return None
    if len(values) > 1 or "," in values[0]:
        raise ProofRefused("exactly one DPoP header is allowed")
    return values[0]


def proof_key(header):
    """The public key of the proof's jwk header, checked against alg; a private key is refused (RFC 9449 §4.3)."""
    alg = header.get("alg")
    if alg not in PROOF_ALGORITHMS:
        raise ProofRefused("alg must be ES256, EdDSA or RS256")
    key_class, kty, crv = PROOF_ALGORITHMS[alg]
    member = header.get("jwk")
    if not isinstance(member, dict) or member.get("kty") != kty or (crv and member.get("crv") != crv):
        raise ProofRefused(f"jwk must be a {kty} key fit for {alg}")
    if any(name in member for name in PRIVATE_MEMBERS):
        raise ProofRefused("jwk must be a public key")
    try:
        return key_class.import_key(member)
    except Exception as error:  # noqa: BLE001 - any failure means "not a usable key"
        raise ProofRefused("jwk is not a valid key") from error


def verify_proof(value, access_token=None):
    """The claims and the key thumbprint (jkt, RFC 7638 SHA-256) of the DPoP proof `value` for this request, or
    ProofRefused; at a resource `access_token` is the token the proof must name (ath). The nonce is left to
    nonce_wanted."""
    try:
        proof = jws.extract_compact(value.encode(), registry=PROOF_READER)
    except (JoseError, ValueError, TypeError) as error:
        raise ProofRefused("the proof is not a compact JWS") from error
    header = proof.protected
    if header.get("typ") != "dpop+jwt":
        raise ProofRefused("typ must be dpop+jwt")
    key = proof_key(header)
    try:
        # Only the header's own alg, named explicitly: joserfc leaves EdDSA out of its defaults.
        valid = jws.validate_compact(proof, key, registry=PROOF_REGISTRIES[header["alg"]])
    except (JoseError, ValueError) as error:
        raise ProofRefused("the signature does not verify with the jwk") from error
    if not valid:
        raise ProofRefused("the signature does not verify with the jwk")
    try:
        claims = json.loads(proof.payload)
    except ValueError as error:
        raise ProofRefused("the payload is not JSON") from error
    if not isinstance(claims, dict):
        raise ProofRefused("the payload is not a JSON object")
    check_proof_claims(claims, access_token)
    jkt = key.thumbprint()
    spend_jti(jkt, claims["jti"])
    return claims, jkt


def check_proof_claims(claims, access_token):
    jti, iat = claims.get("jti"), claims.get("iat")
    if not isinstance(jti, str) or not jti:
        raise ProofRefused("jti must be a string")
    if claims.get("htm") != request.method:
        raise ProofRefused("htm is not the method of the request")
    if claims.get("htu") != STATE.issuer + request.path:
        raise ProofRefused("htu is not the URL of the request")
    if isinstance(iat, bool) or not isinstance(iat, (int, float)) or abs(time.time() - iat) > PROOF_WINDOW:
        raise ProofRefused("the proof is stale: iat must be within 60 s of now")
    if access_token is not None and claims.get("ath") != b64url(hashlib.sha256(access_token.encode()).digest()):
        raise ProofRefused("ath is not the hash of the access token")


def spend_jti(jkt, jti):
    """Each proof is good once (RFC 9449 §11.1), even one answered with use_dpop_nonce."""
    with STATE.lock:
        replayed = (jkt, jti) in STATE.dpop_jtis
        if replayed:
            STATE.stats["dpop_replays"] += 1
        STATE.dpop_jtis.add((jkt, jti))
    if replayed:
        raise ProofRefused("the proof was used before (jti replayed)")


def nonce_wanted(claims, at_resource):
    """The current nonce when this endpoint demands one and the proof lacks it (a challenge is due), else None."""
    with STATE.lock:
        wanted = STATE.dpop_resource_nonce if at_resource else STATE.dpop_nonce_required
        if not wanted or claims.get("nonce") == STATE.dpop_nonce:
            return None
        STATE.stats["dpop_nonce_challenges"] += 1
        return STATE.dpop_nonce


def renew_nonce():
    """A new current nonce, announced by a challenge (the dpop_nonce_again fault)."""
    with STATE.lock:
        STATE.dpop_nonce = secrets.token_urlsafe(24)
        STATE.stats["dpop_nonce_challenges"] += 1
        return STATE.dpop_nonce


def count_refused_proof():
    with STATE.lock:
        STATE.stats["dpop_refused"] += 1


def refused_proof(description):
    """The authorization server's answer to a bad proof (RFC 9449 §5)."""
    count_refused_proof()
    answer = jsonify({"error": "invalid_dpop_proof", "error_description": description})
    answer.status_code = 400
    return answer


def nonce_challenge(nonce):
    """The authorization server's demand for a nonce (RFC 9449 §8)."""
    answer = jsonify({"error": "use_dpop_nonce", "error_description": "the authorization server requires a DPoP nonce"})
    answer.status_code = 400
    answer.headers["DPoP-Nonce"] = nonce
    return answer


def dpop_grant_error(description):
    """invalid_dpop_proof raised from inside a grant, which Authlib answers as a 400 token error."""
    count_refused_proof()
    return OAuth2Error(description=description, error="invalid_dpop_proof")


def endpoint_proof(required=False):
    """The jkt of the request's proof at /token, /par or /revoke and no answer, or None and the 400 answer
    (invalid_dpop_proof, use_dpop_nonce); (None, None) when DPoP is off, or without a proof when none is required."""
    on, _ = dpop_switches()
    if not on:
        return None, None
    try:
        value = proof_header()
        if value is None:
            if required:
                raise ProofRefused("a DPoP proof is required")
            return None, None
        claims, jkt = verify_proof(value)
    except ProofRefused as refusal:
        return None, refused_proof(str(refusal))
    nonce = nonce_wanted(claims, at_resource=False)
    if nonce is not None:
        return None, nonce_challenge(nonce)
    return jkt, None


JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


def fapi_refusal():
    """Under FAPI 2.0 (§5.3.2.1) a client authenticates with private_key_jwt (mTLS has no place on the loopback):
    401 invalid_client for anything else, before the proof is looked at; None when allowed or FAPI is off."""
    with STATE.lock:
        fapi = STATE.fapi
    if not fapi or (request.form.get("client_assertion_type") == JWT_BEARER and "client_assertion" in request.form):
        return None
    answer = jsonify({"error": "invalid_client", "error_description": "FAPI 2.0 allows private_key_jwt only"})
    answer.status_code = 401
    return answer


class CodeGrant(grants.AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS

    def save_authorization_code(self, code, request):
        payload = request.payload
        on, _ = dpop_switches()
        item = Code(code, request.client.get_client_id(), payload.redirect_uri, payload.scope, request.user.name,
                    payload.data.get("nonce"), payload.data.get("code_challenge"),
                    payload.data.get("code_challenge_method"),
                    g.get("provider_sid") or secrets.token_urlsafe(12),
                    payload.data.get("dpop_jkt") if on else None)  # DPoP off: an unknown parameter, ignored
        with STATE.lock:
            STATE.codes[code] = item
        return item

    def validate_token_request(self):
        super().validate_token_request()
        bound = self.request.authorization_code.dpop_jkt
        if bound is not None and bound != g.get("dpop_jkt"):
            # A code asked for with dpop_jkt is redeemed with a proof of that key only, never without a proof.
            raise dpop_grant_error("the authorization code is bound to another key (dpop_jkt)")

    def query_authorization_code(self, code, client):
        with STATE.lock:
            item = STATE.codes.get(code)
        if item and item.client_id == client.get_client_id():
            return item
        return None

    def delete_authorization_code(self, authorization_code):
        with STATE.lock:
            STATE.codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code):
        return User(authorization_code.user)


class RotatingRefreshGrant(grants.RefreshTokenGrant):
    """Refresh with rotation: each use spends the token; a spent one presented again revokes its whole family."""
    TOKEN_ENDPOINT_AUTH_METHODS = ["private_key_jwt", "client_secret_basic"]
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token):
        with STATE.lock:
            record = STATE.refresh_tokens.get(refresh_token)
            if record is None or record.family in STATE.revoked_families:
                return None
        if record.jkt is not None and record.jkt != g.get("dpop_jkt"):
            # Only the key holder refreshes (RFC 9449 §5); whoever lacks the key neither rotates nor kills the family.
            raise dpop_grant_error("the refresh token is bound to another key")
        with STATE.lock:
            if record.spent:
                STATE.revoked_families.add(record.family)
                STATE.stats["refresh_reuse_detected"] += 1
                return None
            STATE.stats["refreshes"] += 1
            return record

    def authenticate_user(self, refresh_token):
        return User(refresh_token.user)

    def revoke_old_credential(self, refresh_token):
        with STATE.lock:
            refresh_token.spent = True


def sign(header, claims, alg):
    """Signs with the current key of `alg` (or misbehaves when the header asks for it)."""
    key = STATE.keys[alg]
    with STATE.lock:
        if STATE.without_kid:
            header = {name: value for name, value in header.items() if name != "kid"}
    return jwt.encode(header, claims, key, algorithms=[alg])


def forge_none(claims):
    return b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode()) + "." + b64url(json.dumps(claims).encode()) + "."


def forge_hs256_with_public_key(claims):
    """The classic key-confusion attack: HS256 keyed with the bytes of the RSA public key (PEM), kid of the RSA key."""
    rsa = STATE.keys["RS256"]
    public_pem = rsa.as_pem(private=False)
    header = {"alg": "HS256", "typ": "JWT", "kid": rsa.kid}
    signing_input = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
    mac = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + b64url(mac)


def at_hash(access_token, alg):
    digest = hashlib.sha512(access_token.encode()).digest() if alg == "EdDSA" else \
        hashlib.sha256(access_token.encode()).digest()
    return b64url(digest[: len(digest) // 2])


def encode_token(claims, fault, alg):
    """Signs `claims` as the provider would, or as the fault `fault` says."""
    if fault == "alg_none":
        return forge_none(claims)
    if fault == "hs256_public_key":
        return forge_hs256_with_public_key(claims)
    header = {"alg": alg, "typ": "JWT", "kid": STATE.keys[alg].kid}
    if fault == "unknown_kid":
        ghost = RSAKey.generate_key(2048, {"kid": "ghost", "alg": "RS256"})
        return jwt.encode({"alg": "RS256", "kid": "ghost"}, claims, ghost, algorithms=["RS256"])
    return sign(header, claims, alg)


class IDToken(OpenIDCode):
    def exists_nonce(self, nonce, request):
        return False

    def generate_user_info(self, user, scope):
        info = {"sub": user.info["sub"]}
        if "email" in scope:
            info["email"] = user.info["email"]
        if "profile" in scope:
            info["name"] = user.info["name"]
        return info

    def encode_id_token(self, token, request):
        fault = STATE.take_fault("id_token")
        code = request.authorization_code
        now = int(time.time())
        with STATE.lock:
            alg = STATE.sign_with
        claims = {"iss": STATE.issuer, "aud": request.client.get_client_id(), "iat": now, "exp": now + 600,
                  "auth_time": code.auth_time, "sid": code.sid}
        claims.update(self.generate_user_info(request.user, token["scope"]))
        if code.nonce:
            claims["nonce"] = code.nonce
        claims["at_hash"] = at_hash(token["access_token"], alg)
        if fault == "wrong_aud":
            claims["aud"] = "someone-else"
        elif fault == "wrong_iss":
            claims["iss"] = "https://evil.example"
        elif fault == "wrong_nonce":
            claims["nonce"] = secrets.token_urlsafe(16)
        elif fault == "no_nonce":
            claims.pop("nonce", None)
        elif fault == "expired":
            claims["iat"], claims["exp"] = now - 7200, now - 3600
        elif fault == "iat_future":
            claims["iat"], claims["exp"] = now + 3600, now + 7200
        elif fault == "multiple_aud_without_azp":
            claims["aud"] = [request.client.get_client_id(), "another-audience"]
        elif fault == "wrong_at_hash":
            claims["at_hash"] = at_hash("some other access token", alg)
        return encode_token(claims, fault, alg)


app = Flask(__name__)


def save_token(token, request):
    """Records the access token (its user, expiry, number and DPoP key) and the refresh token (its family and the
    family's key); a token request with an accepted proof gets a DPoP token (the body Authlib answers is `token`)."""
    name = request.user.name
    client_id = request.client.get_client_id()
    jkt = g.get("dpop_jkt")
    if jkt is not None:
        token["token_type"] = "DPoP"
    with STATE.lock:
        number = STATE.tokens_issued.get(name, 0) + 1
        STATE.tokens_issued[name] = number
        STATE.tokens[token["access_token"]] = AccessRecord(
            name, time.time() + token.get("expires_in", 864000), number, jkt)
        if "refresh_token" in token:
            previous = getattr(request, "refresh_token", None)
            code = getattr(request, "authorization_code", None)
            family = previous.family if previous is not None else secrets.token_urlsafe(12)
            sid = previous.sid if previous is not None else getattr(code, "sid", None)
            family_jkt = previous.jkt if previous is not None else jkt
            STATE.refresh_tokens[token["refresh_token"]] = RefreshRecord(
                client_id, name, token.get("scope", ""), family, sid, family_jkt)
        if client_id == BROWSER_CLIENT:
            STATE.browser_subjects.add(USERS[name]["sub"])


def token_lifetime(client, grant_type):
    if client.get_client_id() == BROWSER_CLIENT:
        with STATE.lock:
            return STATE.token_lifetime
    return 864000


server = AuthorizationServer(app, query_client=lambda client_id: CLIENTS.get(client_id), save_token=save_token)
server.register_token_generator("default", BearerTokenGenerator(
    lambda **_: secrets.token_urlsafe(32), lambda **_: secrets.token_urlsafe(32), token_lifetime))
server.register_grant(CodeGrant, [CodeChallenge(required=True), IDToken(require_nonce=False)])
server.register_grant(RotatingRefreshGrant)
server.register_client_auth_method("private_key_jwt", PrivateKeyJWT())


class Revocation(RevocationEndpoint):
    CLIENT_AUTH_METHODS = AUTH_METHODS

    def query_token(self, token_string, token_type_hint):
        with STATE.lock:
            return STATE.refresh_tokens.get(token_string)

    def revoke_token(self, token, request):
        with STATE.lock:
            STATE.revoked_families.add(token.family)
            STATE.stats["revocations"] += 1


server.register_endpoint(Revocation)


@app.post("/revoke")
def revoke():
    refused = fapi_refusal()
    if refused is not None:
        return refused
    jkt, refused = endpoint_proof()
    if refused is not None:
        return refused
    if jkt is not None:
        with STATE.lock:
            STATE.stats["dpop_revocations"] += 1
    return server.create_endpoint_response("revocation")


def oauth_error(error):
    answer = jsonify(dict(error.get_body()))
    answer.status_code = error.status_code
    return answer


@app.post("/par")
def par():
    with STATE.lock:
        STATE.stats["par_requests"] += 1
    enabled, _ = par_switches()
    if not enabled:
        return jsonify({"error": "not_found"}), 404
    fault = STATE.take_fault("par")
    if fault == "server_error":
        return jsonify({"error": "server_error"}), 503
    if fault == "invalid_client":
        return jsonify({"error": "invalid_client"}), 401
    if fault == "redirect":
        return redirect(STATE.issuer + "/par", code=307)
    if "request_uri" in request.form:
        return jsonify({"error": "invalid_request", "error_description": "request_uri cannot be pushed"}), 400
    refused = fapi_refusal()
    if refused is not None:
        return refused
    jkt, refused = endpoint_proof()  # before client authentication: a nonce retry may reuse the assertion
    if refused is not None:
        return refused
    if jkt is not None and request.form.get("dpop_jkt", jkt) != jkt:
        return refused_proof("dpop_jkt is not the thumbprint of the proof's key")
    try:
        client = server.authenticate_client(server.create_oauth2_request(request), AUTH_METHODS, "par")
    except OAuth2Error as error:
        return oauth_error(error)
    client_id = request.form.get("client_id", client.get_client_id())
    if client_id != client.get_client_id():
        return jsonify({"error": "invalid_request", "error_description": "client_id is another client's"}), 400
    hidden = ("client_assertion", "client_assertion_type", "client_secret")
    parameters = {name: value for name, value in request.form.items() if name not in hidden}
    parameters["client_id"] = client_id
    if jkt is not None:
        parameters["dpop_jkt"] = jkt  # RFC 9449 §10.1: the proof at /par binds the code
    request_uri = "urn:ietf:params:oauth:request_uri:" + secrets.token_urlsafe(24)
    with STATE.lock:
        STATE.pushed[request_uri] = (client_id, parameters, time.time() + 60)
        STATE.pushed_log.append(parameters)
    body = {"request_uri": request_uri, "expires_in": 60}
    if fault == "no_request_uri":
        body.pop("request_uri")
    elif fault == "bad_expires_in":
        body["expires_in"] = -60
    return jsonify(body), 201


def pushed_request():
    """Replaces the request's parameters by the pushed ones its request_uri names (spent on POST), or answers the
    error; None when the request carries no request_uri and PAR is not required."""
    request_uri = request.values.get("request_uri")
    if request_uri is None:
        _, required = par_switches()
        if not required:
            return None
        with STATE.lock:
            STATE.stats["front_channel_refused"] += 1
        return jsonify({"error": "invalid_request", "error_description": "pushed authorization requests only"}), 400
    with STATE.lock:
        entry = STATE.pushed.get(request_uri)
        if entry is not None and request.method == "POST":
            del STATE.pushed[request_uri]
    if entry is None or entry[2] < time.time() or entry[0] != request.values.get("client_id"):
        return jsonify({"error": "invalid_request_uri"}), 400
    if request.method == "POST":
        login = {name: request.form[name] for name in ("username", "password") if name in request.form}
        request.values = CombinedMultiDict([MultiDict(entry[1]), MultiDict(login)])
    return None


def bearer_user():
    """The user name of the request's live access token, or None."""
    auth = request.headers.get("Authorization", "")
    if not auth.startswith("Bearer "):
        return None
    with STATE.lock:
        record = STATE.tokens.get(auth[len("Bearer "):])
    if record is None or time.time() >= record.expires:
        return None
    return record


def resource_access():
    """The record of the request's live access token and no answer, or None and the 401 answer to give. With DPoP
    off this is bearer_user() (None, None when refused: the callers answer as they always have)."""
    on, _ = dpop_switches()
    if not on:
        return bearer_user(), None
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "dpop":  # auth schemes are case-insensitive (RFC 9110 §11.1)
        return dpop_access(token)
    record = bearer_user()
    if record is not None and record.jkt is not None:
        # A bound token without its proof is what a thief would send (RFC 9449 §7.2).
        return None, resource_challenge("invalid_token", "the access token is DPoP-bound: use the DPoP scheme")
    return record, None


def dpop_access(token):
    """The record of an access token sent as `Authorization: DPoP <token>` with a proof of its key naming it (ath)."""
    try:
        value = proof_header()
        if value is None:
            raise ProofRefused("a DPoP proof is required")
        claims, jkt = verify_proof(value, access_token=token)
    except ProofRefused as refusal:
        count_refused_proof()
        return None, resource_challenge("invalid_dpop_proof", str(refusal))
    nonce = nonce_wanted(claims, at_resource=True)
    if nonce is not None:
        return None, resource_challenge("use_dpop_nonce", "the resource server requires a DPoP nonce", nonce)
    with STATE.lock:
        record = STATE.tokens.get(token)
    if record is None or time.time() >= record.expires:
        return None, resource_challenge("invalid_token", "the access token is unknown or expired")
    if record.jkt != jkt:
        return None, resource_challenge("invalid_token", "the access token is not bound to the key of the proof")
    return record, None


def resource_challenge(error, description, nonce=None):
    """A resource's 401 with its DPoP challenge (RFC 9449 §7.1); invalid_dpop_proof names the error only."""
    answer = jsonify({"error": error, "error_description": description})
    answer.status_code = 401
    challenge = f'DPoP error="{error}"'
    if error != "invalid_dpop_proof":
        challenge += f', error_description="{description}"'
    answer.headers["WWW-Authenticate"] = challenge
    if nonce is not None:
        answer.headers["DPoP-Nonce"] = nonce
    return answer


@app.get("/.well-known/openid-configuration")
def discovery():
    issuer = STATE.issuer
    document = discovery_document(issuer)
    if STATE.take_fault("discovery_duplicate"):
        # The same member twice: a lenient parser keeps the second, the attacker's.
        text = json.dumps(document)[:-1] + ', "issuer": "https://evil.example"}'
        return app.response_class(text, mimetype="application/json")
    return jsonify(document)


def discovery_document(issuer):
    return ({
        "issuer": issuer,
        "authorization_endpoint": issuer + "/authorize",
        "token_endpoint": issuer + "/token",
        "jwks_uri": issuer + "/jwks",
        "userinfo_endpoint": issuer + "/userinfo",
        "end_session_endpoint": issuer + "/logout",
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": list(ALGORITHMS),
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none",
                                                  "private_key_jwt"],
        "token_endpoint_auth_signing_alg_values_supported": list(ALGORITHMS),
        "authorization_response_iss_parameter_supported": True,
        "backchannel_logout_supported": True,
        "backchannel_logout_session_supported": True,
    }) | par_metadata(issuer) | dpop_metadata()


def par_switches():
    """(enabled, required) for PAR: FAPI 2.0 implies both."""
    with STATE.lock:
        return STATE.par_enabled or STATE.fapi, STATE.par_required or STATE.fapi


def dpop_metadata():
    on, _ = dpop_switches()
    metadata = {"dpop_signing_alg_values_supported": list(PROOF_ALGORITHMS)} if on else {}
    with STATE.lock:
        if STATE.fapi:
            metadata["token_endpoint_auth_methods_supported"] = ["private_key_jwt"]
    return metadata


def par_metadata(issuer):
    enabled, required = par_switches()
    metadata = {"pushed_authorization_request_endpoint": issuer + "/par"} if enabled else {}
    if required:
        metadata["require_pushed_authorization_requests"] = True
    return metadata


@app.get("/jwks")
def jwks():
    with STATE.lock:
        STATE.stats["jwks_requests"] += 1
        keys = [key.as_dict(private=False) for key in STATE.decoys + list(STATE.keys.values())]
        if STATE.without_kid:
            keys = [{name: value for name, value in key.items() if name != "kid"} for key in keys]
    return jsonify({"keys": keys})


FORM = """<!doctype html><title>Sign in</title><form method="post" action="/authorize">{hidden}
<label>User <input name="username"></label><label>Password <input name="password" type="password"></label>
<button>Sign in</button></form>"""


@app.route("/authorize", methods=["GET", "POST"])
def authorize():
    refused = pushed_request()
    if refused is not None:
        return refused
    args = request.values
    browser = args.get("client_id") == BROWSER_CLIENT
    if request.method == "GET":
        with STATE.lock:
            live = STATE.provider_sessions.get(request.cookies.get("op_session", "")) if browser else None
        if live is not None:
            g.provider_sid = live[1]
            with STATE.lock:
                STATE.stats["authorizations"] += 1
            return finish_authorization(live[0])
        hidden = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in request.args.items())
        return FORM.format(hidden=hidden)
    forced_error = STATE.take_fault("authorize_error")
    if forced_error:
        query = urllib.parse.urlencode({"error": forced_error, "state": args.get("state", ""), "iss": STATE.issuer})
        return redirect(args.get("redirect_uri", REDIRECT_URI) + "?" + query)
    user = USERS.get(args.get("username", ""))
    if not user or not hmac.compare_digest(user["password"], args.get("password", "")):
        return FORM.format(hidden="") + "<p>wrong password</p>", 401
    with STATE.lock:
        STATE.stats["authorizations"] += 1
    if not browser:
        return finish_authorization(args["username"])
    cookie, sid = secrets.token_urlsafe(24), secrets.token_urlsafe(12)
    g.provider_sid = sid
    with STATE.lock:
        STATE.provider_sessions[cookie] = (args["username"], sid)
        STATE.browser_sids.add(sid)
    response = finish_authorization(args["username"])
    response.set_cookie("op_session", cookie, httponly=True, samesite="Lax", path="/")
    if STATE.take_fault("hold_redirect"):
        # The browser stops at the redirect back: the callback URL is shown, its code unused.
        location = response.headers["Location"]
        held = app.response_class(f'<!doctype html><title>Held</title><a id="callback" href="{location}">back</a>',
                                  mimetype="text/html")
        held.headers["Set-Cookie"] = response.headers["Set-Cookie"]
        return held
    return response


def finish_authorization(name):
    """Issues the code for `name` (or the forced misbehaviour) and redirects back to the client."""
    response = server.create_authorization_response(grant_user=User(name))
    location = response.headers.get("Location", "")
    parts = urllib.parse.urlsplit(location)
    query = dict(urllib.parse.parse_qsl(parts.query))
    if "code" in query:
        replay = STATE.take_fault("replay_code")
        with STATE.lock:
            if replay and STATE.last_code:
                query["code"] = STATE.last_code
            STATE.last_code = query["code"]
    query["iss"] = "https://evil.example" if STATE.take_fault("mixup_iss") else STATE.issuer
    response.headers["Location"] = urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
    return response


@app.post("/token")
def token():
    with STATE.lock:
        STATE.stats["token_requests"] += 1
    refreshing = request.form.get("grant_type") == "refresh_token"
    if STATE.take_fault("echo_assertion"):
        return jsonify({"error": "invalid_client", "error_description": request.form.get("client_assertion", "")}), 400
    refused = fapi_refusal()
    if refused is None:
        refused = token_proof()
    response = refused if refused is not None else server.create_token_response()
    if response.status_code != 200:
        with STATE.lock:
            STATE.stats["token_errors"] += 1
        return response
    finish_dpop_token_response(response, refreshing)
    if refreshing:
        add_refresh_id_token(response)
    return response


def token_proof():
    """Checks the token request's DPoP proof (before client authentication: a nonce retry may reuse the assertion)
    and keeps its jkt in g.dpop_jkt for the grants and save_token; the answer when refused, else None."""
    _, required = dpop_switches()
    jkt, refused = endpoint_proof(required)
    if refused is not None:
        return refused
    if jkt is not None and STATE.take_fault("dpop_nonce_again"):
        # A new nonce although the proof had the right one: a client retrying in a loop would never stop.
        return nonce_challenge(renew_nonce())
    g.dpop_jkt = jkt
    if jkt is not None:
        with STATE.lock:
            STATE.stats["dpop_token_requests"] += 1
    return None


def finish_dpop_token_response(response, refreshing):
    """Logs a refresh's key, hands out the current nonce (RFC 9449 §8.2) and applies the dpop_downgrade fault."""
    on, _ = dpop_switches()
    with STATE.lock:
        if refreshing:
            STATE.stats["refresh_jkts"].append(g.get("dpop_jkt"))
        nonce = STATE.dpop_nonce if on and STATE.dpop_nonce_required else None
    if nonce is not None:
        response.headers["DPoP-Nonce"] = nonce
    if STATE.take_fault("dpop_downgrade"):
        # The token stays bound; a client that trusts token_type would send it as Bearer and be refused.
        body = json.loads(response.get_data())
        body["token_type"] = "Bearer"
        response.set_data(json.dumps(body))


def add_refresh_id_token(response):
    """Adds the ID token of a refresh response (OpenID Connect Core §12.2), or the fault asked for."""
    fault = STATE.take_fault("refresh_id_token")
    if fault == "none":
        return
    body = json.loads(response.get_data())
    with STATE.lock:
        record = STATE.tokens.get(body["access_token"])
        alg = STATE.sign_with
    now = int(time.time())
    claims = {"iss": STATE.issuer, "aud": BROWSER_CLIENT, "sub": USERS[record.user]["sub"], "iat": now,
              "exp": now + 600}
    if fault == "wrong_sub":
        claims["sub"] = USERS["bob" if record.user == "alice" else "alice"]["sub"]
    elif fault == "wrong_iss":
        claims["iss"] = "https://evil.example"
    elif fault == "wrong_aud":
        claims["aud"] = "someone-else"
    elif fault == "expired":
        claims["iat"], claims["exp"] = now - 7200, now - 3600
    token = sign({"alg": alg, "typ": "JWT", "kid": STATE.keys[alg].kid}, claims, alg)
    if fault == "bad_signature":
        head, payload, _ = token.split(".")
        token = head + "." + payload + "." + b64url(secrets.token_bytes(256 if alg == "RS256" else 64))
    body["id_token"] = token
    response.set_data(json.dumps(body))


@app.get("/userinfo")
def userinfo():
    with STATE.lock:
        STATE.stats["userinfo_requests"] += 1
    record, refused = resource_access()
    if refused is not None:
        return refused
    if record is None:
        return jsonify({"error": "invalid_token"}), 401
    info = dict(USERS[record.user])
    info.pop("password")
    forced = STATE.take_fault("userinfo_sub")
    if forced:
        info["sub"] = forced
    return jsonify(info)


@app.get("/logout")
def logout():
    hint = request.args.get("id_token_hint", "")
    claims = None
    with STATE.lock:
        keys = list(STATE.keys.values())
    for key in keys:
        try:
            decoded = jwt.decode(hint, key, algorithms=list(ALGORITHMS))
            claims = decoded.claims if decoded.claims.get("iss") == STATE.issuer else None
            break
        except Exception:  # noqa: BLE001 - any failure means "not this key"
            continue
    target = request.args.get("post_logout_redirect_uri", "")
    browser = claims is not None and claims.get("aud") == BROWSER_CLIENT
    allowed = is_loopback_http(target) if browser else target == POST_LOGOUT_URI
    if claims is None or not allowed:
        return jsonify({"error": "invalid_request"}), 400
    with STATE.lock:
        STATE.stats["logouts"] += 1
        STATE.stats["last_logout_state"] = request.args.get("state")
        ended = [cookie for cookie, (_, sid) in STATE.provider_sessions.items() if sid == claims.get("sid")]
        for cookie in ended:
            del STATE.provider_sessions[cookie]
    response = redirect(target + "?" + urllib.parse.urlencode({"state": request.args.get("state", "")}))
    if browser:
        response.delete_cookie("op_session", path="/")
    return response


@app.get("/api/profile")
def api_profile():
    with STATE.lock:
        STATE.stats["api_requests"] += 1
        if "Cookie" in request.headers:
            STATE.stats["api_requests_with_cookies"] += 1
    record, refused = resource_access()
    if record is None:
        with STATE.lock:
            STATE.stats["api_unauthorized"] += 1
        if refused is not None:
            return refused
        answer = jsonify({"error": "invalid_token"})
        answer.headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
        return answer, 401
    user = USERS[record.user]
    body = {"sub": user["sub"], "name": user["name"], "email": user["email"], "token_number": record.number}
    if record.jkt is not None:
        body["cnf"] = {"jkt": record.jkt}  # RFC 9449 §6: the confirmation of a bound token
    return jsonify(body)


@app.post("/control/token-lifetime")
def set_token_lifetime():
    seconds = int(request.get_json(force=True)["seconds"])
    with STATE.lock:
        STATE.token_lifetime = seconds
    return jsonify({"ok": True})


@app.post("/control/expire-access-tokens")
def expire_access_tokens():
    now = time.time()
    with STATE.lock:
        for record in STATE.tokens.values():
            record.expires = min(record.expires, now)
    return jsonify({"ok": True})


@app.post("/control/misbehave")
def misbehave():
    with STATE.lock:
        STATE.faults.update(request.get_json(force=True))
    return jsonify({"ok": True})


@app.post("/control/sign-with")
def sign_with():
    alg = request.get_json(force=True)["alg"]
    with STATE.lock:
        STATE.sign_with = alg
    return jsonify({"ok": True})


@app.post("/control/without-kid")
def without_kid():
    decoys = int(request.get_json(force=True).get("decoys", 0))
    with STATE.lock:
        STATE.without_kid = True
        STATE.decoys = [RSAKey.generate_key(2048, {"use": "sig", "alg": "RS256"}) for _ in range(decoys)]
    return jsonify({"ok": True})


@app.post("/control/rotate")
def rotate():
    with STATE.lock:
        STATE.rotate()
    return jsonify({"ok": True, "generation": STATE.generation})


def mint_logout_token(body):
    """A back-channel logout token for the fields of `body` (sub, sid, aud, jti, fault)."""
    fault = body.get("fault")
    now = int(time.time())
    with STATE.lock:
        sid, sub = body.get("sid"), body.get("sub")
        browser = sid in STATE.browser_sids if sid else sub in STATE.browser_subjects
    audience = body.get("aud") or (BROWSER_CLIENT if browser else "web-app")
    claims = {"iss": STATE.issuer, "aud": audience, "iat": now, "exp": now + 120,
              "jti": body.get("jti") or secrets.token_urlsafe(16),
              "events": {"http://schemas.openid.net/event/backchannel-logout": {}}}
    if body.get("sub"):
        claims["sub"] = body["sub"]
    if body.get("sid"):
        claims["sid"] = body["sid"]
    if fault == "nonce":
        claims["nonce"] = secrets.token_urlsafe(16)
    elif fault == "no_event":
        claims["events"] = {"http://schemas.openid.net/event/something-else": {}}
    elif fault == "wrong_aud":
        claims["aud"] = "someone-else"
    elif fault == "no_sub_or_sid":
        claims.pop("sub", None)
        claims.pop("sid", None)
    with STATE.lock:
        alg = STATE.sign_with
    header = {"alg": alg, "typ": "logout+jwt", "kid": STATE.keys[alg].kid}
    return forge_none(claims) if fault == "alg_none" else sign(header, claims, alg)


@app.post("/control/logout-token")
def logout_token():
    return jsonify({"logout_token": mint_logout_token(request.get_json(force=True))})


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # a redirect is the receiver's answer, never followed (it could leave the loopback)


DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect)


@app.post("/control/send-logout")
def send_logout():
    body = request.get_json(force=True)
    uri = body.get("uri", "")
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return jsonify({"error": "uri must be a loopback http URL"}), 400
    data = urllib.parse.urlencode({"logout_token": mint_logout_token(body)}).encode()
    post = urllib.request.Request(uri, data=data, method="POST",
                                  headers={"Content-Type": "application/x-www-form-urlencoded"})
    try:
        with DIRECT.open(post, timeout=5) as answer:
            status = answer.status
    except urllib.error.HTTPError as error:
        status = error.code
    except (urllib.error.URLError, OSError):
        status = 502
    return jsonify({"status": status})


@app.post("/control/client-key")
def client_key():
    body = request.get_json(force=True)
    alg = body.get("alg", "ES256")
    kid = "client-" + secrets.token_urlsafe(6)
    if alg == "RS256":
        key = RSAKey.generate_key(2048, {"kid": kid, "alg": alg})
    elif alg == "ES256":
        key = ECKey.generate_key("P-256", {"kid": kid, "alg": alg})
    else:
        key = OKPKey.generate_key("Ed25519", {"kid": kid, "alg": alg})
    client = CLIENTS[body["client"]]
    with STATE.lock:
        client.method, client.public_key = "private_key_jwt", type(key).import_key(key.as_dict(private=False))
        STATE.assertion_audience = body.get("audience", "issuer")
    return jsonify({"pem": key.as_pem(private=True).decode(), "kid": kid})


@app.post("/control/par")
def control_par():
    body = request.get_json(force=True)
    with STATE.lock:
        STATE.par_enabled = bool(body.get("enabled", True))
        STATE.par_required = bool(body.get("required", False))
    return jsonify({"ok": True})


@app.post("/control/dpop")
def control_dpop():
    body = request.get_json(force=True)
    with STATE.lock:
        STATE.dpop_enabled = bool(body.get("enabled", True))
        STATE.dpop_required = bool(body.get("required", False))
        STATE.dpop_nonce_required = bool(body.get("nonce", False))
        STATE.dpop_resource_nonce = bool(body.get("resource_nonce", False))
        if STATE.dpop_nonce_required or STATE.dpop_resource_nonce:
            STATE.dpop_nonce = secrets.token_urlsafe(24)  # one nonce for every endpoint that wants one
        return jsonify({"ok": True, "nonce": STATE.dpop_nonce})


@app.post("/control/fapi")
def control_fapi():
    body = request.get_json(force=True)
    with STATE.lock:
        STATE.fapi = bool(body.get("enabled", True))
    return jsonify({"ok": True})


@app.get("/control/par-requests")
def par_requests():
    with STATE.lock:
        return jsonify({"requests": list(STATE.pushed_log)})


@app.get("/control/stats")
def stats():
    with STATE.lock:
        return jsonify(dict(STATE.stats, provider_sessions=len(STATE.provider_sessions)))


def main():
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # request lines would carry tokens (id_token_hint, code)
    httpd = make_server("127.0.0.1", 0, app, threaded=True)
    STATE.issuer = f"http://127.0.0.1:{httpd.server_port}"
    print(httpd.server_port, flush=True)

    def watch_stdin():
        while sys.stdin.buffer.read(1024):
            pass
        os._exit(0)

    threading.Thread(target=watch_stdin, daemon=True).start()
    httpd.serve_forever()


if __name__ == "__main__":
    main()
