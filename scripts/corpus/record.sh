#!/usr/bin/env bash
# Re-record the agent conformance corpus (tests/fixtures/agents/<stack>/).
#
#   scripts/corpus/record.sh                 # every stack with an app in scripts/corpus/apps/
#   scripts/corpus/record.sh STACK [STACK...]
#
# Per stack: a venv at /tmp/ragpulse-corpus/<stack> (the frameworks' pins clash, so one each),
# `pip install -r scripts/corpus/requirements/<stack>.txt`, then the app runs offline (a dead
# proxy for everything but 127.0.0.1) against the fake model server and writes
# tests/fixtures/agents/<stack>/{otlp/NNNN.pb,expected.json}; versions.txt is the venv's pip freeze.
# PYTHON picks the interpreter (default python3.11). Nothing is installed outside /tmp.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3.11}
if [ $# -eq 0 ]; then
  set -- $(cd "$root/scripts/corpus/apps" && ls *.py | grep -v '^_' | sed 's/\.py$//')
fi
status=0
for stack in "$@"; do
  app="$root/scripts/corpus/apps/$stack.py"
  pins="$root/scripts/corpus/requirements/$stack.txt"
  out="$root/tests/fixtures/agents/$stack"
  venv="/tmp/ragpulse-corpus/$stack"
  if [ ! -f "$app" ] || [ ! -f "$pins" ]; then
    echo "record.sh: $stack: needs $app and $pins" >&2; status=1; continue
  fi
  echo "== $stack"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/pip" install -q -r "$pins"
  mkdir -p "$out"
  if ! (cd "$root" && env PYTHONPATH="$root/scripts/corpus" \
        HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY=127.0.0.1,localhost \
        OPENAI_API_KEY=sk-fake OTEL_SDK_DISABLED=false \
        "$venv/bin/python" "$app" "$out"); then
    echo "record.sh: $stack: the app failed" >&2; status=1; continue
  fi
  "$venv/bin/pip" freeze --exclude-editable > "$out/versions.txt"
  echo "   $(ls "$out/otlp" | wc -l) OTLP files, $(du -sk "$out" | cut -f1) KB"
done
exit $status
