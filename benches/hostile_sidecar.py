#!/usr/bin/env python3
"""A hostile backup sidecar / scrape target for benches/rss_hostile_body.sh.

GET /metrics   500 MB of Prometheus comment lines, no Content-Length
               (HTTP/1.0, body ends when the connection closes), generated
               on the fly: nothing big is allocated here either.
GET /declared  the same 500 MB with a Content-Length header.
GET /healthz   200.
Prints one line per finished response: path and bytes written.
Usage: hostile_sidecar.py PORT
"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SIZE = 500 * 1000 * 1000
LINE = b"# " + b"x" * 125 + b"\n"
CHUNK = LINE * 512  # 64 KiB


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/healthz":
            body = b'{"health":true}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path not in ("/metrics", "/declared"):
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        if self.path == "/declared":
            self.send_header("Content-Length", str(SIZE))
        self.end_headers()
        sent = 0
        try:
            while sent < SIZE:
                n = min(len(CHUNK), SIZE - sent)
                self.wfile.write(CHUNK[:n])
                sent += n
        except (BrokenPipeError, ConnectionResetError):
            pass
        print(f"{self.path} bytes_written={sent}", flush=True)


ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
