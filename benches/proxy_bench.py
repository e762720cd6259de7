#!/usr/bin/env python3
"""Load generator and upstream servers for benches/proxy.sh.

  serve-bulk PORTFILE SIZE   upstream: after a request head, send SIZE bytes
  serve-hold PORTFILE        upstream: accept and hold connections until EOF
  bulk PROXY|direct HOST PORT SIZE      print seconds for one SIZE transfer
                                        and the client's CPU seconds for it
  idle PROXY HOST PORT N                open N idle tunnels, print "ready",
                                        hold them until stdin closes

PROXY is host:port of an HTTP proxy; the tunnels are made with CONNECT.
"""

import selectors
import socket
import sys
import threading
import time

CHUNK = 1 << 20


def write_port(path, sock):
    with open(path + ".tmp", "w") as f:
        f.write(str(sock.getsockname()[1]))
    import os

    os.rename(path + ".tmp", path)


def listener():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(4096)
    return s


def read_head(s):
    data = b""
    while b"\r\n\r\n" not in data:
        b = s.recv(4096)
        if not b:
            return None
        data += b
    return data


def serve_bulk(portfile, size):
    l = listener()
    write_port(portfile, l)
    block = memoryview(b"x" * CHUNK)

    def one(c):
        try:
            if read_head(c) is None:
                return
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
            left = size
            while left > 0:
                n = min(left, CHUNK)
                c.sendall(block[:n])
                left -= n
        except OSError:
            pass
        finally:
            c.close()

    while True:
        c, _ = l.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


def serve_hold(portfile):
    l = listener()
    l.setblocking(False)
    write_port(portfile, l)
    sel = selectors.DefaultSelector()
    sel.register(l, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is l:
                while True:
                    try:
                        c, _ = l.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    sel.register(c, selectors.EVENT_READ)
            else:
                try:
                    data = key.fileobj.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()


def serve_greet(portfile):
    """Accept, send one byte (the client's "upstream is connected"), hold."""
    l = listener()
    l.setblocking(False)
    write_port(portfile, l)
    sel = selectors.DefaultSelector()
    sel.register(l, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is l:
                while True:
                    try:
                        c, _ = l.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    try:
                        c.send(b"!")
                    except OSError:
                        c.close()
                        continue
                    sel.register(c, selectors.EVENT_READ)
            else:
                try:
                    data = key.fileobj.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(key.fileobj)
                    key.fileobj.close()


def open_conn(proxy, host, port):
    if proxy == "direct":
        s = socket.create_connection((host, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s
    ph, pp = proxy.rsplit(":", 1)
    s = socket.create_connection((ph, int(pp)))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host.encode(), port, host.encode(), port))
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            raise SystemExit("proxy closed during CONNECT: %r" % head)
        head += b
    if not head.startswith(b"HTTP/1.") or head.split(b" ")[1] != b"200":
        raise SystemExit("CONNECT refused: %r" % head)
    return s


def bulk(proxy, host, port, size):
    s = open_conn(proxy, host, port)
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    t = time.perf_counter()
    cpu = time.process_time()
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    got = 0
    while True:
        n = s.recv_into(view)
        if n == 0:
            break
        got += n
    dt = time.perf_counter() - t
    cpu = time.process_time() - cpu
    if got < size:
        raise SystemExit("short transfer: %d of %d" % (got, size))
    print("%.6f %.6f" % (dt, cpu))


def idle(proxy, host, port, n):
    conns = []
    for i in range(n):
        conns.append(open_conn(proxy, host, port))
    print("ready", flush=True)
    sys.stdin.read()
    for c in conns:
        c.close()


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "serve-bulk":
        serve_bulk(args[0], int(args[1]))
    elif cmd == "serve-hold":
        serve_hold(args[0])
    elif cmd == "serve-greet":
        serve_greet(args[0])
    elif cmd == "bulk":
        bulk(args[0], args[1], int(args[2]), int(args[3]))
    elif cmd == "idle":
        idle(args[0], args[1], int(args[2]), int(args[3]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
