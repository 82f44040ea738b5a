#!/usr/bin/env bash
# Builds a realistic sandbox image without any registry, for the tests of what the model
# sees: Debian 12 made with debootstrap from Debian's mirror, with python3 (numpy,
# pandas, matplotlib, pytest), git, node, sqlite3 and procps, loaded with `docker import`.
#   containers/build-debian-image.sh [tag]      (default code-sandbox-debian:latest)
# Rebuilds only when the image is missing or this recipe changed (FORCE=1 to force), so
# the several minutes it takes are paid once per engine.
set -euo pipefail

tag=${1:-code-sandbox-debian:latest}
recipe=$(sha256sum "$0" | cut -c1-16)

have=$(docker image inspect --format '{{index .Config.Labels "mcp-sandbox.recipe"}}' "$tag" 2>/dev/null || true)
if [ "${FORCE:-0}" != 1 ] && [ "$have" = "$recipe" ]; then exit 0; fi

if ! command -v debootstrap >/dev/null 2>&1; then
	echo "build-debian-image: installing debootstrap" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq debootstrap >/dev/null
fi

mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=python3,python3-numpy,python3-pandas,python3-matplotlib,python3-pytest,git,nodejs,sqlite3,procps,ca-certificates,less,file,xxd
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
echo "build-debian-image: debootstrap bookworm from $mirror (a few minutes)" >&2
debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
	tail -20 "$root.log" >&2
	exit 1
}
rm -f "$root.log"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
mkdir -p "$root/sandbox"

tar --numeric-owner -C "$root" -c . | docker import \
	-c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	-c 'ENV LANG=C.UTF-8' \
	-c 'WORKDIR /sandbox' \
	-c 'CMD ["/bin/bash"]' \
	-c "LABEL mcp-sandbox.recipe=$recipe" \
	- "$tag" >/dev/null
echo "build-debian-image: built $tag" >&2
