# make test   – set up what the tests need (Docker engine, gVisor's runsc registered with
#               it, test images, browser, npm clients, the test Kubernetes cluster) on a
#               fresh Debian machine with Go,
#               then run the repository checks, the linter, go vet and every test.
#               The cluster keeps running afterwards: make k8s-down stops it.
# make check  – the repository's own checks: doc links, no large tracked file, build
#               outputs ignored (no Docker needed).
# make lint   – golangci-lint at a pinned version, fetched through the Go module proxy.
# make bench  – the benchmarks, with their raw-Docker baselines measured in the same run.
# make build  – bin/caddy: Caddy with the standard modules and this plugin.
# make k8s-down – stop the test Kubernetes cluster (scripts/k8s-cluster.sh; caches kept).
# make run    – build and start Caddy on http://localhost:8080 with examples/Caddyfile.local,
#               building a sandbox image first when there is none (see scripts/run-local.sh).
GO         ?= go
TEST_IMAGE ?= code-sandbox-test:latest
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
export SANDBOX_TEST_IMAGE := $(TEST_IMAGE)
# The test cluster's run dir (scripts/k8s-cluster.sh) and the name it gives TEST_IMAGE.
K8S_RUN    ?= $(or $(K8S_HOME),$(or $(MCP_SANDBOX_CACHE),/var/cache/mcp-sandbox)/k8s-run)
KUBE_TEST_IMAGE ?= k8s.local/$(notdir $(TEST_IMAGE))

.PHONY: test testenv check lint bench build run vet k8s-down

# What the tests read to find the cluster; unset (go test by hand), they skip.
test bench: export MCP_SANDBOX_KUBECONFIG = $(K8S_RUN)/admin.kubeconfig
test bench: export MCP_SANDBOX_KUBE_IMAGE = $(KUBE_TEST_IMAGE)
# testenv registers runsc with the engine (scripts/gvisor.sh): the gVisor tests fail
# rather than skip when it is missing.
test bench: export MCP_SANDBOX_GVISOR = 1

test: check lint testenv
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 45m ./...
	# These restart dockerd or the cluster's API server under a running Caddy, so they
	# run alone, after the rest.
	MCP_SANDBOX_RESTART_DOCKER=1 MCP_SANDBOX_RESTART_KUBE=1 $(GO) test -race -count=1 -run '^(TestEngineRestart|TestCheckpointEngineRestart|TestKeepProcessesEngineRestart|TestKubeAPIServerRestart)$$' ./integration

testenv:
	scripts/docker-up.sh
	scripts/gvisor.sh
	containers/build-test-image.sh $(TEST_IMAGE)
	containers/build-debian-image.sh --set test code-sandbox-debian:latest
	scripts/test-deps.sh
	@# A fresh cluster each run; it fails make when it cannot start, it never skips.
	scripts/k8s-cluster.sh up $(TEST_IMAGE) || { echo "make: the test Kubernetes cluster did not start (see above; scripts/k8s-cluster.sh status); the Kubernetes tests need it" >&2; exit 1; }

check:
	$(GO) test -count=1 ./internal/repocheck

lint:
	$(GOLANGCI_LINT) run ./...

bench: testenv
	$(GO) test -run '^$$' -bench . -benchtime 3s ./...

vet:
	$(GO) vet ./...

build:
	$(GO) build -o bin/caddy ./cmd/caddy

run:
	scripts/run-local.sh

k8s-down:
	scripts/k8s-cluster.sh down
