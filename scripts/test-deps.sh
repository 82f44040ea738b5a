#!/usr/bin/env bash
# Installs what the end-to-end tests drive besides Docker: Debian's chromium for the
# sign-in page tests, Node.js and the official TypeScript MCP SDK for client tests, the
# MCP Apps reference host (ext-apps' AppBridge, bundled with esbuild) for the apps tests, and
# qemu-aarch64-static to run the arm64 sandbox agent (called directly: no binfmt needed),
# and Debian's pip wheel, which the egress test runs inside a sandbox that lacks pip.
# Idempotent and quick when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v qemu-aarch64-static >/dev/null 2>&1 || need+=(qemu-user-static)
compgen -G '/usr/share/python-wheels/pip-*.whl' >/dev/null || need+=(python3-pip-whl) # pip for the egress test's sandbox
if [ ${#need[@]} -gt 0 ]; then
	echo "test-deps: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
fi

ts=integration/testdata/ts-client
if [ ! -d "$ts/node_modules/@modelcontextprotocol/sdk" ] || [ "$ts/package-lock.json" -nt "$ts/node_modules/.package-lock.json" ]; then
	echo "test-deps: installing the TypeScript MCP SDK" >&2
	(cd "$ts" && npm ci --no-audit --no-fund --loglevel=error)
fi

apps=integration/testdata/apps-host
if [ ! -d "$apps/node_modules/@modelcontextprotocol/ext-apps" ] || [ "$apps/package-lock.json" -nt "$apps/node_modules/.package-lock.json" ]; then
	echo "test-deps: installing the MCP Apps reference host" >&2
	(cd "$apps" && npm ci --no-audit --no-fund --loglevel=error)
fi
