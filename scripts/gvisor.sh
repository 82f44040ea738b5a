#!/usr/bin/env bash
# gVisor's runsc for tests, offline, on this machine: built from gvisor.dev/gvisor through
# the Go module proxy (pinned, CGO_ENABLED=0: runsc re-executes itself in a mount
# namespace where a dynamic loader is not visible), installed, and registered with the
# machine's Docker engine as the runtime "runsc" with the two arguments the plugin needs
# (docs/security.md):
#   --overlay2=none   the container's writes stay in its layer, so checkpoints see them
#   --host-uds=open   the agent reaches the bind-mounted socket of its direct channel
#
#   scripts/gvisor.sh            build (cached), install, register; prints nothing on success
#   scripts/gvisor.sh build      only build into the cache
#   scripts/gvisor.sh status     what the engine reports for the runtime
#
# The engine is told through /etc/docker/daemon.json (its "runtimes" key merged in, the
# other keys kept) and SIGHUP: dockerd reloads its runtimes without a restart, so the
# containers and tests already on it go on. "experimental": true is merged in too:
# `docker checkpoint` (keep_processes, a sandbox's memory kept across a stop) needs it,
# and dockerd reads it only when it starts, so an engine running without it is
# restarted once (its containers stop; scripts/docker-up.sh starts it again).
#
# Cache (kept): ${MCP_SANDBOX_CACHE:-/var/cache/mcp-sandbox}/runsc-<version>/runsc, and the
# build's GOCACHE in .../runsc-gocache (a cold build takes ~8 min on 2 busy cores).
# Needs root for the install and the daemon's configuration.
set -euo pipefail

RUNSC_MODULE=gvisor.dev/gvisor/runsc
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
CACHE=${MCP_SANDBOX_CACHE:-/var/cache/mcp-sandbox}
DIR=$CACHE/runsc-$RUNSC_VERSION
GOCACHE_DIR=$CACHE/runsc-gocache
INSTALL=${RUNSC_INSTALL:-/usr/local/bin/runsc}
RUNTIME=${RUNSC_RUNTIME_NAME:-runsc}
DAEMON_JSON=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}

say() { echo "gvisor: $*" >&2; }
die() { say "$*"; exit 1; }

build() {
	if [ -x "$DIR/runsc" ]; then return; fi
	command -v go >/dev/null 2>&1 || die "go is missing: install Go (the project's go.mod version)"
	mkdir -p "$DIR" "$GOCACHE_DIR"
	say "building runsc $RUNSC_VERSION (about 8 min cold on 2 cores; log: $DIR/build.log)"
	if ! (
		export GOCACHE=$GOCACHE_DIR GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN=$DIR/tmp
		go install "$RUNSC_MODULE@$RUNSC_VERSION"
	) >"$DIR/build.log" 2>&1; then
		tail -n 30 "$DIR/build.log" >&2
		die "building runsc failed (log: $DIR/build.log); the module proxy must serve $RUNSC_MODULE@$RUNSC_VERSION"
	fi
	mv "$DIR/tmp/runsc" "$DIR/runsc" && rmdir "$DIR/tmp"
}

install_bin() {
	if [ -x "$INSTALL" ] && cmp -s "$DIR/runsc" "$INSTALL"; then return; fi
	install -m 0755 "$DIR/runsc" "$INSTALL.new" && mv -f "$INSTALL.new" "$INSTALL"
}

# The runtime as the engine reports it: its path and arguments, or nothing.
engine_runtime() {
	docker info --format '{{json .Runtimes}}' 2>/dev/null |
		python3 -c 'import json,sys; r=json.load(sys.stdin).get(sys.argv[1]); print(json.dumps(r) if r else "")' "$RUNTIME"
}

# dockerd_pid prints the pid of the machine's dockerd (/var/run/docker.pid's).
dockerd_pid() {
	local pid
	pid=$(cat /var/run/docker.pid 2>/dev/null) || die "no /var/run/docker.pid: start the engine first (scripts/docker-up.sh)"
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || die "/var/run/docker.pid ($pid) is not dockerd: start the engine first (scripts/docker-up.sh)"
	echo "$pid"
}

register() {
	[ "$(id -u)" = 0 ] || die "registering a runtime writes $DAEMON_JSON and signals dockerd: run it as root"
	local want
	want=$(python3 - "$DAEMON_JSON" "$RUNTIME" "$INSTALL" <<'EOF'
import json, os, sys
path, name, binary = sys.argv[1:]
conf = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    with open(path) as f:
        conf = json.load(f)
entry = {"path": binary, "runtimeArgs": ["--overlay2=none", "--host-uds=open"]}
runtimes = conf.setdefault("runtimes", {})
if runtimes.get(name) == entry and conf.get("experimental") is True:
    print("same")
    sys.exit(0)
runtimes[name] = entry
conf["experimental"] = True
os.makedirs(os.path.dirname(path), exist_ok=True)
tmp = path + ".new"
with open(tmp, "w") as f:
    json.dump(conf, f, indent=2)
    f.write("\n")
os.replace(tmp, path)
print("changed")
EOF
	) || die "could not merge the runtime into $DAEMON_JSON (is it valid JSON?)"
	experimental
	local got
	got=$(engine_runtime)
	if [ "$want" = same ] && echo "$got" | grep -q -- '--host-uds=open'; then return; fi
	local pid
	pid=$(dockerd_pid)
	say "registering runtime $RUNTIME with dockerd (pid $pid): $DAEMON_JSON, SIGHUP"
	kill -HUP "$pid"
	for _ in $(seq 1 30); do
		got=$(engine_runtime)
		if echo "$got" | grep -q -- '--host-uds=open'; then return; fi
		sleep 1
	done
	die "dockerd did not report runtime $RUNTIME after SIGHUP (docker info --format '{{json .Runtimes}}': $(docker info --format '{{json .Runtimes}}' 2>&1)); see its log"
}

# experimental restarts the machine's dockerd when it runs without experimental
# features (daemon.json has them on by now): they are read only at its start.
experimental() {
	[ "$(docker info --format '{{.ExperimentalBuild}}' 2>/dev/null)" = true ] && return
	local pid
	pid=$(dockerd_pid)
	say "restarting dockerd (pid $pid) for experimental features (docker checkpoint)"
	kill -TERM "$pid"
	for _ in $(seq 1 60); do
		[ -d "/proc/$pid" ] || break
		sleep 1
	done
	[ ! -d "/proc/$pid" ] || die "dockerd (pid $pid) did not stop within 60 s"
	"$(dirname "$0")/docker-up.sh"
	[ "$(docker info --format '{{.ExperimentalBuild}}' 2>/dev/null)" = true ] ||
		die "dockerd runs without experimental features although $DAEMON_JSON sets them; see /var/log/dockerd.log"
}

case "${1:-up}" in
up)
	build
	install_bin
	register
	;;
build) build ;;
status)
	got=$(engine_runtime)
	if [ -z "$got" ]; then echo "runtime $RUNTIME: not registered"; exit 1; fi
	echo "runtime $RUNTIME: $got"
	;;
*) die "usage: $0 [up|build|status]" ;;
esac
