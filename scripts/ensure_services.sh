#!/usr/bin/env bash
# Install the binaries the tests run for real: Prometheus 2.42 (prometheus, promtool), Redis, and Chromium
# (headless, for the HTML report test).
# Idempotent and quiet when both are present. Needs root (or sudo) and Debian's apt on a fresh machine.
# Nothing is left running: package installs are told not to start their services (policy-rc.d), and
# the tests start their own processes on free loopback ports.
set -euo pipefail

missing=()
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ "${#missing[@]}" -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_services: missing ${missing[*]} and no apt-get; install them by hand" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "ensure_services: need root to install ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
fi

# Debian's packages start their daemons on install (systemd or init.d): a policy-rc.d that answers
# 101 ("action forbidden") stops that, so no stray Prometheus holds 9090 and no Redis holds 6379.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    created_policy=1
fi
cleanup() { if [ "$created_policy" -eq 1 ]; then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT

echo "ensure_services: installing ${missing[*]} from Debian" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

# systemd ignores policy-rc.d when deb-systemd-invoke is used on some releases: stop and disable
# the units of the packages this script just installed if they came up anyway (never any other).
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    for unit in "${missing[@]}"; do
        $SUDO systemctl disable --now "$unit" >/dev/null 2>&1 || true
    done
fi
command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v redis-server >/dev/null \
    && command -v chromium >/dev/null
