#!/usr/bin/env bash
# Builds a realistic sandbox image without any registry: Debian 12 made with debootstrap
# from the Debian mirror this machine's apt already uses, the packages installed with
# apt inside it, loaded with `docker import`. One recipe, two package sets:
#   test   what the tests of the model's view need: python3 (numpy, pandas, matplotlib,
#          pytest), git, node, sqlite3, procps (make test builds it)
#   full   the production image's tool list as far as Debian carries it: python3 with
#          pip, numpy, pandas, scipy, matplotlib and the usual data and document
#          libraries; node with npm; build-essential, git, curl, sqlite3, ffmpeg,
#          imagemagick, pandoc, poppler-utils, jq, zip... (make run builds it when the
#          production recipe's base images cannot be pulled)
#
#   containers/build-debian-image.sh [--set test|full] [tag]
#       tag defaults to code-sandbox-debian:latest for the test set and
#       code-sandbox:latest for the full set.
#   DEBIAN_MIRROR=http://host/debian   a mirror other than the one apt uses
#   FORCE=1                            rebuild although the image is up to date
# Rebuilds only when the image is missing or this recipe changed, so the minutes it
# takes are paid once per engine. Progress goes to stderr as it builds.
set -euo pipefail

set_name=test
if [ "${1:-}" = --set ]; then
	set_name=${2:?--set takes test or full}
	shift 2
fi
case "$set_name" in
test)
	tag=${1:-code-sandbox-debian:latest}
	packages=(python3 python3-numpy python3-pandas python3-matplotlib python3-pytest
		git nodejs sqlite3 procps ca-certificates less file xxd)
	env=()
	commands=(python3 git node sqlite3 ps less file xxd)
	modules=(numpy pandas matplotlib pytest)
	;;
full)
	tag=${1:-code-sandbox:latest}
	# containers/Dockerfile.unified's lists, by their Debian names; what bookworm lacks
	# (uv, bun, pnpm, playwright, pyarrow, duckdb, python-pptx, pdfplumber) is left out,
	# and Debian's chromium stands in for Playwright's.
	packages=(build-essential pkg-config
		ca-certificates curl wget gnupg
		git openssh-client
		jq zip unzip xz-utils bzip2
		sqlite3
		procps psmisc util-linux
		iputils-ping
		file less tree vim-tiny nano xxd
		ffmpeg imagemagick ghostscript pandoc poppler-utils
		fontconfig fonts-dejavu fonts-noto-cjk
		nodejs npm yarnpkg node-typescript
		python3 python3-pip python3-venv python3-dev python-is-python3 ipython3
		python3-numpy python3-pandas python3-scipy python3-sympy python3-networkx
		python3-sklearn python3-matplotlib python3-seaborn python3-plotly
		python3-openpyxl python3-xlsxwriter python3-xlrd
		python3-docx python3-pypdf python3-reportlab python3-markdown
		python3-bs4 python3-lxml python3-requests python3-httpx
		python3-pil python3-jinja2 python3-yaml python3-tabulate python3-tqdm
		python3-pytest)
	# The production image's environment (see Dockerfile.unified for why each is set).
	env=(LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1
		PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
		PIP_BREAK_SYSTEM_PACKAGES=1 NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false
		DEBIAN_FRONTEND=noninteractive MPLBACKEND=Agg)
	commands=(bash setsid nohup ps pkill git curl wget jq zip unzip xz sqlite3 file less
		vi nano make gcc g++ ffmpeg ffprobe convert gs pandoc pdftotext pdftoppm
		node npm npx yarnpkg tsc python python3 pip pip3 ipython3)
	modules=(numpy pandas scipy sympy networkx sklearn matplotlib seaborn plotly
		openpyxl xlsxwriter xlrd docx pypdf reportlab markdown bs4 lxml requests httpx
		PIL jinja2 yaml tabulate tqdm pytest)
	;;
*)
	echo "build-debian-image: unknown package set $set_name: use test or full" >&2
	exit 2
	;;
esac

recipe=$( (cat "$0" && echo "$set_name") | sha256sum | cut -c1-16)
have=$(docker image inspect --format '{{index .Config.Labels "mcp-sandbox.recipe"}}' "$tag" 2>/dev/null || true)
if [ "${FORCE:-0}" != 1 ] && [ "$have" = "$recipe" ]; then exit 0; fi

say() { echo "build-debian-image: $*" >&2; }

if ! command -v debootstrap >/dev/null 2>&1; then
	say "installing debootstrap (Debian's tool that makes a root filesystem from a mirror)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq debootstrap >/dev/null
fi

suite=bookworm
# The mirror apt already uses for $suite, else any Debian mirror it uses, else Debian's.
apt_mirror() {
	local targets
	targets=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(TARGET_OF)' 2>/dev/null || true)
	awk -v s="$suite" '$2 == s && $3 == "deb" { print $1; exit }' <<<"$targets" | grep . && return
	awk '$1 ~ /\/debian\/?$/ && $2 !~ /-/ && $3 == "deb" { print $1; exit }' <<<"$targets" | grep . && return
	echo http://deb.debian.org/debian
}
mirror=${DEBIAN_MIRROR:-$(apt_mirror)}
mirror=${mirror%/}

root=$(mktemp -d)
log=$root.debootstrap.log
cleanup() {
	umount "$root/proc" 2>/dev/null || true
	# --one-file-system: never into a /proc that failed to unmount.
	rm -rf --one-file-system "$root" "$root.debootstrap.log" "$root.apt.log"
}
trap cleanup EXIT
fail() {
	say "$1 failed; the last lines of its log:"
	tail -20 "$log" >&2
	exit 1
}

# debootstrap and apt print a line per package and step; show each phase and a count of
# packages, rewritten in place on a terminal and every 50th package otherwise, so the
# minutes pass with visible progress but without a thousand lines.
progress() {
	local tty=0
	[ -t 2 ] && tty=1
	awk -v p="build-debian-image: " -v tty="$tty" '
		function count(k) {
			if (k != phase) { if (tty && phase != "") printf "\n"; phase = k; n = 0 }
			n++
			if (tty) printf "\r%s%s: %d packages", p, phase, n
			else if (n % 50 == 1) printf "%s%s: %d packages\n", p, phase, n
			fflush()
		}
		function line(s) {
			if (tty && phase != "") { printf "\n"; phase = "" }
			print p s; fflush()
		}
		/^I: Validating / || /^(Hit|Ign|Reading|Building|Fetched|Preparing to|Selecting) / { next }
		/^I: Retrieving / || /^Get:/ { count("downloading"); next }
		/^I: Extracting / { count("extracting"); next }
		/^I: Unpacking / || /^Unpacking / { count("unpacking"); next }
		/^I: Configuring / || /^Setting up / { count("configuring"); next }
		/Can not write log/ { next } # no /dev/pts in the chroot: dpkg logs nowhere, harmless
		/^(I|W|E): / { line(substr($0, 4)) }
		END { if (tty && phase != "") printf "\n" }
	' >&2
}

say "building $tag (package set $set_name) from $mirror, $suite; it takes several minutes"
proxy=$(apt-config shell p Acquire::http::Proxy 2>/dev/null | sed -n "s/^p='\(.*\)'$/\1/p")
if [ -n "$proxy" ]; then export http_proxy=${http_proxy:-$proxy}; fi
if ! debootstrap --variant=minbase "$suite" "$root" "$mirror" 2>&1 | tee "$log" | progress; then
	fail debootstrap
fi

# apt inside the new system: the machine's Acquire settings (proxy, validity checks
# for a snapshot mirror), its name resolution, no daemons started, no documentation.
{
	apt-config dump Acquire 2>/dev/null || true
	# The download sandbox user cannot write to a fresh chroot's cache; root downloads.
	echo 'APT::Sandbox::User "root";'
} >"$root/etc/apt/apt.conf.d/00build-host"
cp /etc/resolv.conf /etc/hosts "$root/etc/" 2>/dev/null || true
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
printf '%s\n' 'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' \
	'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' \
	>"$root/etc/dpkg/dpkg.cfg.d/01-sandbox-nodoc"
mount -t proc proc "$root/proc" 2>/dev/null || true
say "installing ${#packages[@]} packages and their dependencies with apt"
log=$root.apt.log
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@"; }
{ in_root apt-get update && in_root apt-get install -y --no-install-recommends \
	-o Dpkg::Options::=--force-unsafe-io "${packages[@]}"; } >"$log" 2>&1 &
apt_pid=$!
tail -n +1 -f --pid=$apt_pid "$log" 2>/dev/null | progress || true
wait $apt_pid || fail "apt-get install"

# Debian's ImageMagick policy forbids the Ghostscript formats and caps memory at
# 256 MiB; the container is the isolation boundary, so allow PDFs, as production does.
policy=$root/etc/ImageMagick-6/policy.xml
if [ -f "$policy" ]; then
	sed -i -E \
		-e '/pattern="(PS|PS2|PS3|EPS|PDF|XPS)"/ s/rights="none"/rights="read|write"/' \
		-e 's/(name="memory" value=)"[^"]*"/\1"1GiB"/' \
		-e 's/(name="disk" value=)"[^"]*"/\1"8GiB"/' \
		"$policy"
fi

# Fail the build, not the model's first call, when something is missing; importing the
# modules also builds matplotlib's font cache once, here.
missing=$(in_root bash -c 'for c in "$@"; do command -v "$c" >/dev/null || printf "%s " "$c"; done' - "${commands[@]}")
if [ -n "$missing" ]; then
	say "missing commands after the install: $missing"
	exit 1
fi
if ! in_root python3 -c "import $(IFS=,; echo "${modules[*]}")" >"$log" 2>&1; then
	fail "importing ${modules[*]}"
fi

in_root apt-get clean
umount "$root/proc" 2>/dev/null || true
rm -f "$root/etc/apt/apt.conf.d/00build-host" "$root/usr/sbin/policy-rc.d"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
: >"$root/etc/resolv.conf"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
mkdir -p "$root/sandbox"

say "loading the root filesystem into Docker"
changes=(-c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
	-c 'ENV LANG=C.UTF-8')
for e in "${env[@]}"; do changes+=(-c "ENV $e"); done
tar --numeric-owner -C "$root" -c . | docker import "${changes[@]}" \
	-c 'WORKDIR /sandbox' \
	-c 'CMD ["/bin/bash"]' \
	-c "LABEL mcp-sandbox.recipe=$recipe" \
	-c "LABEL mcp-sandbox.debian-set=$set_name" \
	- "$tag" >/dev/null
say "built $tag ($(docker image inspect --format '{{.Size}}' "$tag" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
