#!/usr/bin/env bash
# The SessionStart command hook (hooks/signet_hook.py, run by the exact command that
# `manage.py install_hooks` writes into Claude Code's settings) vs a bare curl POST of the
# same payload to the same URL, both through `sh -c` as Claude Code runs commands: median
# wall time per call and the ratio (goal: <= 1.5x). Then the Stop command hook, which also
# reads the context usage from the tail of a 5 MB transcript, vs curl posting that payload.
#
#   bench/hook_client.sh [CALLS]            starts a service of its own (as `make run` does)
#   SIGNET_URL=... SIGNET_TOKEN=... bench/hook_client.sh   uses a running service
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-40}
python=.venv/bin/python
payload=tests/fixtures/claude_code/session_start_startup.json
outbox=$(mktemp -d)/outbox.jsonl

if [[ -z "${SIGNET_URL:-}" || -z "${SIGNET_TOKEN:-}" ]]; then
  data=$(mktemp -d)
  port=$($python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  export SIGNET_DATA_DIR=$data PORT=$port LOG_LEVEL=WARNING
  unset DATABASE_URL
  $python manage.py migrate --noinput -v0
  SIGNET_TOKEN=$($python manage.py create_token --user bench --scopes ingest | tail -n 1)
  SIGNET_URL=http://127.0.0.1:$port
  $python manage.py serve >"$data/serve.log" 2>&1 &
  server=$!
  trap 'kill -INT $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
  for _ in $(seq 1 120); do
    curl -fsS "$SIGNET_URL/healthz" >/dev/null 2>&1 && break
    sleep 0.5
  done
fi
export SIGNET_TOKEN SIGNET_OUTBOX=$outbox
url="$SIGNET_URL/api/hooks/claude-code/"
hook_cmd() {
  $python -c '
import sys
from hooks.install import HOOK_SCRIPT, claude_code_entries, default_interpreter, precompile_hook
precompile_hook()
entries = claude_code_entries(
    url=sys.argv[1], token_env="SIGNET_TOKEN", hook_script=HOOK_SCRIPT,
    interpreter=default_interpreter(),
)
print(next(handler["command"] for event, _, handler in entries if event == sys.argv[2]))' \
    "$SIGNET_URL" "$1"
}
# A 5 MB transcript of a long session: prompts, split responses, edits and tool results.
stop_payload=$(dirname "$outbox")/stop.json
$python - "$(dirname "$outbox")" <<'PY'
import json, sys
from pathlib import Path
folder = Path(sys.argv[1])


def dumps(value):  # as Claude Code writes its lines: compact
    return json.dumps(value, separators=(",", ":"))


lines, n = [], 0
while sum(map(len, lines)) < 5_000_000:
    n += 1
    usage = {"input_tokens": 3, "cache_read_input_tokens": 1000 * n, "cache_creation_input_tokens": 200, "output_tokens": 90}
    lines.append(dumps({"type": "user", "isSidechain": False, "message": {"role": "user", "content": f"step {n}: carry on with the change"}}))
    for block in ({"type": "text", "text": "Editing the file. " * 20}, {"type": "tool_use", "id": f"t{n}", "name": "Edit", "input": {"file_path": f"/src/m{n % 40}.py", "old_string": "a" * 800, "new_string": "b" * 900}}):
        lines.append(dumps({"type": "assistant", "isSidechain": False, "requestId": f"req_{n}", "message": {"model": "claude-sonnet-4-6", "id": f"msg_{n}", "content": [block], "usage": usage}}))
    lines.append(dumps({"type": "user", "isSidechain": False, "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "ok"}]}, "toolUseResult": {"filePath": f"/src/m{n % 40}.py", "originalFile": "x" * 3000}}))
transcript = folder / "transcript.jsonl"
transcript.write_text("\n".join(lines) + "\n")
stop = json.loads(Path("tests/fixtures/claude_code/stop.json").read_text())
stop["transcript_path"] = str(transcript)
(folder / "stop.json").write_text(json.dumps(stop))
PY
curl_cmd="curl -fsS -m 5 -X POST -H \"Authorization: Bearer \$SIGNET_TOKEN\" -H 'Content-Type: application/json' --data-binary @- $url"

now_ns() { date +%s%N; }

time_cmd() {  # command, payload
  local start end
  start=$(now_ns)
  sh -c "$1" <"$2" >/dev/null
  end=$(now_ns)
  echo $(((end - start) / 1000))
}

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }

sh -c "$curl_cmd" <"$payload" >/dev/null || { echo "curl POST failed" >&2; exit 1; }

bench() {  # title, hook command, payload
  local hook_times=() curl_times=() hook_us curl_us
  time_cmd "$2" "$3" >/dev/null && time_cmd "$curl_cmd" "$3" >/dev/null  # warm up
  for _ in $(seq 1 "$calls"); do  # interleaved, so both see the same machine
    hook_times+=("$(time_cmd "$2" "$3")")
    curl_times+=("$(time_cmd "$curl_cmd" "$3")")
  done
  hook_us=$(printf '%s\n' "${hook_times[@]}" | median)
  curl_us=$(printf '%s\n' "${curl_times[@]}" | median)
  awk -v t="$1" -v h="$hook_us" -v c="$curl_us" -v n="$calls" 'BEGIN {
    r = h / c
    printf "%s command hook vs bare curl POST, %d calls each (median wall per call)\n", t, n
    printf "  bare curl POST       %7.1f ms\n", c / 1000
    printf "  signet_hook.py hook   %7.1f ms\n", h / 1000
    printf "  ratio hook/curl: %.2f (goal <= 1.50: %s)\n", r, (r <= 1.5 ? "met" : "NOT met")
  }'
}

bench SessionStart "$(hook_cmd SessionStart)" "$payload"
bench "Stop (usage from a 5 MB transcript)" "$(hook_cmd Stop)" "$stop_payload"
