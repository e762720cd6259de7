#!/usr/bin/env python3
"""Helpers of benches/proxy_intercept.sh (TLS interception's cost).

  serve CERT KEY PORTFILE     an HTTPS server (HTTP/1.1, one small answer per
                              request), its port written to PORTFILE
  client MODE PORT HOSTS REPEAT
                              MODE direct: TLS straight to 127.0.0.1:PORT
                              (trusting SSL_CERT_FILE), with each host as SNI;
                              MODE proxy: through the sandbox's TCP door
                              (CONNECT host:PORT), trusting the sandbox's
                              bundle. For each host (comma-separated): one
                              first request, then REPEAT more, each on a new
                              connection. Prints JSON: the first requests' and
                              the later ones' durations in ms.
"""
import http.client
import http.server
import json
import socket
import ssl
import sys
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def serve(cert, key, portfile):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    import os

    os.rename(portfile + ".tmp", portfile)
    srv.serve_forever()


def one(mode, host, port, ctx):
    t0 = time.perf_counter()
    if mode == "direct":
        raw = socket.create_connection(("127.0.0.1", port))
        tls = ctx.wrap_socket(raw, server_hostname=host)
        c = http.client.HTTPConnection(host, port)
        c.sock = tls
    else:
        c = http.client.HTTPSConnection("127.0.0.1", 3128, context=ctx)
        c.set_tunnel(host, port)
    c.request("GET", "/", headers={"Connection": "close"})
    r = c.getresponse()
    assert r.status == 200 and r.read() == b"ok\n", r.status
    c.close()
    return (time.perf_counter() - t0) * 1000


def client(mode, port, hosts, repeat):
    ctx = ssl.create_default_context()
    first, later = [], []
    for h in hosts.split(","):
        first.append(one(mode, h, int(port), ctx))
        for _ in range(int(repeat)):
            later.append(one(mode, h, int(port), ctx))
    print(json.dumps({"first": first, "later": later}))


if __name__ == "__main__":
    {"serve": serve, "client": client}[sys.argv[1]](*sys.argv[2:])
