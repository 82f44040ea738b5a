# make test   – set up what the tests need (Docker engine, test images, browser, npm
#               clients) on a fresh Debian machine with Go, then run the repository
#               checks, the linter, go vet and every test.
# make check  – the repository's own checks: doc links, no large tracked file, build
#               outputs ignored (no Docker needed).
# make lint   – golangci-lint at a pinned version, fetched through the Go module proxy.
# make bench  – the benchmarks, with their raw-Docker baselines measured in the same run.
# make build  – bin/caddy: Caddy with the standard modules and this plugin.
# make run    – build and start Caddy on http://localhost:8080 with examples/Caddyfile.local,
#               building a sandbox image first when there is none (see scripts/run-local.sh).
GO         ?= go
TEST_IMAGE ?= code-sandbox-test:latest
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
export SANDBOX_TEST_IMAGE := $(TEST_IMAGE)

.PHONY: test testenv check lint bench build run vet

test: check lint testenv
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 45m ./...
	# These restart dockerd under a running Caddy, so they run alone, after the rest.
	MCP_SANDBOX_RESTART_DOCKER=1 $(GO) test -race -count=1 -run '^(TestEngineRestart|TestCheckpointEngineRestart)$$' ./integration

testenv:
	scripts/docker-up.sh
	containers/build-test-image.sh $(TEST_IMAGE)
	containers/build-debian-image.sh --set test code-sandbox-debian:latest
	scripts/test-deps.sh

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
