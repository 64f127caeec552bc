#!/usr/bin/env python3
"""Unauthenticated abuse of the manager's HTTPS ports, bounded in count and time, on 127.0.0.1 only.

Usage: abuse.py <attack> <port> [count]
  big-body      POST a body larger than the limit; prints the HTTP status (or "closed")
  amplify       <count> concurrent admission reviews just under the limit, each a pool with as many single addresses as
                fit; prints the statuses seen
  token-flood   <count> GET /metrics with random 8 and 32 KiB bearer tokens, 16 at a time; prints the statuses seen
  slow          <count> connections that complete TLS and send half a request line, held for 15 s; prints how many
                were still open at the end (the server closes idle ones)

Every attack prints one line: `<attack>: {...}` with counts by outcome.

Why Python: the attacker must not share the server's stack. It speaks TLS through OpenSSL (Python's ssl) and writes
raw, deliberately malformed HTTP on plain sockets, where a Rust client would share rustls and hyper with the manager
and refuse to send half a request line. It runs as its own process, whose file-descriptor limit it raises.
"""

import json
import os
import resource
import socket
import ssl
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

HOST = "127.0.0.1"
TIMEOUT = 30


def context():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def connect(port):
    raw = socket.create_connection((HOST, port), timeout=TIMEOUT)
    return context().wrap_socket(raw, server_hostname="localhost")


def request(port, method, path, body=b"", headers=None):
    """One HTTP/1.1 request; returns the status code, or 'closed'/'timeout'/'refused'."""
    try:
        s = connect(port)
    except (ConnectionError, ssl.SSLError, OSError):
        return "refused"
    try:
        head = [f"{method} {path} HTTP/1.1", f"Host: {HOST}", f"Content-Length: {len(body)}", "Connection: close"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        sent = 0
        while sent < len(body):
            try:
                sent += s.send(body[sent : sent + 65536])
            except (ConnectionError, ssl.SSLError, OSError):
                break  # the server may answer (413) and close before reading everything
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        line = data.split(b"\r\n", 1)[0].split()
        return int(line[1]) if len(line) >= 2 and line[1].isdigit() else "closed"
    except socket.timeout:
        return "timeout"
    except (ConnectionError, ssl.SSLError, OSError):
        return "closed"
    finally:
        s.close()


PATH = "/validate-ipam-cluster-x-k8s-io-v1alpha2-inclusterippool"


def review(size):
    """An admission review of a pool holding as many single addresses as fit in `size` bytes."""
    one = '"10.%d.%d.%d",'
    addresses = []
    length = 0
    i = 0
    while length < size - 2048:
        entry = one % ((i >> 16) & 255, (i >> 8) & 255, i & 255)
        addresses.append(entry)
        length += len(entry)
        i += 1
    pool = '{"apiVersion":"ipam.cluster.x-k8s.io/v1alpha2","kind":"InClusterIPPool","metadata":{"name":"p","namespace":"n"},"spec":{"prefix":8,"addresses":[%s]}}' % "".join(addresses).rstrip(",")
    body = '{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"ipam.cluster.x-k8s.io","version":"v1alpha2","kind":"InClusterIPPool"},"resource":{"group":"ipam.cluster.x-k8s.io","version":"v1alpha2","resource":"inclusterippools"},"name":"p","namespace":"n","operation":"CREATE","userInfo":{},"object":%s}}' % pool
    return body.encode()


def big_body(port, _count):
    return Counter([request(port, "POST", PATH, b"x" * (8 * 1024 * 1024), {"Content-Type": "application/json"})])


def amplify(port, count):
    body = review(3 * 1024 * 1024 - 4096)
    with ThreadPoolExecutor(max_workers=count) as pool:
        results = list(pool.map(lambda _: request(port, "POST", PATH, body, {"Content-Type": "application/json"}), range(count)))
    return Counter(results)


def token_flood(port, count):
    def one(i):
        # Half too long to be a token, half of a plausible size (each one a TokenReview, if it got that far).
        size = 32 * 1024 if i % 2 else 8 * 1024
        token = os.urandom(size).hex()[:size]
        return request(port, "GET", "/metrics", headers={"Authorization": f"Bearer {token}"})

    with ThreadPoolExecutor(max_workers=16) as pool:
        return Counter(pool.map(one, range(count)))


def slow(port, count):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 256)), hard))
    held, outcomes = [], Counter()
    lock = threading.Lock()

    def one(_):
        try:
            s = connect(port)
            s.sendall(b"POST " + PATH.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            with lock:
                held.append(s)
            return "opened"
        except (ConnectionError, ssl.SSLError, OSError):
            return "refused"

    with ThreadPoolExecutor(max_workers=64) as pool:
        outcomes.update(pool.map(one, range(count)))
    time.sleep(15)
    still_open = 0
    for s in held:
        try:
            s.settimeout(0.01)
            data = s.recv(1)
            if data == b"":
                continue
            still_open += 1
        except socket.timeout:
            still_open += 1
        except (ConnectionError, ssl.SSLError, OSError):
            pass
        finally:
            s.close()
    outcomes["still_open_after_15s"] = still_open
    return outcomes


ATTACKS = {"big-body": big_body, "amplify": amplify, "token-flood": token_flood, "slow": slow}

if __name__ == "__main__":
    attack, port = sys.argv[1], int(sys.argv[2])
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    result = ATTACKS[attack](port, count)
    print(f"{attack}: {json.dumps({str(k): v for k, v in result.items()}, sort_keys=True)}")
