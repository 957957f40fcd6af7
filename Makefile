# Converge — build, test and run against a real local control plane.
# `make run` and `make test` are the two commands of the README.

SHELL := /bin/bash
# pipefail: a recipe that filters go test's output through grep fails when the tests fail.
.SHELLFLAGS := -o pipefail -c
export GOTOOLCHAIN := local
export GOFLAGS := -mod=readonly

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN := $(CURDIR)/bin
RUN_DIR := $(CURDIR)/.run
# Where e2e/tools/build.sh puts the control plane for this checkout (keyed by its pins).
CONTROLPLANE_BIN = $(shell e2e/tools/build.sh --dir)
TEST_TIMEOUT ?= 30m

.PHONY: all build deps controlplane test test-faults vet unit cluster cluster-down run run-publish stop clean help bench bench-quick generate verify-generate

all: build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# bin/converge is built as the image builds it (Dockerfile): static, CGO_ENABLED=0. With cgo,
# kustomize's import of "plugin" makes the link dynamic: every symbol exported (a 22 MB
# dynamic symbol table) and every exported method of every reachable type kept, up to
# 32 MB more of the binary in a running daemon's resident set (docs/benchmarks.md, memory).
# bin/converge-decrypt is the SOPS decryption program converge starts (from its own folder)
# when a render holds an encrypted object: the only binary that links sops and, through it,
# every cloud KMS client and gRPC (docs/benchmarks.md, memory).
build: ## build bin/converge, bin/converge-decrypt and bin/devcluster
	CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=$(VERSION)" -o $(BIN)/converge ./cmd/converge
	CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=$(VERSION)" -o $(BIN)/converge-decrypt ./cmd/converge-decrypt
	go build -trimpath -o $(BIN)/devcluster ./e2e/devcluster

controlplane: ## build etcd, kube-apiserver, controllers, scheduler, kwok (cached in ~/.cache/converge)
	@e2e/tools/build.sh >/dev/null

# controller-gen turns the Sync API (status/v1alpha1: types, markers, doc comments) into
# zz_generated.deepcopy.go and the CRD deploy/crd/converge.dev_syncs.yaml. `go run pkg@version`
# builds it from its own go.mod, so its dependencies never enter ours (no tool directive that
# would pull controller-tools into the k8s.io pins); Go's build cache keeps the build, so only
# the first run compiles it (a few minutes), later runs take seconds.
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := go run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
API_PATHS := paths=./status/v1alpha1/...

generate: ## regenerate the Sync API's deepcopy and CRD (deploy/crd) from status/v1alpha1
	$(CONTROLLER_GEN) object $(API_PATHS) crd $(API_PATHS) output:crd:dir=deploy/crd

verify-generate: ## fail when the generated deepcopy or CRD differ from status/v1alpha1 (CI runs it)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(CONTROLLER_GEN) object $(API_PATHS) output:object:dir=$$tmp crd $(API_PATHS) output:crd:dir=$$tmp && \
	[ "$$(ls $$tmp)" = "$$(printf 'converge.dev_syncs.yaml\nzz_generated.deepcopy.go')" ] || { echo "controller-gen wrote: $$(ls $$tmp); update the Makefile's generate targets"; exit 1; }; \
	diff -u status/v1alpha1/zz_generated.deepcopy.go $$tmp/zz_generated.deepcopy.go && \
	diff -u deploy/crd/converge.dev_syncs.yaml $$tmp/converge.dev_syncs.yaml || \
	{ echo "the generated API files differ from status/v1alpha1: run 'make generate' and commit the result"; exit 1; }

vet: ## go vet every package
	go vet ./...

deps: ## install the Debian packages the tests use (git, prometheus, docker-registry) when missing
	@missing=""; for p in git prometheus docker-registry; do command -v $$p >/dev/null || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then echo "installing$$missing"; apt-get update -qq && apt-get install -y -qq $$missing >/dev/null; \
		else echo "missing$$missing: install them (sudo apt-get install$$missing)"; fi; \
	fi

test: deps controlplane vet ## vet, unit and integration tests against the real control plane, with -race
	@mkdir -p $(RUN_DIR)
	CONVERGE_CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) go test -race -count=1 -timeout $(TEST_TIMEOUT) ./... 2>&1 | tee $(RUN_DIR)/test.log || \
	{ echo; echo "== what failed (the whole output is in .run/test.log)"; \
	  awk '/--- FAIL|^panic: |^WARNING: DATA RACE|^FAIL\t|test timed out/{n=40} n>0{print; n--}' $(RUN_DIR)/test.log | grep -v '^I[0-9]\{4\} ' | head -400; exit 1; }

SEEDS ?= 200
test-faults: controlplane ## randomized fault sweep: SEEDS=N seeds (default 200) or SEEDS=A-B, or SEED=n to replay one
	CONVERGE_CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) CONVERGE_FAULT_SEEDS=$(SEEDS) CONVERGE_FAULT_SEED=$(SEED) \
		go test -race -count=1 -timeout 60m -v -run TestRandomFaults ./engine/ | grep -v '^=== RUN\|^    --- PASS\|faults_test.go:.*under faults'

.PHONY: test-faults-daemon
test-faults-daemon: controlplane ## two-replica fault sweep (replicas killed, paused, failing at random): SEEDS=N seeds or SEEDS=A-B, or SEED=n to replay one
	CONVERGE_CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) CONVERGE_FAULT_SEEDS=$(SEEDS) CONVERGE_FAULT_SEED=$(SEED) \
		go test -count=1 -timeout 600m -v -run TestBinaryShardsRandomFaults ./e2e/ | grep -v '^=== RUN\|^    --- PASS'

unit: ## only tests that need no control plane (-short)
	go test -race -short -count=1 ./...

cluster: controlplane build ## start the full local control plane in the background; prints the kubeconfig path last
	@CONVERGE_CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) $(BIN)/devcluster up --dir $(RUN_DIR)/cluster --profile full

cluster-down: ## stop the control plane started by `make cluster` or `make run`
	@if [ -x $(BIN)/devcluster ]; then $(BIN)/devcluster down --dir $(RUN_DIR)/cluster; else echo "nothing to stop"; fi

run: controlplane build ## the demo: control plane, local git server seeded from examples/, the daemon syncing it
	@CONVERGE_CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) $(BIN)/devcluster up --dir $(RUN_DIR)/cluster --profile full \
		--demo-converge $(BIN)/converge --demo-examples examples
	@echo
	@echo "Next:"
	@echo "  export KUBECONFIG=$(RUN_DIR)/cluster/kubeconfig"
	@echo "  kubectl get syncs -A; kubectl -n demo get deploy,svc,cm"
	@echo "  edit examples/demo and run 'make run-publish' to commit it to the local git server"
	@echo "  daemon log: $(RUN_DIR)/cluster/converge.log"
	@echo "  make cluster-down   # stop everything"

run-publish: build ## commit examples/ to the demo git server started by `make run`
	@$(BIN)/devcluster publish --dir $(RUN_DIR)/cluster --demo-examples examples

stop: cluster-down

clean: cluster-down ## remove build outputs and the local run directory (not the control-plane cache)
	rm -rf $(BIN) $(RUN_DIR)

.PHONY: image
image: ## build the container image (IMAGE=ghcr.io/converge-dev/converge:$(VERSION)) with docker or podman
	@engine=; for e in docker podman; do \
		if command -v $$e >/dev/null 2>&1 && $$e info >/dev/null 2>&1; then engine=$$e; break; fi; \
	done; \
	if [ -z "$$engine" ]; then \
		echo "make image: no usable container engine: need docker (with a running daemon) or podman on PATH." >&2; \
		echo "  The binary alone builds with 'make build'; CI builds the image where an engine runs." >&2; \
		exit 1; \
	fi; \
	echo "$$engine build --build-arg VERSION=$(VERSION) -t $(or $(IMAGE),ghcr.io/converge-dev/converge:$(VERSION)) ."; \
	$$engine build --build-arg VERSION=$(VERSION) -t $(or $(IMAGE),ghcr.io/converge-dev/converge:$(VERSION)) .

BENCH_RUNS ?= 3
BENCH_FLAGS ?=

bench: controlplane bench-render bench-50k ## benchmark converge vs a Flux-style engine vs a parallel-SSA floor, 10,000 objects, then one Sync of 50,000 (docs/benchmarks.md)
	CONVERGE_CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) go run ./e2e/bench -objects 10000 -runs $(BENCH_RUNS) $(BENCH_FLAGS)

BENCH_50K_ENGINES ?= converge-watch,floor

.PHONY: bench-50k
bench-50k: controlplane ## one set of 50,000 objects (its inventory in parts): the daemon's engine (converge-watch) and the floor only; the Flux-style baseline would take hours
	CONVERGE_CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) go run ./e2e/bench -objects 50000 -engines $(BENCH_50K_ENGINES) -runs $(BENCH_RUNS) -json .run/bench/results-50000.json $(BENCH_FLAGS)

.PHONY: bench-render
bench-render: ## kustomize render of 1,000 and 10,000 resources: krusty whole vs Converge's chunked path (minutes: krusty is quadratic); then a Helm chart of as many: Helm's engine vs Converge's render child (seconds)
	go run ./e2e/bench -render -objects 10000

bench-quick: controlplane ## the same benchmark at 1,000 objects, for CI (prints figures, asserts no timings)
	CONVERGE_CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) go run ./e2e/bench -objects 1000 -runs $(BENCH_RUNS) $(BENCH_FLAGS)

.PHONY: bench-daemon
bench-daemon: controlplane ## one converge daemon: 1 Sync of 10,000 objects vs 100 Syncs of 100 vs 1 Sync from a Helm chart of the same objects (BENCH_FLAGS=-objects=1000 for a quick run)
	CONVERGE_CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) go run ./e2e/bench -daemon -objects 10000 -runs $(BENCH_RUNS) $(BENCH_FLAGS)

.PHONY: bench-ordered-noop
bench-ordered-noop: controlplane ## requests and writes of a no-op reconcile of 10,000 objects in waves, with depends-on and ignore rules (paths and managers)
	CONVERGE_CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) CONVERGE_ORDERED_NOOP_OBJECTS=10000 go test -count=1 -v -timeout 30m -run '^TestWatchOrderedNoOpSendsNothing$$' ./engine/ 2>&1 | grep -E -- '--- |no-op of|^(ok|FAIL)'

.PHONY: bench-daemon-scale
bench-daemon-scale: controlplane ## the scale scenario: 1,000 Syncs x 100 objects on 1 and on 3 sharded replicas (BENCH_FLAGS="-syncs 30 -objects 600" for a quick run)
	CONVERGE_CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) go run ./e2e/bench -daemon -scale -syncs 1000 -objects 100000 -replicas 1,3 $(BENCH_FLAGS)
