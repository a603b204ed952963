"""The commands that talk to a server (`dcaf-like approvals`, `dcaf-like grants`) never follow a redirect:
the API key would go to the redirect's target."""

import http.server
import threading
import urllib.request

from dcaf_like.cli.approvals import RemoteInbox

KEY = "k-alice-0123456789"


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> http.server.HTTPServer:
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_redirect_to_another_server_does_not_carry_the_key() -> None:
    seen: list[str | None] = []

    class Target(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"items": []}')

    target = _serve(Target)

    class Redirector(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{target.server_port}/api/approvals")
            self.end_headers()

    redirector = _serve(Redirector)
    try:
        inbox = RemoteInbox(f"http://127.0.0.1:{redirector.server_port}", api_key=KEY, timeout=5)
        request = urllib.request.Request(f"{inbox.base}/api/approvals", headers=inbox.headers)
        status, _ = inbox.send(request)
        assert status == 302
        assert all(KEY not in (header or "") for header in seen)
    finally:
        target.shutdown()
        target.server_close()
        redirector.shutdown()
        redirector.server_close()
