#!/usr/bin/env bash
# Connection settings for the local services started by deploy/local/kafka.sh
# and deploy/local/postgres.sh (honours KAFKA_PORT and PG_PORT), for running
# `go test` by hand:
#
#   source deploy/local/env.sh          # exports the variables (bash)
#   eval "$(deploy/local/env.sh)"       # same, from any POSIX shell
#   deploy/local/env.sh                 # prints `export NAME=value` lines
#
# It only prints/exports; start the services with `make services-up`.

# Not `set -euo pipefail` at top level: when sourced that would leak into the
# caller's shell.
__switchyard_env_lines() {
  local dir
  dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" || return 1
  bash "$dir/kafka.sh" env && bash "$dir/postgres.sh" env
}

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
  # Sourced.
  while IFS='=' read -r __sy_name __sy_value; do
    [[ -n "$__sy_name" ]] && export "$__sy_name=$__sy_value"
  done < <(__switchyard_env_lines)
  unset __sy_name __sy_value
  unset -f __switchyard_env_lines
else
  set -euo pipefail
  __switchyard_env_lines | while IFS='=' read -r name value; do
    printf "export %s='%s'\n" "$name" "${value//\'/\'\\\'\'}"
  done
fi
