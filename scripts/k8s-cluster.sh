#!/usr/bin/env bash
# The project's own single-node Kubernetes for tests, offline, on this machine:
# kube-apiserver, kube-controller-manager, kube-scheduler and kubelet built from
# k8s.io/kubernetes through the Go module proxy; etcd and the CNI plugins from Debian's
# packages, unpacked, not installed; a containerd and runc of their own (Debian's, the
# ones Docker depends on); a pause image built from scripts/k8s/testdata/pause.go
# (in testdata, so it is not a package of the module).
#
#   scripts/k8s-cluster.sh prepare        binaries, packages, pause image; starts nothing
#   scripts/k8s-cluster.sh up IMAGE...    a fresh cluster with these Docker images imported
#                                         as k8s.local/NAME:TAG; prints the kubeconfig path
#   scripts/k8s-cluster.sh import IMAGE...
#                                         these Docker images into the running cluster, as
#                                         up does (an image built after it started)
#   scripts/k8s-cluster.sh down           stops what up started (keeps the caches)
#   scripts/k8s-cluster.sh status         what runs, and whether the node is Ready
#   scripts/k8s-cluster.sh apiserver stop|start
#                                         the API server alone down or back (pods run on)
#
# Every listener is on 127.0.0.1 and off Kubernetes' default ports, so it runs beside
# another cluster: API server 16443, etcd 12379/12380 (metrics 12381), kubelet 11250
# (healthz 11248), controller-manager 11257, scheduler 11259. Pods sit on the bridge
# mcpk8s0 (10.251.0.0/24) with no gateway and no masquerade: they reach nothing, and
# nothing should reach them (use the API server's exec). Needs root.
#
# Caches (kept by down) under ${MCP_SANDBOX_CACHE:-/var/cache/mcp-sandbox}:
#   k8s-v1.37.2/bin     the four binaries, keyed on the version
#   k8s-v1.37.2/build   the generated wrapper module that builds them
#   k8s-gocache         the build's GOCACHE (about 4 GB; a cold build takes ~13 min)
#   k8s-debs            etcd-server and containernetworking-plugins, unpacked
#   k8s-pause           the pause image tar
# Run state: ${K8S_HOME:-$cache/k8s-run} (wiped by the next up).
set -euo pipefail

K8S_VERSION=v1.37.2
STAGING_VERSION=v0.${K8S_VERSION#v1.}
CACHE=${MCP_SANDBOX_CACHE:-/var/cache/mcp-sandbox}
RUN=${K8S_HOME:-$CACHE/k8s-run}
BIN=$CACHE/k8s-$K8S_VERSION/bin
BUILD=$CACHE/k8s-$K8S_VERSION/build
GOCACHE_DIR=$CACHE/k8s-gocache
DEBS=$CACHE/k8s-debs
PAUSE=$CACHE/k8s-pause
SRC=$(cd "$(dirname "$0")" && pwd)/k8s

API_PORT=16443 ETCD_PORT=12379 ETCD_PEER_PORT=12380 ETCD_METRICS_PORT=12381
KUBELET_PORT=11250 KUBELET_HEALTHZ_PORT=11248 KCM_PORT=11257 SCHED_PORT=11259
BRIDGE=mcpk8s0 SUBNET=10.251.0.0/24 CGROUP=mcpk8s
COMPONENTS="kube-apiserver kube-controller-manager kube-scheduler kubelet"

say() { echo "k8s-cluster: $*" >&2; }
die() { say "$*"; exit 1; }

# --- prepare -------------------------------------------------------------------------

need_root() { [ "$(id -u)" = 0 ] || die "needs root (containerd, mounts, cgroups, the bridge): run it as root"; }

host_tools() {
	local missing=()
	for c in containerd ctr runc; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing containerd and runc (Debian; Docker's own dependencies)"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq && apt-get install -y -qq containerd runc >/dev/null ||
			die "could not install containerd and runc: install them (apt-get install containerd runc)"
	fi
	for c in openssl curl unshare nsenter ip docker go python3; do
		command -v "$c" >/dev/null 2>&1 || die "$c is missing: install it (Debian: openssl curl util-linux iproute2 docker.io golang python3)"
	done
}

debs() {
	if [ -x "$DEBS/root/usr/bin/etcd" ] && [ -x "$DEBS/root/usr/lib/cni/bridge" ]; then return; fi
	say "fetching etcd-server and containernetworking-plugins (apt-get download; nothing installed)"
	rm -rf "$DEBS" && mkdir -p "$DEBS" && cd "$DEBS"
	apt-get download etcd-server containernetworking-plugins >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get download etcd-server containernetworking-plugins >/dev/null; } ||
		die "apt-get download etcd-server containernetworking-plugins failed: check the apt sources"
	for d in ./*.deb; do dpkg -x "$d" root; done
	cd - >/dev/null
	[ -x "$DEBS/root/usr/bin/etcd" ] && [ -x "$DEBS/root/usr/lib/cni/bridge" ] ||
		die "the packages in $DEBS lack usr/bin/etcd or usr/lib/cni/bridge"
}

# The wrapper module: k8s.io/kubernetes at $K8S_VERSION, with each staging module it
# asks for at v0.0.0 (replaced by ./staging/... in its own go.mod) replaced by the
# published $STAGING_VERSION. Generated here, never kept in the repository.
wrapper_module() {
	mkdir -p "$BUILD"
	cd "$BUILD"
	if [ ! -f go.sum ] || ! grep -q "k8s.io/kubernetes $K8S_VERSION" go.mod 2>/dev/null; then
		local gomod
		rm -f go.mod go.sum tools.go
		gomod=$(GOFLAGS= go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
		[ -f "$gomod" ] || die "go mod download k8s.io/kubernetes@$K8S_VERSION gave no go.mod: check GOPROXY"
		{
			printf 'module k8sbuild\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$(go env GOVERSION | sed 's/^go//')" "$K8S_VERSION"
			sed -n 's#^[[:space:]]*\(k8s.io/[A-Za-z0-9._-]*\) => ./staging/src/.*#\t\1 => \1 '"$STAGING_VERSION"'#p' "$gomod"
			printf ')\n'
		} >go.mod
		grep -q '=> k8s.io/api ' go.mod || die "found no staging replacements in $gomod"
		printf '//go:build tools\n\npackage tools\n\nimport (\n' >tools.go
		for c in $COMPONENTS; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c" >>tools.go; done
		printf ')\n' >>tools.go
		go mod tidy
	fi
	cd - >/dev/null
}

binaries() {
	local c ok=1
	for c in $COMPONENTS; do [ -x "$BIN/$c" ] || ok=0; done
	[ $ok = 1 ] && return
	say "building Kubernetes $K8S_VERSION (about 13 min cold on 2 cores, seconds with a warm $GOCACHE_DIR; log: $BUILD/build.log)"
	mkdir -p "$BIN" "$GOCACHE_DIR"
	(
		export GOCACHE=$GOCACHE_DIR GOFLAGS=-buildvcs=false CGO_ENABLED=0
		wrapper_module
		cd "$BUILD"
		local ld="-s -w" p
		for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) -X $p.gitTreeState=clean"
		done
		local start=$SECONDS pkgs=()
		for c in $COMPONENTS; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
		go build -trimpath -ldflags "$ld" -o "$BIN/" "${pkgs[@]}"
		echo "build_seconds=$((SECONDS - start))"
	) >"$BUILD.log" 2>&1 || { tail -20 "$BUILD.log" >&2; die "building Kubernetes failed; full log: $BUILD.log"; }
	mv "$BUILD.log" "$BUILD/build.log"
}

pause_image() {
	local sum
	sum=$(sha256sum "$SRC/testdata/pause.go" | cut -d' ' -f1)
	[ -f "$PAUSE/pause-image.tar" ] && [ "$(cat "$PAUSE/source.sha256" 2>/dev/null)" = "$sum" ] && return
	rm -rf "$PAUSE" && mkdir -p "$PAUSE/rootfs" "$PAUSE/img"
	CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags '-s -w' -o "$PAUSE/rootfs/pause" "$SRC/testdata/pause.go" ||
		die "building the pause program failed"
	tar --owner=0 --group=0 --numeric-owner --mtime=2026-01-01 -C "$PAUSE/rootfs" -cf "$PAUSE/img/layer.tar" pause
	local diff arch
	diff=sha256:$(sha256sum "$PAUSE/img/layer.tar" | cut -d' ' -f1)
	arch=$(go env GOARCH)
	printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["%s"]}}\n' "$arch" "$diff" >"$PAUSE/img/config.json"
	printf '[{"Config":"config.json","RepoTags":["k8s.local/pause:1"],"Layers":["layer.tar"]}]\n' >"$PAUSE/img/manifest.json"
	tar -C "$PAUSE/img" -cf "$PAUSE/pause-image.tar" manifest.json config.json layer.tar
	echo "$sum" >"$PAUSE/source.sha256"
}

prepare() {
	need_root
	host_tools
	debs
	binaries
	pause_image
}

# --- up ------------------------------------------------------------------------------

render() { # template destination
	sed -e "s#@RUN@#$RUN#g" -e "s#@CNI_BIN@#$DEBS/root/usr/lib/cni#g" -e "s#@RUNC@#$(command -v runc)#g" \
		-e "s#@KUBELET_PORT@#$KUBELET_PORT#g" -e "s#@KUBELET_HEALTHZ_PORT@#$KUBELET_HEALTHZ_PORT#g" \
		-e "s#@CGROUP@#$CGROUP#g" -e "s#@BRIDGE@#$BRIDGE#g" -e "s#@SUBNET@#$SUBNET#g" "$SRC/$1" >"$2"
}

certs() {
	local p=$RUN/pki
	mkdir -p "$p"
	openssl genrsa -out "$p/ca.key" 2048 2>/dev/null
	openssl req -x509 -new -key "$p/ca.key" -days 30 -subj "/CN=mcp-sandbox-test-ca" -out "$p/ca.crt" 2>/dev/null
	openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
	openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
	mk() { # name CN O SAN
		local subj="/CN=$2"
		[ -n "$3" ] && subj="/O=$3/CN=$2"
		openssl genrsa -out "$p/$1.key" 2048 2>/dev/null
		openssl req -new -key "$p/$1.key" -subj "$subj" -out "$p/$1.csr" 2>/dev/null
		if [ -n "${4:-}" ]; then
			printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$4" >"$p/$1.ext"
		else
			printf 'extendedKeyUsage=clientAuth\n' >"$p/$1.ext"
		fi
		openssl x509 -req -in "$p/$1.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 30 \
			-extfile "$p/$1.ext" -out "$p/$1.crt" 2>/dev/null
	}
	mk apiserver kube-apiserver "" "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
	mk apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
	mk admin admin system:masters
	mk kubelet system:node:127.0.0.1 system:nodes
	mk kubelet-serving 127.0.0.1 "" "IP:127.0.0.1,DNS:localhost"
	mk scheduler system:kube-scheduler ""
	mk controller-manager system:kube-controller-manager ""
	local n
	for n in admin kubelet scheduler controller-manager; do
		cat >"$RUN/$n.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: mcp-sandbox-test
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$p/ca.crt"}
users:
- name: $n
  user: {client-certificate: "$p/$n.crt", client-key: "$p/$n.key"}
contexts:
- name: mcp-sandbox-test
  context: {cluster: mcp-sandbox-test, user: $n}
current-context: mcp-sandbox-test
KC
	done
}

api() { curl -sf --max-time 5 --cacert "$RUN/pki/ca.crt" --cert "$RUN/pki/admin.crt" --key "$RUN/pki/admin.key" "$@"; }
apiurl() { echo "https://127.0.0.1:$API_PORT$1"; }

start() { # name command... (in the background, pid recorded, log in logs/NAME.log)
	local name=$1
	shift
	setsid "$@" </dev/null >"$RUN/logs/$name.log" 2>&1 &
	echo $! >"$RUN/run/$name.pid"
}

in_ns() { nsenter -t "$(cat "$RUN/run/nsholder.pid")" -m "$@"; }

wait_for() { # tries what command...
	local tries=$1 what=$2
	shift 2
	for _ in $(seq "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
	die "$what did not come up; see $RUN/logs (what started keeps running for a look: scripts/k8s-cluster.sh down stops it)"
}

port_free() {
	local port
	for port in "$@"; do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			die "127.0.0.1:$port is taken by another program: stop it (ss -ltnp 'sport = :$port')"
		fi
	done
}

cgroups() { # create|remove
	local d
	for d in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
		[ -e "$d/cgroup.procs" ] || continue
		if [ "$1" = create ]; then
			mkdir -p "$d$CGROUP"
		elif [ -d "$d$CGROUP" ]; then
			find "$d$CGROUP" -depth -type d -exec rmdir {} \; 2>/dev/null || true
		fi
	done
}

k8s_name() { # docker image name -> k8s.local/NAME:TAG
	local ref=$1 name tag
	case $ref in *@*) die "image $ref: give a name with a tag, not a digest" ;; esac
	name=${ref##*/}
	tag=latest
	case $name in *:*) tag=${name##*:} name=${name%%:*} ;; esac
	[[ $name =~ ^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$ ]] || die "image $ref: cannot make a k8s.local name of $name"
	echo "k8s.local/$name:$tag"
}

node_ready() {
	api "$(apiurl /api/v1/nodes/127.0.0.1)" | python3 -c '
import json, sys
s = json.load(sys.stdin)
ok = any(c["type"] == "Ready" and c["status"] == "True" for c in s["status"].get("conditions", []))
sys.exit(0 if ok and not s["spec"].get("taints") else 1)'
}

up() {
	[ $# -gt 0 ] || say "no image given: the cluster will hold only the pause image"
	prepare
	local img
	for img in "$@"; do
		docker image inspect "$img" >/dev/null 2>&1 || die "image $img is not in the local Docker engine: build it first"
		k8s_name "$img" >/dev/null
	done
	down >/dev/null
	port_free $API_PORT $ETCD_PORT $ETCD_PEER_PORT $ETCD_METRICS_PORT $KUBELET_PORT $KUBELET_HEALTHZ_PORT $KCM_PORT $SCHED_PORT
	local t0=$SECONDS
	rm -rf "$RUN"
	mkdir -p "$RUN"/{run,logs/pods,cni/net.d,cni/ipam,containerd,ns/var-lib,ns/var-log,ns/run-containerd,ns/tmp,volume-plugins,kubelet-root}
	# The paths bound over in the private namespace must exist; /run is empty after a
	# boot until something (a containerd of the system's own) makes /run/containerd.
	mkdir -p /run/containerd
	render containerd.toml "$RUN/containerd/config.toml"
	render kubelet-config.yaml "$RUN/kubelet-config.yaml"
	render cni.conflist "$RUN/cni/net.d/10-mcpk8s.conflist"
	render resolv.conf "$RUN/resolv.conf"
	certs

	start etcd "$DEBS/root/usr/bin/etcd" --name mcpk8s --data-dir "$RUN/etcd-data" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "mcpk8s=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "http://127.0.0.1:$ETCD_METRICS_PORT"
	wait_for 100 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"

	# containerd, the kubelet and the controller-manager (whose host-path provisioner
	# makes volumes under /tmp/hostpath_pv) share a private mount namespace, so the paths
	# they hard-code land under $RUN/ns.
	# shellcheck disable=SC2016
	start nsholder unshare --mount --propagation private sh -c '
		mount --bind "$1/var-lib" /var/lib && mount --bind "$1/var-log" /var/log &&
		mount --bind "$1/run-containerd" /run/containerd && mount --bind "$1/tmp" /tmp &&
		exec sleep infinity' nsholder "$RUN/ns"
	wait_for 50 "the private mount namespace" in_ns test -d /tmp/../var/lib -a ! -e /var/lib/dpkg
	start containerd nsenter -t "$(cat "$RUN/run/nsholder.pid")" -m containerd --config "$RUN/containerd/config.toml"
	wait_for 100 containerd ctr --address "$RUN/containerd/containerd.sock" version
	ctr --address "$RUN/containerd/containerd.sock" -n k8s.io images import "$PAUSE/pause-image.tar" >/dev/null ||
		die "importing the pause image failed"
	local names=()
	for img in "$@"; do names+=("$(k8s_name "$img")"); done
	import_images "$@"

	local p=$RUN/pki
	start_apiserver
	start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$RUN/scheduler.kubeconfig" \
		--authentication-kubeconfig="$RUN/scheduler.kubeconfig" --authorization-kubeconfig="$RUN/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --secure-port=$SCHED_PORT --leader-elect=false
	start kube-controller-manager nsenter -t "$(cat "$RUN/run/nsholder.pid")" -m "$BIN/kube-controller-manager" \
		--kubeconfig="$RUN/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$RUN/controller-manager.kubeconfig" --authorization-kubeconfig="$RUN/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --secure-port=$KCM_PORT --leader-elect=false --service-account-private-key-file="$p/sa.key" \
		--root-ca-file="$p/ca.crt" --use-service-account-credentials=true --flex-volume-plugin-dir="$RUN/volume-plugins" \
		--enable-hostpath-provisioner --controllers='*'
	cgroups create
	start kubelet nsenter -t "$(cat "$RUN/run/nsholder.pid")" -m "$BIN/kubelet" --config="$RUN/kubelet-config.yaml" \
		--kubeconfig="$RUN/kubelet.kubeconfig" --root-dir="$RUN/kubelet-root" --volume-plugin-dir="$RUN/volume-plugins" \
		--hostname-override=127.0.0.1 --v=1

	wait_for 900 "a Ready, schedulable node" node_ready
	wait_for 300 "the default service account" api "$(apiurl /api/v1/namespaces/default/serviceaccounts/default)"
	api -X POST -H 'Content-Type: application/json' "$(apiurl /apis/storage.k8s.io/v1/storageclasses)" -d '{
		"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
		"metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
		"provisioner": "kubernetes.io/host-path", "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}' >/dev/null ||
		die "creating the StorageClass standard failed; see $RUN/logs/kube-apiserver.log"
	say "up in $((SECONDS - t0)) s; images: ${names[*]:-none}"
	echo "$RUN/admin.kubeconfig"
}

# import_images IMAGE...: Docker images into the cluster's containerd as
# k8s.local/NAME:TAG (the tag replaced if it was there), listed in $RUN/images.
import_images() {
	local img kn ctr=(ctr --address "$RUN/containerd/containerd.sock" -n k8s.io)
	for img in "$@"; do
		kn=$(k8s_name "$img")
		docker tag "$img" "$kn"
		docker save "$kn" | "${ctr[@]}" images import - >/dev/null || die "importing $img as $kn failed"
		echo "$kn" >>"$RUN/images"
	done
	if [ -f "$RUN/images" ]; then sort -u -o "$RUN/images" "$RUN/images"; fi
}

# import IMAGE...: import_images into the running cluster.
import_into_running() {
	[ $# -gt 0 ] || die "usage: $0 import IMAGE..."
	alive containerd || die "the cluster is not running ($RUN): start it with scripts/k8s-cluster.sh up"
	local img
	for img in "$@"; do
		docker image inspect "$img" >/dev/null 2>&1 || die "image $img is not in the local Docker engine: build it first"
	done
	import_images "$@"
	say "imported: $(for img in "$@"; do k8s_name "$img"; done | tr '\n' ' ')"
}

start_apiserver() {
	local p=$RUN/pki
	start kube-apiserver "$BIN/kube-apiserver" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$API_PORT \
		--etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--client-ca-file="$p/ca.crt" --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
		--kubelet-client-certificate="$p/apiserver-kubelet-client.crt" --kubelet-client-key="$p/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=Hostname \
		--service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$p/sa.pub" \
		--service-account-signing-key-file="$p/sa.key" --service-cluster-ip-range=10.96.0.0/24 \
		--authorization-mode=Node,RBAC --endpoint-reconciler-type=none --allow-privileged=true
	wait_for 300 kube-apiserver curl -sf --max-time 2 --cacert "$p/ca.crt" "$(apiurl /readyz)"
}

# apiserver stop|start: the API server alone goes down or comes back, the rest of the
# cluster (and every pod) running on; for tests of what a client sees meanwhile.
apiserver() {
	case ${1:-} in
	stop)
		alive kube-apiserver || return 0
		kill "$(cat "$RUN/run/kube-apiserver.pid")" || true
		for _ in $(seq 50); do alive kube-apiserver || break; sleep 0.2; done
		if alive kube-apiserver; then kill -9 "$(cat "$RUN/run/kube-apiserver.pid")" || true; fi
		rm -f "$RUN/run/kube-apiserver.pid"
		;;
	start)
		alive kube-apiserver || start_apiserver
		;;
	*) die "usage: $0 apiserver stop|start" ;;
	esac
}

# --- down, status --------------------------------------------------------------------

alive() { [ -f "$RUN/run/$1.pid" ] && kill -0 "$(cat "$RUN/run/$1.pid")" 2>/dev/null; }

down() {
	[ -d "$RUN/run" ] || { echo stopped; return 0; }
	local c
	if alive kubelet; then kill "$(cat "$RUN/run/kubelet.pid")" || true; sleep 1; fi
	if [ -S "$RUN/containerd/containerd.sock" ] && alive containerd; then
		# Bounded: a task whose shim waits on a process that will not end must not
		# hold the stop; its shim is killed below.
		local ctr=(timeout 10 ctr --address "$RUN/containerd/containerd.sock" -n k8s.io)
		for c in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true; done
		sleep 1
		for c in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks delete -f "$c" >/dev/null 2>&1 || true; done
		for c in $("${ctr[@]}" containers ls -q 2>/dev/null); do "${ctr[@]}" containers delete "$c" >/dev/null 2>&1 || true; done
	fi
	for c in kubelet kube-controller-manager kube-scheduler kube-apiserver containerd etcd nsholder; do
		if alive "$c"; then kill "$(cat "$RUN/run/$c.pid")" 2>/dev/null || true; fi
	done
	# A test cluster: 5 s for a clean stop, then SIGKILL (the API server can take longer).
	local any
	for _ in $(seq 25); do
		any=0
		for c in $COMPONENTS containerd etcd nsholder; do if alive "$c"; then any=1; fi; done
		if [ $any = 0 ]; then break; fi
		sleep 0.2
	done
	for c in $COMPONENTS containerd etcd nsholder; do
		if alive "$c"; then say "$c did not stop within 5 s of SIGTERM: SIGKILL"; kill -9 "$(cat "$RUN/run/$c.pid")" || true; fi
		rm -f "$RUN/run/$c.pid"
	done
	# containerd-shims outlive containerd: ours are the ones whose socket path names $RUN.
	local pid
	for pid in $(pgrep containerd-shim || true); do
		if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-address $RUN/containerd/"; then
			kill -9 "$pid" 2>/dev/null || true
		fi
	done
	local m
	for m in $(grep -o " $RUN/[^ ]*" /proc/mounts | sort -r || true); do umount -l "$m" 2>/dev/null || true; done
	if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
	cgroups remove
	echo stopped
}

status() {
	local c rc=0
	for c in etcd nsholder containerd $COMPONENTS; do
		if alive "$c"; then echo "$c: running (pid $(cat "$RUN/run/$c.pid"))"; else echo "$c: stopped"; rc=1; fi
	done
	if [ -f "$RUN/pki/ca.crt" ] && node_ready 2>/dev/null; then
		echo "node 127.0.0.1: Ready"
		echo "kubeconfig: $RUN/admin.kubeconfig"
		echo "images: $(tr '\n' ' ' <"$RUN/images" 2>/dev/null)"
	else
		echo "node 127.0.0.1: not Ready"
		rc=1
	fi
	return $rc
}

case ${1:-} in
prepare) prepare ;;
up) shift; up "$@" ;;
import) shift; need_root; import_into_running "$@" ;;
down) need_root; down ;;
status) status ;;
apiserver) shift; need_root; apiserver "$@" ;;
*) die "usage: $0 prepare | up IMAGE... | import IMAGE... | down | status | apiserver stop|start" ;;
esac
