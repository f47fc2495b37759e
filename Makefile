# eviction-autoscaler. `make demo` and `make test` are the two entry points.
SHELL := /bin/bash
CLUSTER_DIR ?= $(CURDIR)/.cluster
export CLUSTER_DIR
CARGO ?= cargo

.PHONY: build release test unit model-long e2e lint fmt demo bench cluster-up cluster-down deploy-local undeploy-local crd clean

build:
	$(CARGO) build --bin eviction-autoscaler

release:
	$(CARGO) build --release --bin eviction-autoscaler

## Unit tests, the no-cluster server tests, then the end-to-end tests on a
## local control plane that is brought up for them and down afterwards.
test: unit
	@set -e; started=0; \
	if ! ( [ -f "$(CLUSTER_DIR)/env" ] && . "$(CLUSTER_DIR)/env" && kubectl version >/dev/null 2>&1 ); then \
		tests/cluster/up.sh; started=1; fi; \
	rc=0; $(MAKE) --no-print-directory e2e || rc=$$?; \
	tests/e2e/deploy-local.sh stop >/dev/null 2>&1 || true; \
	if [ $$started = 1 ]; then tests/cluster/down.sh; fi; \
	exit $$rc

## The surge model (src/surge/model.rs) prints how many random histories it
## ran; SURGE_HISTORIES sets the number (default 10,000).
unit:
	$(CARGO) test --lib --bins --test server_smoke -- --skip surge::model
	$(CARGO) test --lib surge::model -- --nocapture

## The surge model's long run: many more histories, optimised build.
model-long:
	SURGE_RANDOM=1 SURGE_HISTORIES=$${SURGE_HISTORIES:-200000} $(CARGO) test --release --lib surge::model -- --nocapture

## End-to-end tests against a running local cluster (make cluster-up).
## They fail, never skip, when it is not there.
e2e: build
	@rm -f $(CLUSTER_DIR)/figures.txt
	$(CARGO) test --test e2e -- --test-threads=4
	$(CARGO) test --test e2e_modes -- --test-threads=1
	@echo "--- figures measured by the drain tests ---"; cat $(CLUSTER_DIR)/figures.txt 2>/dev/null || true

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

crd:
	$(CARGO) run --quiet -- crd > manifests/crd.yaml

cluster-up:
	tests/cluster/up.sh

cluster-down:
	tests/cluster/down.sh

deploy-local: build
	tests/e2e/deploy-local.sh start

undeploy-local:
	tests/e2e/deploy-local.sh stop

## Local control plane, the webhook, and a real `kubectl drain`.
demo: build
	tests/cluster/up.sh
	tests/e2e/demo.sh

bench:
	$(CARGO) run --release --example bench -- BENCHMARKS.md

clean:
	-tests/cluster/down.sh
	$(CARGO) clean
