#!/usr/bin/env bash
# Interop: `kernex run --provider openai` against @dwmkerr/mock-llm, an OpenAI-compatible server
# this project did not write. Usage: mock_llm_test.sh KERNEX_CLI MOCK_LLM_PREFIX CONFIG_YAML
set -euo pipefail
kernex=$1 prefix=$2 rules=$(realpath "$3")
main="$prefix/node_modules/@dwmkerr/mock-llm/dist/main.js"
[ -f "$main" ] || { echo "mock-llm is not installed in $prefix (the mock_llm_install test sets it up)"; exit 1; }

work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# A free port: bind to 0 and read it back.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
(cd "$work" && HOST=127.0.0.1 PORT=$port exec node "$main" --config "$rules" >"$work/server.log" 2>&1) &
server_pid=$!
for _ in $(seq 1 100); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
  sleep 0.1
done

base="http://127.0.0.1:$port/v1"
run() { env -u OPENAI_API_KEY "$kernex" run --provider openai --provider-opt "base_url=$base" --provider-opt model=gpt-4o "$@"; }
fail() { echo "FAIL: $*"; echo "--- server log"; cat "$work/server.log"; exit 1; }

# 1. plain echo, buffered
out=$(run "Hello from kernex") || fail "plain run exited $?"
[ "$out" = "Hello from kernex" ] || fail "plain run printed '$out'"

# 2. streamed (mock-llm chunks the content over SSE), as JSON events
out=$(run --json --stream "Streaming works fine") || fail "stream run exited $?"
echo "$out" | grep -q '"event":"text_delta"' || fail "no text_delta events in: $out"
echo "$out" | grep -q '"event":"done"' || fail "no done event in: $out"
echo "$out" | tail -n 1 | grep -q '"text":"Streaming works fine"' || fail "stream result: $out"

# 3. the agentic loop: tool call -> builtin calculator -> answer quoting the tool result
out=$(run --json "please compute six times seven") || fail "tool run exited $?"
echo "$out" | grep -q '"text":"The tool said 42."' || fail "tool loop result: $out"
echo "$out" | grep -q '"turns":2' || fail "expected 2 model calls: $out"
echo "PASS"
