#!/usr/bin/env bash
# The SessionStart command hook (hooks/signet_hook.py, run by the exact command that
# `manage.py install_hooks` writes into Claude Code's settings) vs a bare curl POST of the
# same payload to the same URL, both through `sh -c` as Claude Code runs commands: median
# wall time per call and the ratio (goal: <= 1.5x).
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
hook_cmd=$($python -c '
import sys
from hooks.install import HOOK_SCRIPT, claude_code_entries, default_interpreter, precompile_hook
precompile_hook()
entries = claude_code_entries(
    url=sys.argv[1], token_env="SIGNET_TOKEN", hook_script=HOOK_SCRIPT,
    interpreter=default_interpreter(),
)
print(entries[0][2]["command"])' "$SIGNET_URL")
curl_cmd="curl -fsS -m 5 -X POST -H \"Authorization: Bearer \$SIGNET_TOKEN\" -H 'Content-Type: application/json' --data-binary @- $url"

now_ns() { date +%s%N; }

time_hook() {
  local start end
  start=$(now_ns)
  sh -c "$hook_cmd" <"$payload" >/dev/null
  end=$(now_ns)
  echo $(((end - start) / 1000))
}

time_curl() {
  local start end
  start=$(now_ns)
  sh -c "$curl_cmd" <"$payload" >/dev/null
  end=$(now_ns)
  echo $(((end - start) / 1000))
}

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }

sh -c "$curl_cmd" <"$payload" >/dev/null || { echo "curl POST failed" >&2; exit 1; }
time_hook >/dev/null && time_curl >/dev/null  # warm up
hook_times=() curl_times=()
for _ in $(seq 1 "$calls"); do  # interleaved, so both see the same machine
  hook_times+=("$(time_hook)")
  curl_times+=("$(time_curl)")
done
hook_us=$(printf '%s\n' "${hook_times[@]}" | median)
curl_us=$(printf '%s\n' "${curl_times[@]}" | median)
awk -v h="$hook_us" -v c="$curl_us" -v n="$calls" 'BEGIN {
  r = h / c
  printf "SessionStart command hook vs bare curl POST, %d calls each (median wall per call)\n", n
  printf "  bare curl POST       %7.1f ms\n", c / 1000
  printf "  signet_hook.py hook   %7.1f ms\n", h / 1000
  printf "  ratio hook/curl: %.2f (goal <= 1.50: %s)\n", r, (r <= 1.5 ? "met" : "NOT met")
}'
