#!/usr/bin/env python3
"""A webhook receiver for Alertmanager's notifications, for the lab's Prometheus test.

Usage: alert_receiver.py HOST:PORT LOG_FILE

Every POST (one notification: a group of alerts, as Alertmanager's webhook sends it) is appended
to LOG_FILE as one JSON line, {"received": unix time, "receiver": the request path, "body": the
notification}, and answered 200. Nothing else is served. Standard library only.
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


def main():
    host, _, port = sys.argv[1].rpartition(":")
    log = open(sys.argv[2], "a", buffering=1)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw)
            except ValueError:
                body = {"unparsed": raw.decode("utf-8", "replace")}
            log.write(json.dumps({"received": time.time(), "receiver": self.path, "body": body}) + "\n")
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    HTTPServer((host, int(port)), Handler).serve_forever()


if __name__ == "__main__":
    main()
