#!/usr/bin/env python3
"""Browser tests of web sessions: headless Chromium (Debian) driven by Selenium against the Hummingbird example
(Examples/HummingbirdServer) and the OpenID Connect provider fixture, all on 127.0.0.1.

Run it through Scripts/browser-tests.sh, which builds the example and starts PostgreSQL; by hand:

    Scripts/with-postgres.sh python3 Tests/Browser/web_sessions.py --server PATH/HummingbirdServer \
        [--fixture Tests/UserSessionsOpenIDConnectTests/Fixtures/oidc_provider.py] [--artifacts DIR] \
        [--screenshot docs/web-session-example.png] [--only NAME …]

It starts the provider fixture, two example instances A and B on free ports sharing the PostgreSQL database named
by USER_SESSIONS_POSTGRES_URL, and a small attacker site on http://localhost:PORT (another site than
http://127.0.0.1). Each scenario gets a fresh browser profile, prints `scenario NAME: passed` or
`scenario NAME: FAILED: why`, and the run ends with `N passed, N failed`; the exit status is 1 when any failed.
Screenshots of failures and every process's log stay in the artifacts directory.

The FAPI 2.0 scenario starts a provider fixture of its own, switched to FAPI 2.0 (the switch and the client's
private_key_jwt key cannot be undone, and A and B sign in with the client secret), and an instance of the example
with that key (`--fapi-client-key FILE --fapi-client-key-id KID`) keeping its records in files in the artifacts
directory; it ends both before the next scenario.

Cookies are scoped by host, not by port: the browser sends the cookie A set to B as well (that is how a fleet
behind one host name behaves) and also to the provider on 127.0.0.1, whose own cookie `op_session` it sends to the
example in turn.
"""
import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
import traceback
import urllib.parse

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import (  # noqa: E402
    JWT_SHAPED,
    AttackerSite,
    Example,
    HarnessError,
    Provider,
    new_browser,
    remove_tree,
    resident_kib,
    tail,
    wait_until,
)
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

ALICE = {"username": "alice", "password": "wonderland", "sub": "248289761001", "name": "Alice Liddell",
         "email": "alice@example.com"}
COOKIE = "user_session"  # the contract's cookie name on loopback http (no __Host- prefix without Secure)
PROVIDER_COOKIES = {"op_session"}  # the provider's own browser session, on the same host 127.0.0.1
TOKEN_KEYS = ("access_token", "refresh_token", "id_token")
OPAQUE_TOKEN_SHAPED = re.compile(r"[A-Za-z0-9_-]{40,}")


class Context:
    def __init__(self, provider, a, b, attacker, artifacts, screenshot, fixture):
        self.provider, self.a, self.b, self.attacker = provider, a, b, attacker
        self.artifacts, self.screenshot = artifacts, screenshot
        self.fixture = fixture  # the provider fixture's script, for a scenario that needs a provider of its own
        self.other_examples = []  # instances a scenario started besides A and B, whose logs are checked too
        self.cookie_values = set()  # every session cookie value seen, checked against the logs at the end
        self.page_screenshot = None  # the signed-in page, taken by the API scenario


# Steps shared by the scenarios -------------------------------------------------------------------------------------

def sign_in(ctx, browser, example, path="/"):
    """Opens `path` on `example` signed out, fills its provider's login form as alice, and returns once the
    browser is back on `path`."""
    driver = browser.driver
    driver.get(example.base + path)
    browser.wait(lambda d: d.current_url.startswith(example.provider.base + "/authorize")
                 and d.find_elements(By.NAME, "username"), 30, "the provider's login form")
    driver.find_element(By.NAME, "username").send_keys(ALICE["username"])
    driver.find_element(By.NAME, "password").send_keys(ALICE["password"])
    driver.find_element(By.CSS_SELECTOR, "form button, form [type=submit]").click()
    browser.wait(lambda d: d.current_url == example.base + path, 30, f"back on {path} after signing in")
    remember_cookie(ctx, browser)


def session_cookie(browser):
    """The example's session cookie (CDP view, with its attributes), or None."""
    found = [c for c in browser.all_cookies() if c["name"] == COOKIE]
    assert len(found) <= 1, f"more than one {COOKIE} cookie: {[(c['domain'], c['path']) for c in found]}"
    return found[0] if found else None


def remember_cookie(ctx, browser):
    cookie = session_cookie(browser)
    if cookie:
        ctx.cookie_values.add(cookie["value"])
    return cookie


def user_json(browser, expected_status=200):
    """GET /auth/user from the current page's origin; the parsed JSON body."""
    answer = browser.fetch("/auth/user")
    assert answer["status"] == expected_status, f"/auth/user: HTTP {answer['status']} {answer['body'][:200]}"
    try:
        return json.loads(answer["body"])
    except ValueError:
        raise AssertionError(f"/auth/user is not JSON: {answer['body'][:200]}") from None


def assert_alice(claims):
    for key in ("sub", "name", "email"):
        assert claims.get(key) == ALICE[key], f"/auth/user {key}: {claims.get(key)!r}"
    leaked = [key for key in claims if key in TOKEN_KEYS]
    assert not leaked, f"/auth/user carries {leaked}"


def call_api(browser):
    """Clicks #call-api on the example's page and returns (status text, parsed #api-result)."""
    driver = browser.driver
    driver.execute_script('document.getElementById("api-status").textContent = "";'
                          'document.getElementById("api-result").textContent = "";')
    driver.find_element(By.ID, "call-api").click()
    status = browser.wait(lambda d: d.find_element(By.ID, "api-status").text.strip(), 30, "#api-status filled")
    browser.wait(lambda d: d.find_element(By.ID, "api-result").text.strip(), 30, "#api-result filled")
    text = driver.find_element(By.ID, "api-result").text
    try:
        body = json.loads(text)
    except ValueError:
        body = {"unparsed": text}
    return status, body


def assert_signed_in_page(browser, example, path="/"):
    driver = browser.driver
    assert driver.current_url == example.base + path, f"at {driver.current_url}, expected {example.base}{path}"
    name = browser.wait(lambda d: d.find_element(By.ID, "user-name").text, 10, "#user-name")
    assert name == ALICE["name"], f"#user-name shows {name!r}"
    sub = driver.find_element(By.ID, "user-sub").text
    assert sub == ALICE["sub"], f"#user-sub shows {sub!r}"


def wait_stat(ctx, key, predicate, message, timeout=10):
    """Polls the provider's /control/stats until predicate(stats[key]); returns that value."""
    def check():
        value = ctx.provider.stats().get(key)
        return (value,) if value is not None and predicate(value) else None
    return wait_until(check, timeout, f"{message} (provider stat {key})")[0]


def require_stat(stats, key):
    assert key in stats, f"the provider fixture has no /control/stats {key!r} (the fixture additions are missing)"
    return stats[key]


def back_channel_logout(ctx, example, claims, **fields):
    """Has the provider send a back-channel logout for alice's session to `example` (its sub, and its sid when
    /auth/user shows one; `fields` override them); returns the receiver's status."""
    body = {"uri": example.base + "/auth/backchannel-logout", "sub": claims["sub"], "aud": "example-app"}
    if claims.get("sid"):
        body["sid"] = claims["sid"]
    body.update(fields)
    return ctx.provider.control("/control/send-logout", {k: v for k, v in body.items() if v is not None})["status"]


# Scenarios ---------------------------------------------------------------------------------------------------------

def scenario_sign_in_lands_on_return_to(ctx, browser):
    """A signed-out visit to a page goes through the provider's login form and lands back on that page (returnTo,
    query included); /auth/user shows alice; an off-site returnTo falls back to /."""
    a = ctx.a
    browser.driver.get(a.base + "/auth/user")
    assert "Alice" not in browser.driver.page_source, "signed in before signing in"
    user_json(browser, expected_status=401)
    sign_in(ctx, browser, a, "/?from=bookmark")
    assert_signed_in_page(browser, a, "/?from=bookmark")
    assert_alice(user_json(browser))
    # The provider's session is live now, so another sign-in does not show the form: it lands at once.
    for hostile in ("https://evil.example/", "//evil.example/", "/\\evil.example/"):
        try:
            browser.driver.get(a.base + "/auth/login?returnTo=" + _quote(hostile))
        except WebDriverException:
            pass  # a redirect off the loopback fails to resolve in this browser; the URL below says where it went
        browser.wait(lambda d: not d.current_url.startswith((a.base + "/auth/", ctx.provider.base)), 30,
                     f"the end of the sign-in with returnTo={hostile}")
        assert browser.driver.current_url == a.base + "/", \
            f"returnTo={hostile} landed on {browser.driver.current_url}, expected {a.base}/"
    remember_cookie(ctx, browser)


def scenario_proxied_api_survives_access_token_expiry(ctx, browser):
    """The page's API call goes through the proxy with alice's access token; after the provider expires every
    access token, the next call still shows 200: the server refreshed and replayed, the browser noticed nothing."""
    a, provider = ctx.a, ctx.provider
    sign_in(ctx, browser, a, "/")
    assert_signed_in_page(browser, a)
    status, body = call_api(browser)
    assert status == "200", f"#api-status {status}, body {body}"
    for key in ("sub", "name", "email"):
        assert body.get(key) == ALICE[key], f"API {key}: {body.get(key)!r}"
    first = body.get("token_number")
    assert isinstance(first, int), f"API token_number: {first!r}"
    ctx.page_screenshot = os.path.join(ctx.artifacts, "web-session-example.png")
    browser.screenshot(ctx.page_screenshot)
    if ctx.screenshot:  # the README's picture: the same page in a window cut to its content
        browser.driver.set_window_size(820, 370)
        browser.screenshot(ctx.screenshot)
        browser.driver.set_window_size(1024, 720)

    cookie_before = session_cookie(browser)["value"]
    before = provider.stats()
    refreshes = require_stat(before, "refreshes")
    provider.control("/control/expire-access-tokens")
    status, body = call_api(browser)
    assert status == "200", f"after the expiry: #api-status {status}, body {body}"
    assert body.get("sub") == ALICE["sub"], f"after the expiry: API sub {body.get('sub')!r}"
    assert isinstance(body.get("token_number"), int) and body["token_number"] > first, \
        f"after the expiry: token_number {body.get('token_number')!r}, was {first}: no new access token"
    after = provider.stats()
    assert after["refreshes"] > refreshes, f"refreshes {refreshes} -> {after['refreshes']}"
    assert after.get("api_unauthorized", 0) > before.get("api_unauthorized", 0), \
        "the upstream never answered 401: the expired token was not presented"
    assert browser.driver.current_url == a.base + "/", f"the page navigated away: {browser.driver.current_url}"
    assert session_cookie(browser)["value"] == cookie_before, "the session cookie changed on a server-side refresh"
    assert provider.stats().get("api_requests_with_cookies", 0) == 0, "the proxy forwarded the browser's cookies"


def scenario_cookie_attributes_and_no_token_in_browser(ctx, browser):
    """A planted cookie is replaced at sign-in; the session cookie is HttpOnly, SameSite=Lax, Path=/, host-only,
    not Secure on loopback http, opaque; the browser holds no token anywhere."""
    a = ctx.a
    driver = browser.driver
    driver.get(a.base + "/signed-out")
    planted = "planted-by-an-attacker-0123456789abcdef"
    driver.add_cookie({"name": COOKIE, "value": planted, "path": "/"})
    sign_in(ctx, browser, a, "/")
    assert_signed_in_page(browser, a)

    headers = [h for h in browser.set_cookie_headers() if h.split("=", 1)[0].strip() == COOKIE]
    setting = [h for h in headers if h.split("=", 1)[1].split(";", 1)[0].strip()]
    assert setting, f"no Set-Cookie for {COOKIE} seen: {headers}"
    raw = setting[-1]
    value, *attributes = [part.strip() for part in raw.split("=", 1)[1].split(";")]
    names = {attr.split("=", 1)[0].strip().lower(): attr.split("=", 1)[1].strip() if "=" in attr else ""
             for attr in attributes}
    assert "httponly" in names, f"no HttpOnly: {_redact(raw, value)}"
    assert names.get("samesite", "").lower() == "lax", f"SameSite is not Lax: {_redact(raw, value)}"
    assert names.get("path") == "/", f"Path is not /: {_redact(raw, value)}"
    assert "domain" not in names, f"a Domain attribute: {_redact(raw, value)}"
    assert "secure" not in names, f"Secure on loopback http (the browser would drop it): {_redact(raw, value)}"

    cookie = session_cookie(browser)
    assert cookie is not None, "no session cookie in the browser"
    assert cookie["value"] == value, "the stored cookie is not the one last set"
    assert cookie["value"] != planted, "the planted cookie survived the sign-in (session fixation)"
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/", f"stored as {cookie}"
    assert cookie["domain"] == "127.0.0.1", f"cookie domain {cookie['domain']!r} (expected host-only 127.0.0.1)"
    assert not cookie["secure"], "stored as Secure"
    assert re.fullmatch(r"[A-Za-z0-9_\-+/=.~%]{22,}", value), \
        f"the cookie value is not an opaque identifier of >= 128 bits (length {len(value)})"
    assert not JWT_SHAPED.search(value), "the cookie value is a JWT"
    assert driver.execute_script("return document.cookie").find(value) < 0, "the session cookie is readable by scripts"

    cookies = browser.all_cookies()
    others = sorted({c["name"] for c in cookies} - {COOKIE} - PROVIDER_COOKIES)
    assert not others, f"cookies other than {COOKIE} and the provider's own: {others}"
    status, api = call_api(browser)
    assert status == "200", f"#api-status {status}"
    texts = {"page source": driver.page_source, "API result": json.dumps(api)}
    texts.update({f"cookie {c['name']}": c["value"] for c in cookies})
    local, session = browser.storage()
    assert not local, f"localStorage holds {sorted(local)}"
    assert not session, f"sessionStorage holds {sorted(session)}"
    claims = user_json(browser)
    texts["/auth/user"] = json.dumps(claims)
    # The fixture's access and refresh tokens are opaque (43 base64url characters) and it does not tell them to a
    # test, so what the page shows is checked by shape: nothing as long as a token but the cookies themselves.
    cookie_values = {c["value"] for c in cookies}
    for where, text in texts.items():
        runs = [run for run in OPAQUE_TOKEN_SHAPED.findall(text) if run not in cookie_values]
        assert not runs, f"a token-sized string ({len(runs[0])} characters) in the {where}"
    responses = browser.response_headers(a.base)
    assert responses, "no response of the example was recorded"
    for url, headers in responses:
        texts[f"headers of {url.split('?')[0]}"] = json.dumps(headers)
    for where, text in texts.items():
        assert not JWT_SHAPED.search(text), f"a JWT-shaped string in the {where}"
        for key in TOKEN_KEYS:
            assert f'"{key}"' not in text and f"{key}=" not in text, f"{key} in the {where}"


def scenario_cross_site_logout_and_proxy_without_csrf_header_refused(ctx, browser):
    """A form on another site that POSTs to /auth/logout is refused (403) and the user stays signed in; a proxy
    call without X-CSRF is refused (403) and one from another site never reaches the upstream."""
    a, provider, attacker = ctx.a, ctx.provider, ctx.attacker
    driver = browser.driver
    sign_in(ctx, browser, a, "/")
    cookie = session_cookie(browser)["value"]
    logouts = provider.stats()["logouts"]

    driver.get(attacker.page_posting_to(a.base + "/auth/logout"))
    browser.wait(lambda d: not d.current_url.startswith(attacker.origin), 30, "the attacker's form submitted")
    statuses = [status for url, status in browser.response_statuses(a.base + "/auth/logout")]
    assert statuses == [403], f"cross-site POST /auth/logout answered {statuses}, expected [403]"
    assert driver.current_url == a.base + "/auth/logout", f"the refused POST led to {driver.current_url}"
    assert provider.stats()["logouts"] == logouts, "the provider's end-session endpoint was reached"
    assert_alice(user_json(browser))
    assert session_cookie(browser)["value"] == cookie, "the session cookie changed"

    answer = browser.fetch("/upstream/profile")
    assert answer["status"] == 403, f"proxy call without X-CSRF: HTTP {answer['status']}"
    answer = browser.fetch("/upstream/profile", headers={"X-CSRF": "1"})
    assert answer["status"] == 200, f"proxy call with X-CSRF: HTTP {answer['status']}"

    api_requests = require_stat(provider.stats(), "api_requests")
    driver.get(attacker.origin + "/blank")
    outcome = driver.execute_async_script(
        """
        const [url, done] = arguments;
        fetch(url, {mode: "no-cors", credentials: "include"}).then(() => done("sent"), (e) => done(String(e)));
        """, a.base + "/upstream/profile")
    assert outcome == "sent", f"the cross-site fetch failed in the browser: {outcome}"
    driver.get(a.base + "/signed-out")
    assert provider.stats()["api_requests"] == api_requests, "a cross-site proxy call reached the upstream API"
    assert_alice(user_json(browser))


def scenario_sign_out_ends_local_and_provider_sessions(ctx, browser):
    """Clicking #logout clears the cookie, /auth/user is 401, the provider's session ends, and the next sign-in
    shows the provider's login form again."""
    a, provider = ctx.a, ctx.provider
    driver = browser.driver
    sign_in(ctx, browser, a, "/")
    sessions = require_stat(provider.stats(), "provider_sessions")
    assert sessions >= 1, f"provider_sessions {sessions} after a sign-in"
    driver.find_element(By.ID, "logout").click()
    browser.wait(lambda d: d.current_url.startswith(a.base + "/signed-out") and d.find_elements(By.ID, "signed-out"),
                 30, "the signed-out page")
    confirmation = driver.find_element(By.ID, "logout-state").text
    assert confirmation == "confirmed by the provider", f"the post-logout state was not checked: {confirmation!r}"
    assert session_cookie(browser) is None, "the session cookie is still in the browser"
    user_json(browser, expected_status=401)
    wait_stat(ctx, "provider_sessions", lambda n: n == sessions - 1, f"provider_sessions back to {sessions - 1}")
    remaining = [c["name"] for c in browser.all_cookies() if c["name"] in PROVIDER_COOKIES]
    assert not remaining, f"the provider's cookies {remaining} are still in the browser"
    # The back button never shows the signed-in page again (pages behind the session are no-store).
    driver.back()
    browser.wait(lambda d: not d.current_url.startswith(a.base + "/signed-out"), 30, "went back")
    shown = [e.text for e in driver.find_elements(By.ID, "user-name")]
    assert not shown, f"the back button showed the signed-in page again: {shown}"
    driver.get(a.base + "/auth/login?returnTo=%2F")
    browser.wait(lambda d: d.current_url.startswith(provider.base + "/authorize")
                 and d.find_elements(By.NAME, "username"), 30, "the provider's login form (no silent sign-in)")
    driver.get(a.base + "/")
    browser.wait(lambda d: d.current_url.startswith(provider.base + "/authorize"), 30,
                 "/ sends a signed-out browser to the provider")


def _back_channel(ctx, browser, receiver, next_request, signed_in=False):
    a = ctx.a
    if not signed_in:
        sign_in(ctx, browser, a, "/")
    claims = user_json(browser)
    assert_alice(claims)
    if next_request is not a:
        # The cookie A set is sent to B too (same host); B resolves it through the shared PostgreSQL.
        browser.driver.get(next_request.base + "/")
        assert_signed_in_page(browser, next_request)
    status = back_channel_logout(ctx, receiver, claims)
    assert 200 <= status < 300, f"the example answered the back-channel logout with HTTP {status}"
    sent = time.monotonic()
    wait_until(lambda: browser.fetch("/auth/user")["status"] == 401, 1.0,
               f"{next_request.name} still knows the browser's session 1 s after the back-channel logout")
    elapsed = time.monotonic() - sent
    browser.driver.get(next_request.base + "/auth/user")
    user_json(browser, expected_status=401)
    api = browser.fetch("/upstream/profile", headers={"X-CSRF": "1"})
    assert api["status"] == 401, f"proxy call after the back-channel logout: HTTP {api['status']}"
    return elapsed


def scenario_backchannel_logout_ends_session(ctx, browser):
    """Forged logout tokens and one for another session leave the browser signed in; a back-channel logout the
    provider sends to A ends the browser's session on A within 1 s."""
    a = ctx.a
    sign_in(ctx, browser, a, "/")
    claims = user_json(browser)
    for fault in ("alg_none", "wrong_aud", "no_event", "nonce"):
        status = back_channel_logout(ctx, a, claims, fault=fault)
        assert 400 <= status < 500, f"a logout token with fault {fault} was answered with HTTP {status}"
    back_channel_logout(ctx, a, claims, sub=None, sid="another-session-of-the-provider")
    assert_alice(user_json(browser))
    assert session_cookie(browser) is not None, "the session cookie is gone after logout tokens for no session"
    elapsed = _back_channel(ctx, browser, a, a, signed_in=True)
    print(f"  session ended {elapsed * 1000:.0f} ms after the logout token was delivered")


def scenario_backchannel_logout_reaches_other_instance(ctx, browser):
    """A back-channel logout sent to A ends the browser's session within 1 s when its next request goes to B,
    which shares A's PostgreSQL (and had served this browser before)."""
    elapsed = _back_channel(ctx, browser, ctx.a, ctx.b)
    print(f"  session ended on B {elapsed * 1000:.0f} ms after the logout token was delivered to A")


def scenario_restart_keeps_browser_signed_in(ctx, browser):
    """SIGTERM to A (clean exit); meanwhile B serves the browser; A started again on the same port and database:
    the browser is still signed in without visiting the provider, and the proxied API still answers."""
    a, provider = ctx.a, ctx.provider
    sign_in(ctx, browser, a, "/")
    status, _ = call_api(browser)
    assert status == "200", f"#api-status {status} before the restart"
    code = a.stop()
    assert code == 0, f"A exited with {code} after SIGTERM (expected 0 within 30 s)"
    before = provider.stats()
    browser.driver.get(ctx.b.base + "/")
    assert_signed_in_page(browser, ctx.b)
    a.start()
    browser.driver.get(a.base + "/")
    assert_signed_in_page(browser, a)
    assert_alice(user_json(browser))
    status, body = call_api(browser)
    assert status == "200" and body.get("sub") == ALICE["sub"], f"after the restart: #api-status {status} {body}"
    after = provider.stats()
    assert after["authorizations"] == before["authorizations"], "the browser signed in again at the provider"


def _callback_url_stopped_in(ctx, browser, example):
    """Signs in as alice in `browser` but stops at the provider's redirect back: the provider shows the callback
    URL as a link instead of redirecting (fault hold_redirect), so its code stays unused. Returns the URL."""
    driver = browser.driver
    ctx.provider.control("/control/misbehave", {"hold_redirect": True})
    driver.get(example.base + "/auth/login?returnTo=%2F")
    browser.wait(lambda d: d.find_elements(By.NAME, "username"), 30, "the provider's login form")
    driver.find_element(By.NAME, "username").send_keys(ALICE["username"])
    driver.find_element(By.NAME, "password").send_keys(ALICE["password"])
    driver.find_element(By.CSS_SELECTOR, "form button, form [type=submit]").click()
    link = browser.wait(lambda d: d.find_elements(By.ID, "callback"), 30, "the provider's held redirect")[0]
    url = link.get_attribute("href")
    assert "/auth/callback?" in url, f"the held redirect is {url}"
    return url


def scenario_login_csrf_callback_from_another_profile_signs_nobody_in(ctx, browser):
    """The attacker's browser stops at the redirect back; the victim's browser (another profile) opens that
    callback URL: nobody is signed in there, and the page says why. The attacker's own browser still could."""
    a = ctx.a
    url = _callback_url_stopped_in(ctx, browser, a)
    tokens_before = require_stat(ctx.provider.stats(), "token_requests")
    victim = new_browser()
    try:
        victim.driver.get(url)
        code = victim.wait(lambda d: d.find_elements(By.ID, "code") and d.find_element(By.ID, "code").text, 30,
                           "the sign-in failed page")
        assert code == "pendingSignInMissing", f"the page names {code!r}"
        reason = victim.driver.find_element(By.ID, "reason").text
        assert "not started in this browser" in reason, f"the page says {reason!r}"
        assert session_cookie(victim) is None, "the victim's browser got a session cookie"
        # (The failed page's own policy forbids fetch(), so /auth/user is opened as a page.)
        victim.driver.get(a.base + "/auth/user")
        body = victim.wait(lambda d: d.find_element(By.TAG_NAME, "body").text, 10, "/auth/user answered")
        assert "unauthenticated" in body, f"/auth/user in the victim's browser: {body[:200]}"
        # The victim opens the app: not signed in as anybody, sent to the provider's login form.
        victim.driver.get(a.base + "/")
        victim.wait(lambda d: d.current_url.startswith(ctx.provider.base + "/authorize"), 30,
                    "the victim is signed out")
    finally:
        victim.quit()
    tokens_after = require_stat(ctx.provider.stats(), "token_requests")
    assert tokens_after == tokens_before, "the attacker's code reached the token endpoint"
    # In the browser that started it, the same URL completes (it was a valid callback all along).
    browser.driver.find_element(By.ID, "callback").click()
    browser.wait(lambda d: d.current_url == a.base + "/", 30, "the attacker's own browser completes")
    assert_signed_in_page(browser, a)


def scenario_login_flood_keeps_nothing_and_a_real_sign_in_succeeds(ctx, browser):
    """10,000 GET /auth/login from a script on loopback: every one answered, no pending sign-in stored anywhere
    (the PostgreSQL table the server-side mode would use stays empty), and then a real sign-in succeeds."""
    from concurrent.futures import ThreadPoolExecutor
    a = ctx.a
    before = resident_kib(a.process.popen.pid)

    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None  # the 302 to the provider is the answer looked at
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect)

    def login(_):
        try:
            with opener.open(a.base + "/auth/login?returnTo=%2F", timeout=10):
                return False
        except urllib.error.HTTPError as answer:
            return answer.code == 302 and "user_session_signin=" in (answer.headers.get("Set-Cookie") or "")
    with ThreadPoolExecutor(max_workers=8) as pool:
        answered = sum(pool.map(login, range(10_000)))
    assert answered == 10_000, f"{answered} of 10,000 logins were redirected with the sign-in cookie"
    after = resident_kib(a.process.popen.pid)
    pending = _pending_rows()
    assert pending == 0, f"{pending} pending sign-ins stored on the server"
    print(f"  login flood: example A resident memory {before} KiB before, {after} KiB after 10,000 logins; "
          f"{pending} pending sign-ins stored", flush=True)
    sign_in(ctx, browser, a, "/")
    assert_signed_in_page(browser, a)


def _pending_rows():
    """The rows of user_sessions_oidc_pending in the test database (0 when the table was never created)."""
    import glob
    import shutil
    import subprocess
    psql = shutil.which("psql") or (sorted(glob.glob("/usr/lib/postgresql/*/bin/psql")) or ["psql"])[-1]
    url = os.environ["USER_SESSIONS_POSTGRES_URL"]
    query = "SELECT count(*) FROM pg_tables WHERE tablename = 'user_sessions_oidc_pending'"
    exists = subprocess.run([psql, url, "-tAc", query], capture_output=True, text=True, check=True).stdout
    if exists.strip() == "0":
        return 0
    out = subprocess.run([psql, url, "-tAc", "SELECT count(*) FROM user_sessions_oidc_pending"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def scenario_fapi2_sign_in_pushes_its_request_and_the_proxy_sends_dpop_bound_tokens(ctx, browser):
    """The FAPI 2.0 mode, against a provider fixture of its own switched to FAPI 2.0 (PAR and DPoP required,
    private_key_jwt only, ES256 ID tokens) and an instance started with the client's ES256 key (--fapi-client-key):
    the browser signs in through the login form with a pushed request (its authorization URL carries only client_id
    and request_uri); the proxied API answers with a DPoP-bound token (cnf.jkt, the key the sign-in named); after
    the provider expires every access token the proxy refreshes with a proof of that key and the call still
    answers; the provider confirms the sign-out."""
    provider = Provider(ctx.fixture, ctx.artifacts, name="provider-fapi")
    example = None
    try:
        provider.control("/control/fapi", {"enabled": True})
        provider.control("/control/sign-with", {"alg": "ES256"})  # FAPI 2.0 allows no RS256 ID token
        key = provider.control("/control/client-key", {"client": "example-app", "alg": "ES256"})
        key_path = os.path.join(ctx.artifacts, "fapi-client-key.pem")
        with open(os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
            handle.write(key["pem"])
        # Its records in files: A and B's PostgreSQL namespace holds alice's tokens from the other provider.
        example = Example("FAPI", ctx.a.binary, provider, ctx.artifacts, store=os.path.join(ctx.artifacts, "fapi"),
                          fapi_key=(key_path, key["kid"]))
        ctx.other_examples.append(example)
        example.start()

        sign_in(ctx, browser, example, "/")
        assert_signed_in_page(browser, example)
        assert_alice(user_json(browser))
        authorizations = browser.requested_urls(provider.base + "/authorize")
        assert authorizations, "the browser never went to the provider's /authorize"
        for url in authorizations:
            names = sorted(urllib.parse.parse_qs(urllib.parse.urlsplit(url).query, keep_blank_values=True))
            assert names == ["client_id", "request_uri"], \
                f"the browser's authorization request carried {names}, expected only client_id and request_uri"

        status, body = call_api(browser)
        assert status == "200", f"#api-status {status}, body {body}"
        assert body.get("sub") == ALICE["sub"], f"API sub {body.get('sub')!r}"
        jkt = (body.get("cnf") or {}).get("jkt")
        assert isinstance(jkt, str) and len(jkt) == 43, \
            f"the upstream saw no DPoP-bound token (cnf {body.get('cnf')!r}): the proxy sent a Bearer token"
        pushed = provider.pushed_requests()
        assert pushed and pushed[-1].get("dpop_jkt") == jkt, \
            f"the pushed request's dpop_jkt {pushed[-1].get('dpop_jkt') if pushed else None!r} is not the " \
            f"token's key {jkt!r}"
        stats = provider.stats()
        assert require_stat(stats, "par_requests") >= 1, f"par_requests {stats['par_requests']}"
        assert require_stat(stats, "dpop_token_requests") >= 1, f"dpop_token_requests {stats['dpop_token_requests']}"
        assert stats["last_auth"] == "private_key_jwt", f"last_auth {stats['last_auth']!r}"
        assert require_stat(stats, "front_channel_refused") == 0, "the provider refused a front-channel request"

        first = body.get("token_number")
        assert isinstance(first, int), f"API token_number: {first!r}"
        refreshed = len(require_stat(stats, "refresh_jkts"))
        provider.control("/control/expire-access-tokens")
        status, body = call_api(browser)
        assert status == "200", f"after the expiry: #api-status {status}, body {body}"
        assert isinstance(body.get("token_number"), int) and body["token_number"] > first, \
            f"after the expiry: token_number {body.get('token_number')!r}, was {first}: no new access token"
        assert (body.get("cnf") or {}).get("jkt") == jkt, f"after the refresh: cnf {body.get('cnf')!r}, was {jkt}"
        stats = provider.stats()
        assert stats["refresh_jkts"][refreshed:] == [jkt], \
            f"refreshes since the expiry presented proofs of {stats['refresh_jkts'][refreshed:]}, expected [{jkt}]"
        assert stats["last_auth"] == "private_key_jwt", f"last_auth {stats['last_auth']!r} after the refresh"
        for key_name in ("dpop_refused", "token_errors", "refresh_reuse_detected", "api_requests_with_cookies"):
            assert require_stat(stats, key_name) == 0, f"provider stat {key_name} is {stats[key_name]}"

        browser.driver.find_element(By.ID, "logout").click()
        browser.wait(lambda d: d.current_url.startswith(example.base + "/signed-out")
                     and d.find_elements(By.ID, "signed-out"), 30, "the signed-out page")
        confirmation = browser.driver.find_element(By.ID, "logout-state").text
        assert confirmation == "confirmed by the provider", f"the post-logout state: {confirmation!r}"
        user_json(browser, expected_status=401)
        code = example.stop()
        assert code == 0, f"the FAPI instance exited with {code} after SIGTERM (expected 0 within 30 s)"
    finally:
        if example:
            example.close()
        provider.close()


SCENARIOS = [
    scenario_login_csrf_callback_from_another_profile_signs_nobody_in,
    scenario_login_flood_keeps_nothing_and_a_real_sign_in_succeeds,
    scenario_sign_in_lands_on_return_to,
    scenario_proxied_api_survives_access_token_expiry,
    scenario_cookie_attributes_and_no_token_in_browser,
    scenario_cross_site_logout_and_proxy_without_csrf_header_refused,
    scenario_sign_out_ends_local_and_provider_sessions,
    scenario_backchannel_logout_ends_session,
    scenario_backchannel_logout_reaches_other_instance,
    scenario_restart_keeps_browser_signed_in,
    scenario_fapi2_sign_in_pushes_its_request_and_the_proxy_sends_dpop_bound_tokens,
]


def check_logs(ctx):
    """No session cookie value and no JWT reached the example's logs; the proxy never forwarded a cookie and no
    refresh token was presented twice."""
    for example in (ctx.a, ctx.b, *ctx.other_examples):
        with open(example.log_path, errors="replace") as handle:
            log = handle.read()
        assert not JWT_SHAPED.search(log), f"a JWT-shaped string in {example.log_path}"
        leaked = [v for v in ctx.cookie_values if len(v) >= 16 and v in log]
        assert not leaked, f"a session cookie value in {example.log_path}"
    assert ctx.cookie_values, "no session cookie was seen"
    stats = ctx.provider.stats()
    assert stats.get("api_requests_with_cookies", 0) == 0, "the proxy forwarded the browser's cookies upstream"
    assert stats.get("refresh_reuse_detected", 0) == 0, "a spent refresh token was presented again"


def _quote(text):
    from urllib.parse import quote
    return quote(text, safe="")


def _redact(header, value):
    return header.replace(value, "<value>") if value else header


def run(args):
    postgres_url = os.environ.get("USER_SESSIONS_POSTGRES_URL")
    if not postgres_url:
        raise HarnessError("USER_SESSIONS_POSTGRES_URL is not set: run through Scripts/with-postgres.sh")
    os.makedirs(args.artifacts, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="browser-tests.", dir=args.artifacts)
    owned = []
    results = []
    try:
        provider = Provider(args.fixture, workdir)
        owned.append(provider)
        a = Example("A", args.server, provider, workdir, postgres_url)
        owned.append(a)
        a.start()  # A first: it creates the tables B then finds
        b = Example("B", args.server, provider, workdir, postgres_url)
        owned.append(b)
        b.start()
        attacker = AttackerSite()
        owned.append(attacker)
        ctx = Context(provider, a, b, attacker, workdir, args.screenshot, args.fixture)
        print(f"provider {provider.base}, example A {a.base}, example B {b.base}, attacker {attacker.origin}")
        for scenario in SCENARIOS:
            name = scenario.__name__.removeprefix("scenario_")
            if args.only and name not in args.only:
                continue
            browser = new_browser()
            try:
                scenario(ctx, browser)
                results.append((name, None))
                print(f"scenario {name}: passed", flush=True)
            except Exception as error:  # noqa: BLE001 - every failure is reported, then the next scenario runs
                results.append((name, error))
                shot = os.path.join(workdir, f"failed-{name}.png")
                try:
                    browser.screenshot(shot)
                except Exception:  # noqa: BLE001
                    shot = "(no screenshot)"
                detail = "".join(traceback.format_exception_only(error)).strip()
                print(f"scenario {name}: FAILED: {detail}\n  at {browser.driver.current_url}; screenshot {shot}",
                      flush=True)
                if not isinstance(error, AssertionError):
                    traceback.print_exc()
            finally:
                browser.quit()
            if a.process.popen.poll() is not None:
                a.start()  # a scenario that failed mid-restart leaves A down; the next ones need it
        if not args.only:
            try:
                check_logs(ctx)
                results.append(("logs_and_upstream_hold_no_secret", None))
                print("scenario logs_and_upstream_hold_no_secret: passed")
            except AssertionError as error:
                results.append(("logs_and_upstream_hold_no_secret", error))
                print(f"scenario logs_and_upstream_hold_no_secret: FAILED: {error}")
    finally:
        for thing in reversed(owned):
            thing.close()
    failed = [name for name, error in results if error]
    if failed:
        for path in sorted(os.listdir(workdir)):
            if path.endswith(".log"):
                print(f"--- {path} (last lines) ---\n{tail(os.path.join(workdir, path))}")
        print(f"artifacts (logs, screenshots): {workdir}")
    else:
        remove_tree(workdir) if not args.keep else print(f"artifacts: {workdir}")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed or not results else 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="the built HummingbirdServer executable")
    parser.add_argument("--fixture", default=os.path.join(
        root, "Tests/UserSessionsOpenIDConnectTests/Fixtures/oidc_provider.py"))
    parser.add_argument("--artifacts", default=os.path.join(tempfile.gettempdir(), "browser-tests"))
    parser.add_argument("--screenshot", help="also write the signed-in page's screenshot here")
    parser.add_argument("--only", nargs="*", help="run only these scenarios (names without scenario_)")
    parser.add_argument("--keep", action="store_true", help="keep logs and screenshots of a passing run")
    args = parser.parse_args()
    # SIGTERM and SIGHUP unwind like an exception, so every process this run started is ended on the way out.
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda received, _frame: sys.exit(128 + received))
    try:
        return run(args)
    except HarnessError as error:
        print(f"browser tests: setup failed: {error}", file=sys.stderr)
        print("0 passed, 1 failed")
        return 1


if __name__ == "__main__":
    sys.exit(main())
