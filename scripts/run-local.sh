#!/usr/bin/env bash
# make run: builds Caddy with the plugin and starts it on http://localhost:8080 (the
# next free port when 8080 is taken) with examples/Caddyfile.local. A key is generated
# and printed once unless SANDBOX_API_KEY is set. On a fresh machine it also starts
# Docker and builds the sandbox image first, showing the build's progress:
#   - the production image (containers/Dockerfile.unified) when its base images can be
#     pulled;
#   - else, saying so in one line, a realistic Debian image under the same name, from
#     the Debian mirror apt uses (containers/build-debian-image.sh --set full;
#     DEBIAN_MIRROR overrides the mirror).
# A second make run reuses the image.
#   SANDBOX_IMAGE=code-sandbox-test:latest   the small test image instead (built here)
#   SANDBOX_DOCKERFILE=path                  build a missing SANDBOX_IMAGE from this recipe
#                                            (default containers/Dockerfile.unified, used
#                                            only for the default image name)
# SANDBOX_PORT, SANDBOX_CONTAINER, SANDBOX_VOLUME and SANDBOX_NETWORK are passed on to
# the Caddyfile.
set -euo pipefail
cd "$(dirname "$0")/.."

# A port something already answers on (Caddy binds 127.0.0.1).
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if [ -n "${SANDBOX_PORT:-}" ]; then
	if port_taken "$SANDBOX_PORT"; then
		echo "run: port $SANDBOX_PORT is taken on 127.0.0.1: set SANDBOX_PORT to a free one" >&2
		exit 1
	fi
else
	SANDBOX_PORT=8080
	while port_taken "$SANDBOX_PORT" && [ "$SANDBOX_PORT" -lt 8180 ]; do
		SANDBOX_PORT=$((SANDBOX_PORT + 1))
	done
	[ "$SANDBOX_PORT" = 8080 ] || echo "run: port 8080 is taken; using $SANDBOX_PORT"
fi
export SANDBOX_PORT

echo "run: building Caddy with the plugin (bin/caddy)"
go build -o bin/caddy ./cmd/caddy
scripts/docker-up.sh

# The images a Dockerfile's FROM lines name, with the ARG defaults declared before the
# first FROM filled in; earlier stages and scratch are not images to pull.
base_images() {
	awk '
		!from && $1 == "ARG" && index($2, "=") {
			k = substr($2, 1, index($2, "=") - 1); args[k] = substr($2, index($2, "=") + 1)
		}
		$1 == "FROM" {
			from = 1; img = $2
			if (img ~ /^--/) img = $3
			for (k in args) gsub("\\$\\{" k "\\}", args[k], img)
			if (img != "scratch" && !(img in stages)) print img
			for (i = 3; i < NF; i++) if (toupper($i) == "AS") stages[$(i + 1)] = 1
		}
	' "$1"
}

# Pulls what the recipe's FROM lines need, with the pull's progress on stderr; when a
# base image is neither here nor pullable, prints why in one line and fails.
pull_bases() {
	local img err
	err=$(mktemp)
	for img in $(base_images "$1"); do
		docker image inspect "$img" >/dev/null 2>&1 && continue
		if ! docker pull "$img" 1>&2 2>"$err"; then
			echo "$img: $(tail -n 1 "$err")"
			rm -f "$err"
			return 1
		fi
	done
	rm -f "$err"
}

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
	if [ "$recipe" = containers/Dockerfile.unified ] && ! why=$(pull_bases "$recipe"); then
		echo "run: no registry answers for the production image's base images ($why); building a Debian image from the apt mirror instead"
		containers/build-debian-image.sh --set full "$SANDBOX_IMAGE"
	else
		echo "run: image $SANDBOX_IMAGE is missing; building it from $recipe (the first build takes several minutes)"
		# The classic builder, which needs nothing from a registry beyond the recipe's
		# base images, and prints every step as it goes.
		DOCKER_BUILDKIT=0 docker build -t "$SANDBOX_IMAGE" -f "$recipe" "$(dirname "$recipe")"
		echo "run: built $SANDBOX_IMAGE"
	fi
fi

if [ -z "${SANDBOX_API_KEY:-}" ]; then
	SANDBOX_API_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
	export SANDBOX_API_KEY
	echo "API key (shown once; sign in with it): $SANDBOX_API_KEY"
fi
echo "MCP endpoint: http://localhost:$SANDBOX_PORT/mcp"
exec bin/caddy run --config examples/Caddyfile.local --adapter caddyfile
