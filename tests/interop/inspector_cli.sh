#!/usr/bin/env bash
# The README's MCP Inspector CLI recipe ("Claude Desktop, Cursor, MCP Inspector"), run as
# written against `secureclaw wrap` (issue 15 "First hour"): list the tools; a write goes
# pending; `approvals approve` decides it; the identical call from a later `--cli` run (a new
# `wrap` process) runs once; a changed call waits again.
#   SECURECLAW_BIN=target/release/secureclaw tests/interop/inspector_cli.sh
# Needs Node.js with npx and the npm registry (the Inspector and the filesystem server are
# fetched by npx at the versions the README pins).
set -euo pipefail
BIN="${SECURECLAW_BIN:?set SECURECLAW_BIN to the secureclaw binary}"
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"
INSPECTOR="@modelcontextprotocol/inspector@2.12.0"
FS="@modelcontextprotocol/server-filesystem@2026.8.31"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
notes="$work/notes"
state="$work/state"
mkdir -p "$notes"
echo "a note" > "$notes/a.txt"

# The first npx run of each package downloads it, which can outlast the Inspector's 15 s
# connect timeout: fetch both once (stdin closed: the server exits at once).
npx -y "$FS" "$notes" </dev/null >/dev/null 2>&1 || true
npx -y "$INSPECTOR" --help >/dev/null 2>&1 || true

recipe() { # the README's command line, then the Inspector's method arguments
  npx -y "$INSPECTOR" --cli "$BIN" wrap --state-dir "$state" \
    -- npx -y "$FS" "$notes" "$@" 2>>"$work/stderr.log"
}
fail() { echo "inspector_cli: $*" >&2; tail -n 20 "$work/stderr.log" >&2 || true; exit 1; }

recipe --method tools/list >"$work/list.json" || fail "tools/list failed"
grep -q '"read_text_file"' "$work/list.json" || fail "tools/list lacks read_text_file"

write() { recipe --method tools/call --tool-name write_file --tool-arg "path=$notes/b.txt" --tool-arg "content=$1"; }
write hello >"$work/first.json" || true
grep -q '"pending_confirmation"' "$work/first.json" || fail "the write did not wait: $(cat "$work/first.json")"
action="$(grep -o 'act_[a-z0-9]*' "$work/first.json" | head -n 1)"
[ -n "$action" ] || fail "no action id in $(cat "$work/first.json")"
[ ! -e "$notes/b.txt" ] || fail "the file was written before approval"

"$BIN" --state-dir "$state" approvals approve "$action" >/dev/null || fail "approve failed"
write hello >"$work/second.json" || fail "the approved call failed: $(cat "$work/second.json")"
[ "$(cat "$notes/b.txt")" = "hello" ] || fail "the approved write did not run"
# A changed call is a new action and waits again; the file keeps the approved content.
write changed >"$work/third.json" || true
grep -q '"pending_confirmation"' "$work/third.json" || fail "a changed call ran without approval"
[ "$(cat "$notes/b.txt")" = "hello" ] || fail "the changed write ran"
echo "inspector_cli: OK (tools/list, pending, approve, re-issue ran once, changed call waits)"
