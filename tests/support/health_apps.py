"""Apps for the health-check tests (rep/process_executor_health_test.py, tests/e2e/test_health_checks.py).

STOPS_ANSWERING serves HTTP on $PORT (200 on every path) for $ANSWER_FOR_S seconds (default: for ever),
then closes its listening socket and keeps running: alive, no longer answering, as a hung app is. SIGTERM
ends it.
"""

from __future__ import annotations

STOPS_ANSWERING = """
import http.server, os, threading, time
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler)
answer_for = os.environ.get("ANSWER_FOR_S")
if answer_for is None:
    server.serve_forever()
threading.Thread(target=server.serve_forever, daemon=True).start()
time.sleep(float(answer_for))
server.shutdown()
server.server_close()
print("stopped answering", flush=True)
while True:
    time.sleep(3600)
"""
