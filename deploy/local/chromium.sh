#!/usr/bin/env bash
# Headless Chromium for the browser tests (cross-origin and DNS-rebinding
# checks of the admin API, run in a real browser).
#
#   deploy/local/chromium.sh ensure   install Debian's chromium if missing
#   deploy/local/chromium.sh path     print the binary's path (exit 1: none)
#   deploy/local/chromium.sh env      print SWITCHYARD_CHROMIUM=<path>
#
# Idempotent: a machine that has it installs nothing. Installing needs
# root (CI runs as root) and Debian's package mirrors.
#
# Environment: SWITCHYARD_CHROMIUM, when set, names the binary to use.
set -euo pipefail

log() { printf '[chromium.sh] %s\n' "$*" >&2; }

find_chromium() {
  if [[ -n "${SWITCHYARD_CHROMIUM:-}" && -x "${SWITCHYARD_CHROMIUM}" ]]; then
    echo "$SWITCHYARD_CHROMIUM"
    return 0
  fi
  local c
  for c in chromium chromium-browser; do
    if command -v "$c" >/dev/null 2>&1; then
      command -v "$c"
      return 0
    fi
  done
  return 1
}

ensure() {
  if path="$(find_chromium)"; then
    log "using $path"
    return 0
  fi
  if [[ "$(id -u)" != 0 ]]; then
    log "chromium is not installed and installing it needs root: run 'sudo apt-get install -y chromium', or set SWITCHYARD_CHROMIUM"
    exit 1
  fi
  log "installing Debian's chromium (once per machine)"
  export DEBIAN_FRONTEND=noninteractive
  # Retried: a mirror hiccup should not fail a test run.
  local i
  for i in 1 2 3; do
    if apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
      break
    fi
    [[ $i == 3 ]] && { log "apt-get could not install chromium"; exit 1; }
    log "apt-get failed; retrying ($i/3)"
    sleep 5
  done
  log "installed $(find_chromium)"
}

case "${1:-}" in
  ensure) ensure ;;
  path) find_chromium ;;
  env) echo "SWITCHYARD_CHROMIUM=$(find_chromium)" ;;
  *)
    echo "usage: $0 ensure|path|env" >&2
    exit 2
    ;;
esac
