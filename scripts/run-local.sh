#!/usr/bin/env bash
# make run: builds Caddy with the plugin and starts it on http://localhost:8080 with
# examples/Caddyfile.local. A key is generated and printed once unless SANDBOX_API_KEY
# is set. SANDBOX_IMAGE=code-sandbox-test:latest uses the small test image (built here
# if missing) instead of the production image.
set -euo pipefail
cd "$(dirname "$0")/.."

go build -o bin/caddy ./cmd/caddy
scripts/docker-up.sh

export SANDBOX_IMAGE=${SANDBOX_IMAGE:-code-sandbox:latest}
case "$SANDBOX_IMAGE" in
code-sandbox-test:*) containers/build-test-image.sh "$SANDBOX_IMAGE" ;;
esac
if ! docker image inspect "$SANDBOX_IMAGE" >/dev/null 2>&1; then
	echo "run: image $SANDBOX_IMAGE is missing. Build it with" >&2
	echo "  docker build -t $SANDBOX_IMAGE -f containers/Dockerfile.unified containers/" >&2
	echo "or use the small test image: SANDBOX_IMAGE=code-sandbox-test:latest make run" >&2
	exit 1
fi

if [ -z "${SANDBOX_API_KEY:-}" ]; then
	SANDBOX_API_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
	export SANDBOX_API_KEY
	echo "API key (shown once; sign in with it): $SANDBOX_API_KEY"
fi
echo "MCP endpoint: http://localhost:${SANDBOX_PORT:-8080}/mcp"
exec bin/caddy run --config examples/Caddyfile.local --adapter caddyfile
