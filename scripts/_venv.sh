# Sourced by scripts/run and scripts/test: a project venv installed from a hashed lock file.
# Usage: ensure_venv requirements/<name>.lock
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${RAGPULSE_VENV:-$ROOT/.venv}

# Progress on stderr, so that stdout stays the command's own.
say() {
    echo "scripts: $*" >&2
}

ensure_venv() {
    local lock=$ROOT/$1 stamp
    if [ ! -x "$VENV/bin/python" ]; then
        local python=${PYTHON:-python3}
        "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
            echo "ragpulse needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2
            exit 2
        }
        say "creating the virtual environment $VENV ($("$python" --version 2>&1))"
        "$python" -m venv "$VENV"
    fi
    # Reinstall only when the lock or the sources changed since the last install.
    stamp=$(cat "$lock" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)-$(basename "$lock")
    if [ "$(cat "$VENV/.ragpulse-installed" 2>/dev/null)" != "$stamp" ]; then
        local count started=$SECONDS
        count=$(grep -c '^[A-Za-z0-9].*==' "$lock" || true)
        # pip runs quietly: without these lines a first install is a minute or more of silence.
        say "installing $count pinned packages from ${lock#"$ROOT"/} into $VENV (first time: a minute or two; later runs skip this)"
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes -r "$lock"
        rm -f "$VENV/.ragpulse-installed"
        echo "$stamp" > "$VENV/.ragpulse-installed"
        say "installed in $((SECONDS - started)) s; installing ragpulse from this checkout"
    fi
    # The package itself is always rebuilt (fast) so the console script runs the current code.
    # (It builds in an isolated environment with the setuptools that pyproject.toml asks for.)
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "$ROOT"
}
