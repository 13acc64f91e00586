#!/usr/bin/env python3
"""pingpong.py: a TCP ping-pong whose one connection spans a quiet window and
a flood window, for copp-syn.sh: the session is established before the flood
starts, as an operator's SSH session is.

  pingpong.py server ADDR PORT
  pingpong.py client ADDR PORT RATE QUIET FLOOD MARK
  pingpong.py session ADDR PORT RATE

The server echoes every connection. The client connects, sends a 64-byte
message RATE times a second and waits for its echo; after QUIET seconds it
creates the file MARK (the caller starts the flood on seeing it) and goes on
for FLOOD seconds. It prints one line: round-trip p50, p99 and max in us for
the quiet window, the same for the flood window, and the replies counted in
each ("- - -" for a window without one).

session (copp-nic.sh) keeps one connection and its round trips going until
killed. It prints "connected" once its connection is up and SIGUSR1 is
its own (a signal sent before then, on a loaded machine while Python
starts, would end it); each SIGUSR1 then ends a window: it prints the
window's round-trip p50, p99 and max in us and how many there were, and
starts the next.

A connection refused (the server not yet listening) is tried again for up
to 30 s.
"""
import os
import signal
import socket
import sys
import threading
import time


def serve(addr, port):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port))
    ls.listen(128)

    def echo(c):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with c:
            while True:
                b = c.recv(4096)
                if not b:
                    return
                c.sendall(b)

    while True:
        c, _ = ls.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()


def summary(rtts):
    if not rtts:
        return "- - -"
    s = sorted(rtts)

    def q(p):
        return s[min(len(s) - 1, int(p * len(s)))]

    return "%.1f %.1f %.1f" % (q(0.5) * 1e6, q(0.99) * 1e6, s[-1] * 1e6)


def connect(addr, port):
    deadline = time.monotonic() + 30
    while True:
        try:
            c = socket.create_connection((addr, port), timeout=30)
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def roundtrip(c, msg):
    """One message out, its echo back: the round trip's time in s."""
    t0 = time.monotonic()
    c.sendall(msg)
    got = 0
    while got < len(msg):
        b = c.recv(len(msg) - got)
        if not b:
            raise SystemExit("pingpong: the server closed the connection")
        got += len(b)
    return time.monotonic() - t0


def client(addr, port, rate, quiet, flood, mark):
    c = connect(addr, port)
    msg = b"x" * 64
    gap = 1.0 / rate
    windows = [[], []]
    start = time.monotonic()
    marked = False
    nxt = start
    while True:
        now = time.monotonic()
        if now - start >= quiet + flood:
            break
        if not marked and now - start >= quiet:
            open(mark, "w").close()
            marked = True
        if nxt > now:
            time.sleep(nxt - now)
        nxt += gap
        windows[1 if marked else 0].append(roundtrip(c, msg))
    print(summary(windows[0]), summary(windows[1]), len(windows[0]), len(windows[1]))


def session(addr, port, rate):
    ends = []
    signal.signal(signal.SIGUSR1, lambda *_: ends.append(1))
    c = connect(addr, port)
    msg = b"x" * 64
    gap = 1.0 / rate
    rtts = []
    ends.clear()
    print("connected", flush=True)
    nxt = time.monotonic()
    while True:
        if ends:
            ends.clear()
            print(summary(rtts), len(rtts), flush=True)
            rtts = []
        now = time.monotonic()
        if nxt > now:
            time.sleep(nxt - now)
        nxt = max(nxt + gap, time.monotonic() - gap)
        rtts.append(roundtrip(c, msg))


def main():
    a = sys.argv[1:]
    if len(a) == 3 and a[0] == "server":
        serve(a[1], int(a[2]))
    elif len(a) == 7 and a[0] == "client":
        client(a[1], int(a[2]), float(a[3]), float(a[4]), float(a[5]), a[6])
    elif len(a) == 4 and a[0] == "session":
        session(a[1], int(a[2]), float(a[3]))
    else:
        sys.exit(__doc__)
    os._exit(0)


if __name__ == "__main__":
    main()
