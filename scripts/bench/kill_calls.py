#!/usr/bin/env python3
"""SIGKILL check of one-shot calls (issue 14 item 2), used while the crash harness change was
building: `secureclaw serve` (SQLite) takes `POST /v1/call` e-mails from 4 clients and is killed
with SIGKILL TRIALS times at random points, then restarted on the same state and office.
Prints e-mails sent, double effects (must be 0), ledger entries without a `commit` or
`crash_recovery` record (must be 0) and `secureclaw audit verify`.

    scripts/bench/kill_calls.py BIN TRIALS [SEED]
"""
import sys, os, time, random, threading, json, subprocess, signal
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import effects_load as E
exe = sys.argv[1]; trials = int(sys.argv[2]); tmp = os.environ.get("TMPDIR", "/tmp")
rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 7)
srv = E.Server(exe, tmp)
state_dir, config, office = srv.dir, os.path.join(srv.dir, "config.toml"), srv.office
session = srv.session
answered = 0
for t in range(trials):
    stop = time.time() + rng.uniform(0.2, 1.2)
    def client(k):
        global answered
        n = 0
        while time.time() < stop + 5:
            try:
                E.one_effect(srv, "call", f"kill t{t} c{k} n{n}")
                answered += 1
            except Exception:
                return
            n += 1
    th = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for x in th: x.start()
    time.sleep(max(0, stop - time.time()))
    os.kill(srv.proc.pid, signal.SIGKILL); srv.proc.wait()
    for x in th: x.join()
    time.sleep(0.3)
    # restart on the same state and office
    env = dict(os.environ); env["SECURECLAW_OPERATOR_TOKEN"] = E.OPERATOR
    srv.proc = subprocess.Popen([exe, "--state-dir", os.path.join(state_dir, "state"), "serve", "--config", config],
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=srv.log)
    deadline = time.time() + 60
    while True:
        try:
            if E.http(srv.port, "GET", "/health", "")[0] == 200: break
        except OSError: pass
        assert time.time() < deadline, "restart failed"
        time.sleep(0.05)
srv.stop()
sent = srv.sent()
double = {s: n for s, n in sent.items() if n > 1}
env = dict(os.environ); env["SECURECLAW_OPERATOR_TOKEN"] = E.OPERATOR
v = subprocess.run([exe, "--state-dir", os.path.join(state_dir, "state"), "audit", "verify"], capture_output=True, text=True, env=env)
import sqlite3
db = sqlite3.connect(os.path.join(state_dir, "state", "secureclaw.db"))
ledger = dict(db.execute("select action_id, state from ledger").fetchall())
kinds = {}
for aid, kind in db.execute("select json_extract(event,'$.action_id'), kind from audit"):
    kinds.setdefault(aid, set()).add(kind)
unaudited = [a for a, s in ledger.items() if s != "failed" and not ({"commit", "crash_recovery"} & kinds.get(a, set()))]
print(f"trials {trials}: e-mails sent {len(sent)}, answered completed {answered}, double effects {len(double)}, "
      f"ledger entries {len(ledger)} ({sum(1 for s in ledger.values() if s=='executed')} executed), "
      f"entries without commit/crash_recovery record {len(unaudited)}, effects > ledger entries: {len(sent) > len(ledger)}, "
      f"audit verify rc {v.returncode}: {v.stdout.strip()[:80]} {v.stderr.strip()[:200]}")
