#!/usr/bin/env bash
# Builds the small test image without any registry: a root filesystem made of Debian's
# busybox-static and bash-static, loaded with `docker import`.
#   containers/build-test-image.sh [tag]      (default code-sandbox-test:latest)
# Rebuilds only when the image is missing or this recipe changed (FORCE=1 to force).
set -euo pipefail

tag=${1:-code-sandbox-test:latest}
recipe=$(sha256sum "$0" | cut -c1-16)

have=$(docker image inspect --format '{{index .Config.Labels "mcp-sandbox.recipe"}}' "$tag" 2>/dev/null || true)
if [ "${FORCE:-0}" != 1 ] && [ "$have" = "$recipe" ]; then exit 0; fi

if [ ! -x /bin/busybox ] || [ ! -x /bin/bash-static ]; then
	echo "build-test-image: installing busybox-static and bash-static" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq busybox-static bash-static >/dev/null
fi

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc,root,tmp,var/tmp,run,proc,sys,dev,sandbox}
chmod 1777 "$root/tmp" "$root/var/tmp"
cp /bin/busybox "$root/bin/busybox"
cp /bin/bash-static "$root/bin/bash"
for app in $(/bin/busybox --list-full); do
	[ -e "$root/$app" ] || ln -s /bin/busybox "$root/$app"
done
# Debian's busybox-static has no nohup applet; the sandbox's users rely on it.
printf '#!/bin/bash\ntrap "" HUP\nexec "$@"\n' >"$root/usr/bin/nohup"
chmod 755 "$root/usr/bin/nohup"
printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf 'PRETTY_NAME="mcp-sandbox test image (busybox + bash)"\n' >"$root/etc/os-release"

tar --numeric-owner --owner=0 --group=0 -C "$root" -c . | docker import \
	-c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	-c 'WORKDIR /sandbox' \
	-c 'CMD ["/bin/bash"]' \
	-c "LABEL mcp-sandbox.recipe=$recipe" \
	- "$tag" >/dev/null
echo "build-test-image: built $tag" >&2
