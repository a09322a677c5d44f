#!/usr/bin/env python3
"""A stand-in for the etcd-backup-restore sidecar, which cannot be installed
here: it speaks the documented HTTP API (REFERENCE.md) — /metrics with
etcdbr_snapshot_latest_revision{kind} and etcdbr_snapshot_latest_timestamp{kind},
/healthz (200, {"health":true}) and /snapshot/latest — with a snapshot taken
"now" at revision 1, so a fresh etcd has a small rev_lag.

Usage: fake_backup_sidecar.py PORT   (binds 127.0.0.1 only)
"""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

START = int(time.time())


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/metrics":
            body = (
                "# HELP etcdbr_snapshot_latest_revision Revision number of latest snapshot taken.\n"
                "# TYPE etcdbr_snapshot_latest_revision gauge\n"
                'etcdbr_snapshot_latest_revision{kind="Full"} 1\n'
                'etcdbr_snapshot_latest_revision{kind="Incr"} 1\n'
                'etcdbr_snapshot_latest_revision{kind="Chunk"} 0\n'
                "# HELP etcdbr_snapshot_latest_timestamp Timestamp of latest snapshot taken.\n"
                "# TYPE etcdbr_snapshot_latest_timestamp gauge\n"
                f'etcdbr_snapshot_latest_timestamp{{kind="Full"}} {START}\n'
                f'etcdbr_snapshot_latest_timestamp{{kind="Incr"}} {START}\n'
                'etcdbr_snapshot_latest_timestamp{kind="Chunk"} 0\n'
            ).encode()
            ctype = "text/plain; version=0.0.4; charset=utf-8"
        elif self.path == "/healthz":
            body, ctype = b'{"health":true}', "application/json"
        elif self.path == "/snapshot/latest":
            snap = {"kind": "Full", "startRevision": 0, "lastRevision": 1,
                    "createdOn": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(START)),
                    "snapName": "Full-00000000-00000001-%d" % START}
            body, ctype = json.dumps({"fullSnapshot": snap, "deltaSnapshots": []}).encode(), "application/json"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
