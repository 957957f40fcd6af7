# Converge — build, test and run against a real local control plane.
# `make run` and `make test` are the two commands of the README.

SHELL := /bin/bash
export GOTOOLCHAIN := local
export GOFLAGS := -mod=readonly

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN := $(CURDIR)/bin
RUN_DIR := $(CURDIR)/.run
# Where e2e/tools/build.sh puts the control plane for this checkout (keyed by its pins).
CONTROLPLANE_BIN = $(shell e2e/tools/build.sh --dir)
TEST_TIMEOUT ?= 30m

.PHONY: all build controlplane test vet unit cluster cluster-down run run-publish stop clean help

all: build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/converge and bin/devcluster
	go build -trimpath -ldflags "-X main.version=$(VERSION)" -o $(BIN)/converge ./cmd/converge
	go build -trimpath -o $(BIN)/devcluster ./e2e/devcluster

controlplane: ## build etcd, kube-apiserver, controllers, scheduler, kwok (cached in ~/.cache/converge)
	@e2e/tools/build.sh >/dev/null

vet: ## go vet every package
	go vet ./...

test: controlplane vet ## vet, unit and integration tests against the real control plane, with -race
	CONVERGE_CONTROLPLANE_BIN=$(CONTROLPLANE_BIN) go test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

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
	@echo "  make cluster-down   # stop everything"

run-publish: build ## commit examples/ to the demo git server started by `make run`
	@$(BIN)/devcluster publish --dir $(RUN_DIR)/cluster --demo-examples examples

stop: cluster-down

clean: cluster-down ## remove build outputs and the local run directory (not the control-plane cache)
	rm -rf $(BIN) $(RUN_DIR)
