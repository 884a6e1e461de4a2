#!/usr/bin/env python3
"""Interoperability: the official MCP Python SDK (`mcp` 2.x) as a 2026-07-28 client, through
`secureclaw wrap` (stdio), in front of the official MCP filesystem server (issue 16, "done
when"): the read comes back with handles; a write outside the directory the task names is
answered `input_required` (MRTR) with a sealed `requestState`; the form's `accept` approves
nothing; an out-of-band approval lets the held retry commit once; a replay, a forged state and
an altered call are refused; the SDK's own MRTR loop and a decline work; the audit log has one
commit per approved write and verifies.

Run from the repository root (CI does, see `.ci/run`):

    python3 -m venv /tmp/sc-interop && /tmp/sc-interop/bin/pip install -r tests/interop/requirements.lock
    SECURECLAW_BIN=target/release/secureclaw /tmp/sc-interop/bin/python tests/interop/python_sdk_flow.py

Needs node and `npm ci --prefix tools/mcp-servers`. Exits 0 when every step behaved as
expected, 1 otherwise. Takes about a minute (one retry waits the gateway's 25 s on purpose).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.abspath(os.environ.get("SECURECLAW_BIN", os.path.join(REPO, "target/release/secureclaw")))
FS = os.path.join(REPO, "tools/mcp-servers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
ROOT = os.path.realpath(tempfile.mkdtemp(prefix="secureclaw-interop-"))
NOTES = f"{ROOT}/notes"
STATE = f"{ROOT}/state"
IBAN = "DE89370400440532013000"
EMAIL = "alice.billing@example.com"
APPROVAL_KEY = "dev.secureclaw/approval"

failures: list[str] = []


def check(cond: bool, what: str) -> None:
    print(("  ok   " if cond else "  FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BIN, "--state-dir", STATE, *args], capture_output=True, text=True, timeout=60)


def audit_events() -> list[dict]:
    p = cli("audit", "export")
    assert p.returncode == 0, p.stderr
    return [json.loads(line)["event"] for line in p.stdout.splitlines() if line.strip()]


def text_of(r: types.CallToolResult) -> str:
    return "\n".join(c.text for c in r.content if isinstance(c, types.TextContent))


def reason_of(r: types.CallToolResult) -> str:
    """The recovery reason SecureClaw put in a tool error (structuredContent or text)."""
    sc = r.structured_content or {}
    for k in ("reason",):
        if k in sc:
            return sc[k]
        if isinstance(sc.get("recovery"), dict) and k in sc["recovery"]:
            return sc["recovery"][k]
    return text_of(r)


def setup() -> None:
    for path, what in ((BIN, "the secureclaw binary (SECURECLAW_BIN)"), (FS, "the filesystem server (npm ci --prefix tools/mcp-servers)")):
        if not os.path.exists(path):
            sys.exit(f"missing {what}: {path}")
    os.makedirs(f"{NOTES}/reports")
    os.makedirs(STATE)
    with open(f"{NOTES}/secrets.txt", "w") as f:
        f.write(f"Vendor payment details\nIBAN: {IBAN}\nContact: {EMAIL}\n")


elicitations: list[dict] = []
elicit_answer = {"action": "accept"}


async def on_elicit(ctx, params):
    """The client's elicitation callback: SecureClaw's approval form lands here."""
    elicitations.append({"message": params.message, "answer": elicit_answer["action"], "at": time.monotonic()})
    print(f"  [elicitation #{len(elicitations)} answered {elicit_answer['action']!r}]", flush=True)
    if elicit_answer["action"] == "accept":
        return types.ElicitResult(action="accept", content={})
    return types.ElicitResult(action=elicit_answer["action"])


def act_id_in(msg: str) -> str:
    i = msg.index("act_")
    j = i
    while j < len(msg) and (msg[j].isalnum() or msg[j] == "_"):
        j += 1
    return msg[i:j]


async def main() -> None:
    setup()
    task = f"Summarize my notes and write the summary into {NOTES}/reports/"
    params = StdioServerParameters(
        command=BIN,
        args=["wrap", "--state-dir", STATE, "--task", task, "--grant", "write_file", "--", "node", FS, NOTES],
    )
    errlog = open(f"{ROOT}/wrap.stderr.log", "w")
    async with Client(stdio_client(params, errlog=errlog), elicitation_callback=on_elicit) as c:
        print("1. connect (mode=auto: server/discover probe)")
        check(c.protocol_version == "2026-07-28", f"negotiated 2026-07-28 (got {c.protocol_version})")
        names = [t.name for t in (await c.list_tools()).tools]
        check("write_file" in names and "read_text_file" in names, f"tools listed: {len(names)}")

        print("2. read a file with secrets")
        r = await c.call_tool("read_text_file", {"path": f"{NOTES}/secrets.txt"})
        t = text_of(r) + json.dumps(r.structured_content or {})
        check(not r.is_error, "read succeeded")
        check("hdl_ib_" in t and "hdl_em_" in t, "IBAN and e-mail came back as hdl_ib_/hdl_em_ handles")
        check(IBAN not in t and EMAIL not in t, "no plaintext IBAN/e-mail in the result")

        print("3. write under the anchored reports/ directory (granted) runs at once")
        r = await c.call_tool("write_file", {"path": f"{NOTES}/reports/summary.txt", "content": "summary"})
        check(not r.is_error and os.path.exists(f"{NOTES}/reports/summary.txt"), "anchored write committed")
        check(not elicitations, "no elicitation for the anchored write")

        print("4. write outside reports/: raw InputRequiredResult (session-level, manual MRTR)")
        out1 = f"{NOTES}/outside1.txt"
        args1 = {"path": out1, "content": "written once"}
        raw = await c.session.call_tool("write_file", args1, allow_input_required=True)
        dump = raw.model_dump(by_alias=True, mode="json")
        check(isinstance(raw, types.InputRequiredResult), f"result type {type(raw).__name__}")
        check(dump.get("resultType") == "input_required", "resultType == input_required")
        state1 = dump.get("requestState")
        check(isinstance(state1, str) and len(state1) > 20, "requestState present")
        ir = (dump.get("inputRequests") or {}).get(APPROVAL_KEY)
        check(ir is not None and ir.get("method") == "elicitation/create", f"inputRequests[{APPROVAL_KEY!r}] is an elicitation")
        pend = (dump.get("_meta") or {}).get("dev.secureclaw/pending", {})
        act1 = pend.get("recovery", {}).get("action_id", "")
        check(act1.startswith("act_"), f"_meta dev.secureclaw/pending names {act1}")
        check(not os.path.exists(out1), "nothing written yet")

        print("4b. answering the form 'accept' approves nothing (client not trusted)")
        t0 = time.monotonic()
        again = await c.session.call_tool(
            "write_file", args1, allow_input_required=True, request_state=state1,
            input_responses={APPROVAL_KEY: types.ElicitResult(action="accept", content={})},
        )
        waited = time.monotonic() - t0
        check(isinstance(again, types.InputRequiredResult), f"still input_required after accept (server waited {waited:.1f}s)")
        check(not os.path.exists(out1), "still nothing written")
        lst = cli("approvals", "list")
        check(act1 in lst.stdout and "pending" in lst.stdout, f"{act1} still pending in `approvals list`")

        print("4c. approve out of band while a manual retry (same requestState) is held by the server")
        cli_result: dict = {}

        async def approve_later(act: str, delay: float) -> None:
            await anyio.sleep(delay)
            cli_result["list"] = await anyio.to_thread.run_sync(lambda: cli("approvals", "list"))
            cli_result["approve"] = await anyio.to_thread.run_sync(lambda: cli("approvals", "approve", act))
            cli_result["approved_at"] = time.monotonic()

        async with anyio.create_task_group() as tg:
            tg.start_soon(approve_later, act1, 3.0)
            t0 = time.monotonic()
            done = await c.session.call_tool("write_file", args1, allow_input_required=True, request_state=state1)
            t1 = time.monotonic()
        check(act1 in cli_result["list"].stdout, "still pending right before the CLI approve")
        check(cli_result["approve"].returncode == 0,
              f"`approvals approve {act1}` exit 0: {(cli_result['approve'].stdout + cli_result['approve'].stderr).strip()}")
        check(isinstance(done, types.CallToolResult) and not done.is_error,
              f"held retry committed {t1 - cli_result['approved_at']:.1f}s after the approval ({t1 - t0:.1f}s in all)")
        check(os.path.exists(out1) and open(out1).read() == "written once", "file written with the approved content")

        print("4c'. the SDK's automatic MRTR loop (Client.call_tool + elicitation callback 'accept')")
        elicitations.clear()
        out3 = f"{NOTES}/outside3.txt"
        auto_result: dict = {}

        async def approver_from_form() -> None:
            while not elicitations:
                await anyio.sleep(0.1)
            act = act_id_in(elicitations[0]["message"])
            auto_result["act"] = act
            await anyio.sleep(2.0)  # the SDK has answered 'accept' and retried by now
            lst = await anyio.to_thread.run_sync(lambda: cli("approvals", "list"))
            auto_result["pending_after_accept"] = act in lst.stdout
            auto_result["approve"] = await anyio.to_thread.run_sync(lambda: cli("approvals", "approve", act))

        async with anyio.create_task_group() as tg:
            tg.start_soon(approver_from_form)
            t0 = time.monotonic()
            auto = await c.call_tool("write_file", {"path": out3, "content": "auto"})
            t1 = time.monotonic()
        check(auto_result.get("pending_after_accept") is True, f"{auto_result.get('act')} still pending after the form was accepted")
        check(auto_result["approve"].returncode == 0, "CLI approve exit 0")
        check(not auto.is_error and open(out3).read() == "auto",
              f"Client.call_tool returned the committed result ({t1 - t0:.1f}s, {len(elicitations)} elicitation(s))")

        print("4d. replay the original requestState after the commit")
        rep = await c.session.call_tool("write_file", args1, allow_input_required=True, request_state=state1)
        check(isinstance(rep, types.CallToolResult) and rep.is_error, f"replay refused ({type(rep).__name__})")
        if isinstance(rep, types.CallToolResult):
            check("replay" in reason_of(rep), f"reason replay: {reason_of(rep)[:160]!r}")

        print("4e. the identical call again after the commit (no state) is a new action and waits again")
        os.utime(out1, (0, 0))
        fresh = await c.session.call_tool("write_file", args1, allow_input_required=True)
        check(isinstance(fresh, types.InputRequiredResult), f"identical call after use waits again ({type(fresh).__name__})")
        fdump = fresh.model_dump(by_alias=True, mode="json")
        act_fresh = fdump["_meta"]["dev.secureclaw/pending"]["recovery"]["action_id"]
        check(act_fresh != act1, f"new action id {act_fresh}")

        print("4f. a forged / altered requestState is refused")
        s = fdump["requestState"]
        forged = s[:-3] + ("AAA" if s[-3:] != "AAA" else "BBB")
        bad = await c.session.call_tool("write_file", args1, allow_input_required=True, request_state=forged)
        check(isinstance(bad, types.CallToolResult) and bad.is_error and "request_state_invalid" in reason_of(bad),
              f"forged state: {reason_of(bad)[:160] if isinstance(bad, types.CallToolResult) else type(bad).__name__!r}")
        print("4g. a valid state with an altered call")
        alt = await c.session.call_tool("write_file", {"path": out1, "content": "ALTERED"}, allow_input_required=True,
                                        request_state=s)
        alt_reason = reason_of(alt) if isinstance(alt, types.CallToolResult) else type(alt).__name__
        check(isinstance(alt, types.CallToolResult) and alt.is_error and "binding_mismatch" in alt_reason,
              f"altered call: {alt_reason[:160]!r}")

        print("4h. declining the form declines the action")
        elicitations.clear()
        elicit_answer["action"] = "decline"
        out2 = f"{NOTES}/outside2.txt"
        dec = await c.call_tool("write_file", {"path": out2, "content": "never"})
        check(dec.is_error, f"declined call is an error: {reason_of(dec)[:160]!r}")
        check(len(elicitations) == 1, f"elicited once ({len(elicitations)})")
        check(not os.path.exists(out2), "declined write not performed")
        elicit_answer["action"] = "accept"

    print("5. audit log")
    ev = audit_events()
    commits = [e for e in ev if e.get("kind") == "commit" and e.get("action_id") == act1]
    all_commits = [e for e in ev if e.get("kind") == "commit"]
    print("  commits:", [(e.get("tool"), e.get("action_id")) for e in all_commits])
    check(len(commits) == 1, f"exactly one commit of {act1} in the audit log ({len(commits)})")
    check(len(all_commits) == 3, f"three commits in all: anchored write, approved write, auto-loop write ({len(all_commits)})")
    v = cli("audit", "verify")
    check(v.returncode == 0, f"audit verify: {v.stdout.strip()[:120]}")
    errlog.close()


if __name__ == "__main__":
    try:
        anyio.run(main)
    except BaseException:
        traceback.print_exc()
        failures.append("exception")
    shutil.rmtree(ROOT, ignore_errors=True)
    print()
    if failures:
        print(f"FAILED ({len(failures)}):")
        for f in failures:
            print("  -", f)
        sys.exit(1)
    print("ALL OK")
