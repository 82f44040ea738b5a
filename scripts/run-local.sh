#!/usr/bin/env bash
# make run: builds Caddy with the plugin and starts it on http://localhost:8080 with
# examples/Caddyfile.local. A key is generated and printed once unless SANDBOX_API_KEY
# is set. On a fresh machine it also starts Docker and builds the sandbox image first,
# showing the build's progress (the first build of the production image takes minutes).
#   SANDBOX_IMAGE=code-sandbox-test:latest   the small test image instead (built here)
#   SANDBOX_DOCKERFILE=path                  build a missing SANDBOX_IMAGE from this recipe
#                                            (default containers/Dockerfile.unified, used
#                                            only for the default image name)
# SANDBOX_PORT, SANDBOX_CONTAINER, SANDBOX_VOLUME and SANDBOX_NETWORK are passed on to
# the Caddyfile.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "run: building Caddy with the plugin (bin/caddy)"
go build -o bin/caddy ./cmd/caddy
scripts/docker-up.sh

export SANDBOX_IMAGE=${SANDBOX_IMAGE:-code-sandbox:latest}
case "$SANDBOX_IMAGE" in
code-sandbox-test:*) containers/build-test-image.sh "$SANDBOX_IMAGE" ;;
esac
if ! docker image inspect "$SANDBOX_IMAGE" >/dev/null 2>&1; then
	recipe=${SANDBOX_DOCKERFILE:-}
	if [ -z "$recipe" ] && [ "$SANDBOX_IMAGE" = code-sandbox:latest ]; then
		recipe=containers/Dockerfile.unified
	fi
	if [ -z "$recipe" ]; then
		echo "run: image $SANDBOX_IMAGE is missing and is not ours to build: pull or build it," >&2
		echo "or set SANDBOX_DOCKERFILE to its recipe, or leave SANDBOX_IMAGE unset for the standard image." >&2
		exit 1
	fi
	echo "run: image $SANDBOX_IMAGE is missing; building it from $recipe (the first build takes several minutes)"
	# The classic builder, which needs nothing from a registry beyond the recipe's base
	# image, and prints every step as it goes.
	DOCKER_BUILDKIT=0 docker build -t "$SANDBOX_IMAGE" -f "$recipe" "$(dirname "$recipe")"
	echo "run: built $SANDBOX_IMAGE"
fi

if [ -z "${SANDBOX_API_KEY:-}" ]; then
	SANDBOX_API_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
	export SANDBOX_API_KEY
	echo "API key (shown once; sign in with it): $SANDBOX_API_KEY"
fi
echo "MCP endpoint: http://localhost:${SANDBOX_PORT:-8080}/mcp"
exec bin/caddy run --config examples/Caddyfile.local --adapter caddyfile
