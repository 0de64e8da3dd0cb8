#!/usr/bin/env bash
# Installs Schemathesis (property-based testing of an API against its
# OpenAPI document) for the Go test that runs it against a real
# `switchyard run` process: cmd/switchyard's TestAdminAPIMatchesItsOpenAPI.
#
# Usage: deploy/local/schemathesis.sh ensure
#
#   creates (once) a Python venv with schemathesis in $SWITCHYARD_CACHE/venv
#   and prints the path of its schemathesis executable on stdout. Idempotent:
#   a venv holding the same requirement is reused.
#
# Environment:
#   SWITCHYARD_CACHE      cache root (default $HOME/.cache/switchyard)
#   SCHEMATHESIS_VERSION  pip requirement (default "schemathesis>=4.3,<5")
#   PYTHON                interpreter for the venv (default python3)
set -euo pipefail

CACHE_ROOT="${SWITCHYARD_CACHE:-${HOME:-/root}/.cache/switchyard}"
VENV="$CACHE_ROOT/venv"
REQUIREMENT="${SCHEMATHESIS_VERSION:-schemathesis>=4.3,<5}"
PYTHON="${PYTHON:-python3}"

log() { printf '[schemathesis.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

ensure() {
  local marker="$VENV/.requirement"
  if [[ ! -x "$VENV/bin/schemathesis" || ! -f "$marker" || "$(cat "$marker")" != "$REQUIREMENT" ]]; then
    log "installing $REQUIREMENT into $VENV ..."
    mkdir -p "$CACHE_ROOT"
    if [[ ! -x "$VENV/bin/python" ]]; then
      "$PYTHON" -m venv "$VENV" 2>/dev/null || {
        # Debian's python3 has no venv module until python3-venv is installed.
        log "python3 -m venv failed; installing python3-venv"
        command -v apt-get >/dev/null || die "no venv module and no apt-get to install python3-venv"
        local sudo=""
        [[ "$(id -u)" == 0 ]] || sudo="sudo"
        $sudo apt-get update -qq >&2 && $sudo apt-get install -y -qq python3-venv >&2 \
          || die "apt-get install python3-venv failed"
        rm -rf "$VENV"
        "$PYTHON" -m venv "$VENV" || die "could not create a venv with $PYTHON"
      }
    fi
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$REQUIREMENT" >&2 \
      || die "pip install $REQUIREMENT failed"
    echo "$REQUIREMENT" >"$marker"
  fi
  echo "$VENV/bin/schemathesis"
}

case "${1:-}" in
  ensure) ensure ;;
  *) die "usage: $0 ensure" ;;
esac
