# eviction-autoscaler. `make demo` and `make test` are the two entry points.
SHELL := /bin/bash
CLUSTER_DIR ?= $(CURDIR)/.cluster
export CLUSTER_DIR
CARGO ?= cargo

.PHONY: build release test unit model-long e2e lint lint-ci tools chart-check fmt demo demo-check bench bench-cluster cluster-up cluster-down deploy-local undeploy-local crd clean fuzz fuzz-cmin

build:
	$(CARGO) build --bin eviction-autoscaler

release:
	$(CARGO) build --release --bin eviction-autoscaler

## Unit tests, the no-cluster server tests, then the end-to-end tests on a
## local control plane that is brought up for them and down afterwards, then
## the demo on a cluster of its own (demo-check, ~100 s) so it cannot rot.
test: unit lint-ci
	@set -e; started=0; \
	if ! ( [ -f "$(CLUSTER_DIR)/env" ] && . "$(CLUSTER_DIR)/env" && kubectl version >/dev/null 2>&1 ); then \
		tests/cluster/up.sh; started=1; fi; \
	rc=0; $(MAKE) --no-print-directory e2e || rc=$$?; \
	tests/e2e/deploy-local.sh stop >/dev/null 2>&1 || true; \
	if [ $$started = 1 ]; then tests/cluster/down.sh; fi; \
	[ $$rc = 0 ] || exit $$rc; \
	$(MAKE) --no-print-directory demo-check

## The surge model (src/surge/model.rs) prints how many random histories it
## ran; SURGE_HISTORIES sets the number (default 10,000).
unit:
	$(CARGO) test --lib --bins --test server_smoke -- --skip surge::model
	$(CARGO) test --lib surge::model -- --nocapture

## The surge model's long run: many more histories, optimised build.
model-long:
	SURGE_RANDOM=1 SURGE_HISTORIES=$${SURGE_HISTORIES:-200000} $(CARGO) test --release --lib surge::model -- --nocapture

## End-to-end tests against a running local cluster (make cluster-up).
## They fail, never skip, when it is not there. tests/run-suites.sh runs the
## suites (each under a deadline, all of them even after a failure) in two
## lanes, the second on a cluster of its own ($(CLUSTER_DIR)-b) that it
## brings up and down, and ends with a digest of the failures; SUITES="chaos"
## runs some on $(CLUSTER_DIR) alone.
e2e: build tools
	@rm -f $(CLUSTER_DIR)/figures.txt
	CHAOS_KILLS=$${CHAOS_KILLS:-3} CARGO="$(CARGO)" tests/run-suites.sh

## Fault tolerance (docs/reliability.md): the leader-kill loop with
## CHAOS_KILLS SIGKILLs (default 20) during node drains, on a local cluster
## brought up for it if none is running; its figures are printed at the end.
.PHONY: chaos
chaos: build
	@set -e; started=0; \
	if ! ( [ -f "$(CLUSTER_DIR)/env" ] && . "$(CLUSTER_DIR)/env" && kubectl version >/dev/null 2>&1 ); then \
		tests/cluster/up.sh; started=1; fi; \
	rm -f $(CLUSTER_DIR)/figures.txt; rc=0; \
	CHAOS_KILLS=$${CHAOS_KILLS:-20} $(CARGO) test --test chaos leader_killed_repeatedly -- --test-threads=1 || rc=$$?; \
	echo "--- figures ---"; cat $(CLUSTER_DIR)/figures.txt 2>/dev/null || true; \
	tests/e2e/deploy-local.sh stop >/dev/null 2>&1 || true; \
	if [ $$started = 1 ]; then tests/cluster/down.sh; fi; \
	exit $$rc

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

## The workflows in .github/ (actionlint; it runs shellcheck on their scripts when
## installed), and the version and image names the release workflow relies on.
lint-ci: tools
	eval "$$(tests/tools/build.sh --print-env)"; "$$ACTIONLINT_BIN"
	tests/tools/check-release.sh

## helm and actionlint, built once from Go modules (tests/tools/) into ~/.cache.
tools:
	@tests/tools/build.sh

## The Helm chart: helm lint, and tests/e2e/chart.rs (rendered RBAC, args, env,
## webhooks and CRD equal to manifests/; server-side dry run on the local
## cluster with each certificate source; the chart's certificate served and
## trusted), plus the version and image names. Brings the cluster up if needed.
chart-check: build lint-ci
	eval "$$(tests/tools/build.sh --print-env)"; "$$HELM_BIN" lint --strict charts/eviction-autoscaler
	@set -e; started=0; \
	if ! ( [ -f "$(CLUSTER_DIR)/env" ] && . "$(CLUSTER_DIR)/env" && kubectl version >/dev/null 2>&1 ); then \
		tests/cluster/up.sh; started=1; fi; \
	rc=0; $(CARGO) test --test e2e chart_ -- --test-threads=2 || rc=$$?; \
	tests/e2e/deploy-local.sh stop >/dev/null 2>&1 || true; \
	if [ $$started = 1 ]; then tests/cluster/down.sh; fi; \
	exit $$rc

fmt:
	$(CARGO) fmt --all

crd:
	$(CARGO) run --quiet -- crd > manifests/crd.yaml
	cp manifests/crd.yaml charts/eviction-autoscaler/crds/evictionautoscalers.yaml

cluster-up:
	tests/cluster/up.sh

## Stops everything `make cluster-up`, `make deploy-local` and `make demo` started.
cluster-down:
	tests/cluster/down.sh
	-CLUSTER_DIR=$(CLUSTER_DIR)-b tests/cluster/down.sh

deploy-local: build
	tests/e2e/deploy-local.sh start

undeploy-local:
	tests/e2e/deploy-local.sh stop

## The story of a real `kubectl drain` on the local control plane: four
## workloads, a timeline as it happens, a picture at .cluster/demo/demo.svg.
## Leaves the cluster and the server up; `make cluster-down` stops both.
demo: build
	tests/cluster/up.sh
	demo/run.sh

## The demo end to end on a cluster of its own (.cluster-demo-check), its story
## and picture checked, then `make cluster-down`'s work checked (about 100 s; the last step of `make test`).
demo-check: build
	demo/check.sh

bench:
	$(CARGO) run --release --example bench -- BENCHMARKS.md

## Fuzzing, not part of `make test` (its first build alone takes longer than
## CI's budget). The three libFuzzer targets in fuzz/ (nightly toolchain and
## `cargo install cargo-fuzz`) run FUZZ_RUNS inputs each from the committed
## corpus (fuzz/corpus/<target>), with a 10 s per-input timeout (a hang is a
## failure) and a 2 GiB RSS limit; then the HTTP-layer driver (stable)
## throws HTTP_FUZZ_INPUTS mutated requests and the slow/oversized/flood
## scenarios at the real server. Figures: docs/security.md.
FUZZ_RUNS ?= 350000
FUZZ_TARGETS := admission_decode eviction_handler mutate_handler
fuzz:
	@set -e; cd fuzz; for t in $(FUZZ_TARGETS); do \
		echo "--- fuzz $$t: $(FUZZ_RUNS) inputs"; \
		cargo +nightly fuzz run -O -s none $$t corpus/$$t -- \
			-runs=$(FUZZ_RUNS) -timeout=10 -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1; \
	done
	HTTP_FUZZ_INPUTS=$${HTTP_FUZZ_INPUTS:-40000} $(CARGO) run --example http_fuzz

## Shrinks the corpora to the inputs that add coverage (run before committing them).
fuzz-cmin:
	@set -e; cd fuzz; for t in $(FUZZ_TARGETS); do cargo +nightly fuzz cmin -O -s none $$t corpus/$$t; done

clean:
	-tests/cluster/down.sh
	-CLUSTER_DIR=$(CLUSTER_DIR)-b tests/cluster/down.sh
	$(CARGO) clean

## At-scale figures on a running local control plane (make cluster-up first):
## 2,000 Deployments converging, then 10 minutes of steady state, then drains
## of 300 pods on three nodes with and without the product. BENCH_WHAT=
## convergence|drains picks one; BENCH_DEPLOYMENTS, BENCH_STEADY (seconds),
## BENCH_DRAIN_DEPLOYMENTS scale it. Takes ~25 minutes. BENCH_WHAT=memory
## (not in the default run): the server's RSS and time to /readyz with
## BENCH_PODS (10000,50000,100000) pods.
bench-cluster: release
	EA_BIN=$(CURDIR)/target/release/eviction-autoscaler $(CARGO) test --release --test bench_cluster -- $(BENCH_WHAT)
