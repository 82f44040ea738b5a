# make test   – set up what the tests need (Docker engine, test image, browser, npm
#               clients) on a fresh Debian machine with Go, then run every test.
# make bench  – the benchmarks, with their raw-Docker baselines measured in the same run.
# make build  – bin/caddy: Caddy with the standard modules and this plugin.
# make run    – build and start Caddy on http://localhost:8080 with examples/Caddyfile.local.
GO         ?= go
TEST_IMAGE ?= code-sandbox-test:latest
export SANDBOX_TEST_IMAGE := $(TEST_IMAGE)

.PHONY: test testenv bench build run vet

test: testenv
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 45m ./...
	# Restarts dockerd under a running Caddy, so it runs alone, after the rest.
	MCP_SANDBOX_RESTART_DOCKER=1 $(GO) test -race -count=1 -run '^TestEngineRestart$$' .

testenv:
	scripts/docker-up.sh
	containers/build-test-image.sh $(TEST_IMAGE)
	containers/build-debian-image.sh
	scripts/test-deps.sh

bench: testenv
	$(GO) test -run '^$$' -bench . -benchtime 3s ./...

vet:
	$(GO) vet ./...

build:
	$(GO) build -o bin/caddy ./cmd/caddy

run:
	scripts/run-local.sh
