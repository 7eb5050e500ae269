#!/usr/bin/env bash
# One venv per agent stack whose pins cannot share the interop venv (tests/interop/requirements-<stack>.txt),
# under ${TETHER_STACK_VENVS:-/root/.cache/tether-venvs}/<stack>-<hash of the file>, made once and
# reused while the file is unchanged (a changed file makes a new one and removes the old).
# Prints `TETHER_STACK_PYTHON_<STACK>=<python>` lines for tests/run to export, and each install's
# time on stderr. Usage: tests/interop/venvs.sh [stack...]   (default: every requirements-*.txt)
set -euo pipefail
cd "$(dirname "$0")"
root=${TETHER_STACK_VENVS:-/root/.cache/tether-venvs}
mkdir -p "$root"
stacks=("$@")
if [ ${#stacks[@]} -eq 0 ]; then
  for f in requirements-*.txt; do stacks+=("${f#requirements-}"); done
  stacks=("${stacks[@]%.txt}")
fi
for stack in "${stacks[@]}"; do
  req="requirements-$stack.txt"
  hash=$(sha256sum "$req" | cut -c1-12)
  venv="$root/$stack-$hash"
  # `.installed` is written last: a venv an interrupted install left behind is made again.
  if [ ! -f "$venv/.installed" ]; then
    rm -rf "$venv"
    for old in "$root/$stack"-*; do [ -e "$old" ] && rm -rf "$old"; done
    start=$(date +%s)
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$req" >&2
    echo "$(( $(date +%s) - start ))" > "$venv/.installed"
    echo "venvs.sh: $stack installed in $(cat "$venv/.installed") s ($venv)" >&2
  fi
  name=$(echo "$stack" | tr 'a-z-' 'A-Z_')
  echo "TETHER_STACK_PYTHON_$name=$venv/bin/python"
done
