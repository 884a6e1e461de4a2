#!/usr/bin/env python3
"""Load driver for issue 14 (BENCHMARKS.md §9): durable effects per second through
`secureclaw serve` with N concurrent HTTP clients, several binaries interleaved in one run.

For each round and each binary (in alternating order): a fresh state directory and demo office,
`secureclaw serve` on SQLite (WAL, synchronous=FULL) in front of the demo office over stdio, one
session; N client threads send fresh `office__send_email` calls for S seconds, each either as
one `POST /v1/call` (mode `call`: preview and commit in one request) or as `POST /v1/preview`
+ `POST /v1/commit` (mode `two-phase`). Every answer must be `completed`; afterwards the office's
state must hold exactly one e-mail per completed call (no double effect, none lost).

Also printed, from the same run: the 1-minute load average before each configuration, and this
disk's fsync latency (`write(4 KiB) + fdatasync` x 200 in the state directory's file system) at
the start and at the end. Nothing here checks a threshold.

    scripts/bench/effects_load.py --bin main=/path/secureclaw --bin branch=/path/secureclaw \\
        [--clients 8] [--secs 10] [--rounds 2] [--mode call|two-phase|both] [--tmp DIR]

`--count-fsyncs N`: instead, run N sequential calls per binary and mode under
`strace -f -c -e trace=fsync,fdatasync` and print fsyncs per call (`--mode read`: the demo
office's `noop` read tool) (the server's start-up
fsyncs are measured with 0 calls and subtracted). With `--clients` above 1 the calls come from
that many concurrent clients for `--secs` (fsyncs per completed call, i.e. per group member).

`--db-size N` (issue 14 item 5, retention): instead, per binary, two servers — `[store]
retention_ms = 0` (never sweep) and `retention_ms = 1000` with `sweep_interval_ms = 1000` —
each with `session_ttl_ms = 2000`; N/2 sessions one after another, each making one
`office__read_invoice` (INV-42: handles and vault values) and one `office__send_email` call;
then 4.5 s for the last sessions to expire and be swept; prints the SQLite file size per call
and the rows left in the main tables.
"""
import argparse
import http.client as httpc
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

OPERATOR = "bench-operator-token-0123456789abcdef"
APPROVER = "approver@corp.example"
SEND = "office__send_email"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, method, path, token, body=None):
    c = httpc.HTTPConnection("127.0.0.1", port, timeout=120)
    data = json.dumps(body) if body is not None else None
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    c.request(method, path, body=data, headers=headers)
    r = c.getresponse()
    payload = r.read()
    c.close()
    try:
        return r.status, json.loads(payload)
    except ValueError:
        return r.status, payload.decode(errors="replace")


def fsync_latency(directory, n=200):
    path = os.path.join(directory, "fsync-probe")
    buf = b"x" * 4096
    us = []
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, buf)
            os.fdatasync(fd)
            us.append((time.perf_counter() - t) * 1e6)
    finally:
        os.close(fd)
        os.unlink(path)
    us.sort()
    return us[len(us) // 2], us[len(us) * 9 // 10]


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Server:
    def __init__(self, exe, tmp, strace_out=None, limits="", extra=""):
        self.dir = tempfile.mkdtemp(prefix="scbench-", dir=tmp)
        self.office = os.path.join(self.dir, "office.json")
        self.port = free_port()
        config = os.path.join(self.dir, "config.toml")
        with open(config, "w") as f:
            f.write(
                f'[server]\nhttp_bind = "127.0.0.1:{self.port}"\n\n[gateway.limits]\n'
                "max_pending_per_session = 1000000\nsession_burst = 1000000\ntool_burst = 1000000\n"
                "session_rate_per_s = 1000000\ntool_rate_per_s = 1000000\n" + limits + "\n"
                f'[[upstream]]\nid = "office"\ntransport = "stdio"\ncommand = {json.dumps(exe)}\n'
                f'args = ["demo-tools", "--state", {json.dumps(self.office)}]\n'
                + extra
            )
        env = dict(os.environ)
        env["SECURECLAW_OPERATOR_TOKEN"] = OPERATOR
        for k in ("SECURECLAW_KEYS", "SECURECLAW_KEYS_FILE", "SECURECLAW_STATE_DIR"):
            env.pop(k, None)
        cmd = [exe, "--state-dir", os.path.join(self.dir, "state"), "serve", "--config", config]
        self.traced = bool(strace_out)
        if strace_out:
            cmd = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", strace_out] + cmd
        self.log = open(os.path.join(self.dir, "serve.log"), "w")
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 120
        while True:
            try:
                st, v = http(self.port, "GET", "/health", "")
                if st == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"server did not start: {open(self.log.name).read()}")
            time.sleep(0.05)
        st, v = http(self.port, "POST", "/v1/sessions", OPERATOR,
                     {"caller": "bench-runtime", "task": {"request": f"Send INV-42 to {APPROVER}"}})
        if st != 200:
            raise RuntimeError(f"session: {st} {v}")
        self.session = v["session_id"]

    def stop(self):
        if self.traced:
            # Stop the traced server, not strace, so that strace writes its summary.
            try:
                with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                    children = [int(x) for x in f.read().split()]
            except OSError:
                children = []
            for c in children:
                try:
                    os.kill(c, 15)
                except OSError:
                    pass
            try:
                self.proc.wait(timeout=30)
                self.log.close()
                return
            except subprocess.TimeoutExpired:
                pass
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def sent(self):
        with open(self.office) as f:
            state = json.load(f)
        subjects = {}
        for m in state.get("sent", []):
            subjects[m["subject"]] = subjects.get(m["subject"], 0) + 1
        return subjects


def one_effect(srv, mode, subject):
    if mode == "read":
        st, v = http(srv.port, "POST", "/v1/call", srv.session, {"tool": "office__noop", "arguments": {}})
        if st != 200 or v.get("status") != "completed":
            raise RuntimeError(f"read: {st} {v}")
        return
    args = {"to": APPROVER, "subject": subject, "body": "Invoice INV-42 for sign-off."}
    if mode == "call":
        st, v = http(srv.port, "POST", "/v1/call", srv.session, {"tool": SEND, "arguments": args})
    else:
        st, p = http(srv.port, "POST", "/v1/preview", srv.session, {"tool": SEND, "arguments": args})
        if st != 200 or p.get("decision") != "allow":
            raise RuntimeError(f"preview: {st} {p}")
        st, v = http(srv.port, "POST", "/v1/commit", srv.session,
                     {"tool": SEND, "arguments": args, "action_id": p["action_id"],
                      "artifact": p["artifact"]})
    if st != 200 or v.get("status") != "completed":
        raise RuntimeError(f"{mode}: {st} {v}")


def drive(srv, mode, clients, secs, tag):
    done = [0] * clients
    errors = []
    deadline = time.time() + secs

    def client(k):
        n = 0
        try:
            while time.time() < deadline:
                one_effect(srv, mode, f"{tag} c{k} n{n}")
                n += 1
                done[k] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    total = sum(done)
    time.sleep(0.2)
    sent = srv.sent()
    mine = {s: n for s, n in sent.items() if s.startswith(tag + " ")}
    double = sum(1 for n in mine.values() if n > 1)
    if mode == "read":
        return total, elapsed, total, 0, errors
    return total, elapsed, len(mine), double, errors


def db_size(bins, calls, tmp):
    """`--db-size`: the SQLite file after `calls` calls in sessions of two calls, with and
    without the retention sweep."""
    import sqlite3
    tables = ["sessions", "handles", "vault_objects", "rate_buckets", "actions", "ledger", "audit"]
    print(f"| binary | retention | calls | secureclaw.db bytes | bytes/call | free pages (bytes) | "
          "in use/call | " + " | ".join(tables) + " |")
    print("|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(tables))
    for name, exe in bins:
        for label, retention in (("off (0)", 0), ("1 s", 1000)):
            srv = Server(exe, tmp, limits="session_ttl_ms = 2000\n",
                         extra=f"\n[store]\nretention_ms = {retention}\nsweep_interval_ms = 1000\n")
            made = 0
            try:
                while made < calls:
                    st, v = http(srv.port, "POST", "/v1/sessions", OPERATOR,
                                 {"caller": "bench-runtime",
                                  "task": {"request": f"Send INV-42 to {APPROVER}"}})
                    if st != 200:
                        raise RuntimeError(f"session: {st} {v}")
                    token = v["session_id"]
                    st, v = http(srv.port, "POST", "/v1/call", token,
                                 {"tool": "office__read_invoice", "arguments": {"invoice_id": "INV-42"}})
                    if st != 200 or v.get("status") != "completed":
                        raise RuntimeError(f"read: {st} {v}")
                    args = {"to": APPROVER, "subject": f"db-size {made}", "body": "Invoice INV-42."}
                    st, v = http(srv.port, "POST", "/v1/call", token, {"tool": SEND, "arguments": args})
                    if st != 200 or v.get("status") != "completed":
                        raise RuntimeError(f"send: {st} {v}")
                    made += 2
                time.sleep(4.5)
            finally:
                srv.stop()
            db = os.path.join(srv.dir, "state", "secureclaw.db")
            size = os.path.getsize(db) + (os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0)
            conn = sqlite3.connect(db)
            counts = [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables]
            free = (conn.execute("PRAGMA freelist_count").fetchone()[0]
                    * conn.execute("PRAGMA page_size").fetchone()[0])
            conn.close()
            print(f"| {name} | {label} | {made} | {size} | {size / made:.0f} | {free} | "
                  f"{(size - free) / made:.0f} | " + " | ".join(str(c) for c in counts) + " |",
                  flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", action="append", required=True, help="NAME=PATH")
    ap.add_argument("--clients", type=int, default=None)
    ap.add_argument("--secs", type=float, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mode", default="both", choices=["call", "two-phase", "read", "both"])
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--count-fsyncs", type=int, default=0)
    ap.add_argument("--db-size", type=int, default=0)
    a = ap.parse_args()
    if a.clients is None:
        a.clients = 1 if a.count_fsyncs else 8
    bins = [b.split("=", 1) for b in a.bin]
    modes = ["call", "two-phase"] if a.mode == "both" else [a.mode]
    tmp = a.tmp or tempfile.gettempdir()

    if a.db_size:
        db_size(bins, a.db_size, tmp)
        return

    if a.count_fsyncs:
        print("| binary | mode | calls | fsync+fdatasync (server and office) | start-up only | per call |")
        print("|---|---|---:|---:|---:|---:|")
        for name, exe in bins:
            for mode in modes:
                counts = []
                calls = a.count_fsyncs
                for n in (0, a.count_fsyncs):
                    out = tempfile.mktemp(prefix="strace-", dir=tmp)
                    srv = Server(exe, tmp, strace_out=out)
                    if n and a.clients > 1:
                        # Concurrent clients for --secs: fsyncs per completed call.
                        calls, _, _, _, errors = drive(srv, mode, a.clients, a.secs, f"count-{mode}")
                        if errors:
                            print(f"  errors: {errors[:3]}")
                    else:
                        for i in range(n):
                            one_effect(srv, mode, f"count {mode} {i}")
                    srv.stop()
                    total = 0
                    with open(out) as f:
                        for line in f:
                            parts = line.split()
                            if len(parts) >= 5 and parts[-1] in ("fsync", "fdatasync"):
                                total += int(parts[3])
                    os.unlink(out)
                    counts.append(total)
                per = (counts[1] - counts[0]) / max(calls, 1)
                print(f"| {name} | {mode} | {calls} | {counts[1]} | {counts[0]} | {per:.2f} |", flush=True)
        return

    p50, p90 = fsync_latency(tmp)
    print(f"start: load average {load_average()}; fsync (4 KiB + fdatasync, {tmp}) "
          f"p50 {p50:.0f} us, p90 {p90:.0f} us; {a.clients} clients, {a.secs:g} s per row")
    print("| round | binary | mode | completed | effects/s | distinct e-mails | double effects | load average before |")
    print("|---:|---|---|---:|---:|---:|---:|---|")
    rates = {}
    for r in range(a.rounds):
        order = bins if r % 2 == 0 else list(reversed(bins))
        for mode in modes:
            for name, exe in order:
                load = load_average()
                srv = Server(exe, tmp)
                try:
                    total, elapsed, distinct, double, errors = drive(
                        srv, mode, a.clients, a.secs, f"{name}-{mode}-{r}")
                finally:
                    srv.stop()
                rate = total / elapsed
                rates.setdefault((name, mode), []).append(rate)
                print(f"| {r} | {name} | {mode} | {total} | {rate:.1f} | {distinct} | {double} | {load} |",
                      flush=True)
                if errors:
                    print(f"  errors: {errors[:3]}", flush=True)
                if distinct != total or double:
                    print("  MISMATCH: completed calls and e-mails differ", flush=True)
    p50, p90 = fsync_latency(tmp)
    print(f"end: load average {load_average()}; fsync p50 {p50:.0f} us, p90 {p90:.0f} us")
    for (name, mode), rs in sorted(rates.items()):
        print(f"median {name} {mode}: {statistics.median(rs):.1f} effects/s over {len(rs)} rounds")


if __name__ == "__main__":
    sys.exit(main())
