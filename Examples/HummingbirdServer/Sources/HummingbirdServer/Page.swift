// Built twice, like main.swift: see the condition there.
#if !BUILT_BY_ROOT_PACKAGE || (Hummingbird && PostgreSQL && Logging && ServiceLifecycle)
import Foundation
import Hummingbird

/// The example's HTML pages.
enum Page {
    /// The signed-in user's page: who they are, a button that calls the upstream API through the proxy, and the
    /// sign-out form.
    static func home(name: String, subject: String) -> Response {
        html(
            """
            <!doctype html>
            <html lang="en">
            <head><meta charset="utf-8"><title>Signed in</title></head>
            <body>
              <h1>Hello, <span id="user-name">\(escape(name))</span></h1>
              <p>Subject: <span id="user-sub">\(escape(subject))</span></p>
              <p><button id="call-api">Call the API</button> <span id="api-status"></span></p>
              <pre id="api-result"></pre>
              <form id="logout-form" method="post" action="/auth/logout"><button id="logout">Sign out</button></form>
              <script>
                document.getElementById("call-api").addEventListener("click", async () => {
                  const response = await fetch("/upstream/profile", {headers: {"X-CSRF": "1"}});
                  document.getElementById("api-status").textContent = String(response.status);
                  document.getElementById("api-result").textContent = await response.text();
                });
              </script>
            </body>
            </html>
            """)
    }

    /// The public page the provider sends the browser back to after signing out.
    /// The post-logout page; `confirmed` when the provider sent the browser back with the logout's own state.
    static func signedOut(confirmed: Bool) -> Response {
        html(
            """
            <!doctype html>
            <html lang="en">
            <head><meta charset="utf-8"><title>Signed out</title></head>
            <body><h1 id="signed-out">You are signed out</h1>
            <p id="logout-state">\(confirmed ? "confirmed by the provider" : "not confirmed")</p>
            <p><a href="/">Sign in again</a></p></body>
            </html>
            """)
    }

    static func html(_ text: String) -> Response {
        Response(
            status: .ok,
            headers: [
                .contentType: "text/html; charset=utf-8", .cacheControl: "no-store",
                .contentSecurityPolicy: "default-src 'self'; script-src 'unsafe-inline'; frame-ancestors 'none'",
            ],
            body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    /// `text` with HTML's special characters escaped.
    static func escape(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
#endif
