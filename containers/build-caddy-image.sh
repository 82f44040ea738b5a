#!/usr/bin/env bash
# Builds an image that runs a given Caddy binary, without any registry, for the test
# cluster (scripts/k8s-cluster.sh import): a root filesystem of the binary and Debian's
# busybox-static (a shell for exec probes), loaded with `docker import`. It is laid out
# as Caddy's official image is: /usr/bin/caddy, /etc/caddy/Caddyfile, /config and /data.
#   containers/build-caddy-image.sh CADDY_BINARY [tag]   (default mcp-sandbox-caddy:test)
# The binary must be static (CGO_ENABLED=0): the image has no C library.
set -euo pipefail

bin=${1:?usage: $0 CADDY_BINARY [tag]}
tag=${2:-mcp-sandbox-caddy:test}

[ -x "$bin" ] || { echo "build-caddy-image: $bin is not an executable" >&2; exit 1; }
if ldd "$bin" >/dev/null 2>&1; then # ldd fails on a static binary
	echo "build-caddy-image: $bin is not statically linked: build it with CGO_ENABLED=0" >&2
	exit 1
fi
if [ ! -x /bin/busybox ]; then
	echo "build-caddy-image: installing busybox-static" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq busybox-static >/dev/null
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,usr/bin,etc/caddy,config,data,srv,tmp,root}
chmod 1777 "$root/tmp"
cp "$bin" "$root/usr/bin/caddy"
cp /bin/busybox "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"

tar --numeric-owner --owner=0 --group=0 -C "$root" -c . | docker import \
	-c 'ENV PATH=/usr/bin:/bin' \
	-c 'ENV XDG_CONFIG_HOME=/config' \
	-c 'ENV XDG_DATA_HOME=/data' \
	-c 'WORKDIR /srv' \
	-c 'CMD ["caddy", "run", "--config", "/etc/caddy/Caddyfile", "--adapter", "caddyfile"]' \
	- "$tag" >/dev/null
echo "build-caddy-image: built $tag" >&2
