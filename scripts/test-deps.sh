#!/usr/bin/env bash
# Installs what the end-to-end tests drive besides Docker: Debian's chromium for the
# sign-in page tests. Idempotent and quick when everything is there.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
	echo "test-deps: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
fi
