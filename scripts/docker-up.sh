#!/usr/bin/env bash
# Makes sure a Docker engine answers on this machine: installs Debian's docker.io when
# dockerd is missing and starts dockerd in the background when nothing answers.
# Idempotent and quick when the engine already runs. Needs root for the install/start.
set -euo pipefail

answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if answers; then exit 0; fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
	echo "docker-up: installing docker.io" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq docker.io >/dev/null
fi

if [ -n "${DOCKER_HOST:-}" ] && [ "${DOCKER_HOST#unix://}" = "$DOCKER_HOST" ]; then
	echo "docker-up: DOCKER_HOST=$DOCKER_HOST does not answer and is not a local socket" >&2
	exit 1
fi

# The engine of /var/run/docker.pid, not any dockerd: tests run second engines of their
# own (internal/testengine), which must not pass for this one.
main_runs() {
	local pid
	pid=$(cat /var/run/docker.pid 2>/dev/null) || return 1
	[ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]
}

if ! main_runs; then
	echo "docker-up: starting dockerd (log: /var/log/dockerd.log)" >&2
	# Give containerd and dockerd their own session so they outlive this script.
	setsid nohup dockerd >/var/log/dockerd.log 2>&1 </dev/null &
fi

for _ in $(seq 1 60); do
	if answers; then exit 0; fi
	sleep 1
done
echo "docker-up: dockerd did not answer within 60s; last log lines:" >&2
tail -n 30 /var/log/dockerd.log >&2 || true
exit 1
