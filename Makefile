# Developer entry points. `make run` shows the provider working; `make test` is what CI runs (.ci/run).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

TOOLS := tests/tools

.PHONY: help
help: ## Show the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

.PHONY: deps
deps: ## Install missing Debian packages the scripts use (openssl, curl, python3, the arm64 cross toolchain, qemu-user)
	@$(TOOLS)/deps.sh release

.PHONY: k8s-bin
k8s-bin: deps ## Build kube-apiserver, kubectl, etcd and the Cluster API manager from their Go modules (cached outside the repo)
	@$(TOOLS)/k8s-bin.sh >/dev/null
	@$(TOOLS)/k8s-bin.sh capi >/dev/null

.PHONY: cluster-up
cluster-up: k8s-bin ## Start etcd, kube-apiserver and the Cluster API core manager on 127.0.0.1 (kubeconfig: .dev/kubeconfig)
	@$(TOOLS)/control-plane.sh up

.PHONY: cluster-down
cluster-down: ## Stop the control plane and remove its state
	@$(TOOLS)/control-plane.sh down

.PHONY: generate
generate: ## Regenerate the CRDs and webhook manifests from the Rust types, and the chart's README from its values (tests fail when they drift)
	cargo run --quiet --bin generate
	python3 $(TOOLS)/chart-readme.py

.PHONY: release-manifests
release-manifests: ## Write out/ipam-components.yaml and out/metadata.yaml (the clusterctl provider artifacts)
	@mkdir -p out
	"$$($(TOOLS)/k8s-bin.sh kustomize | tail -n1)/kustomize" build config/clusterctl > out/ipam-components.yaml
	cp config/metadata.yaml out/metadata.yaml
	@echo "wrote out/ipam-components.yaml and out/metadata.yaml"

.PHONY: release
release: ## Everything a release publishes, in out/release: amd64+arm64 image index, SBOMs, clusterctl and Operator artifacts, chart, SHA256SUMS
	@$(TOOLS)/release.sh

.PHONY: image
image: ## The manager's OCI image without a container engine: out/image/oci (OCI layout) and out/image/image.tar (docker load)
	@$(TOOLS)/image.sh

.PHONY: run
run: k8s-bin ## Start the control plane and run the manager against it (Ctrl-C stops the manager)
	@$(TOOLS)/run.sh

.PHONY: test
test: deps ## Go tools (cached), fmt, clippy, the image, unit tests, the simulation, integration tests against a real control plane
	@$(TOOLS)/test.sh

.PHONY: module-graph
module-graph: ## The module graph of src/ (top-level modules, and siblings of one parent) and its cycles
	python3 $(TOOLS)/module-graph.py

.PHONY: sim
sim: ## Soak the deterministic simulation: SIM_SEEDS seeds (default 1,000,000) from SIM_SEED_BASE (default: random)
	SIM_SEEDS=$${SIM_SEEDS:-1000000} SIM_SEED_BASE=$${SIM_SEED_BASE:-$$(( $$(date +%s) << 20 ))} \
	  cargo test --release --lib sim::tests::soak -- --exact --nocapture

.PHONY: sim-replay
sim-replay: ## Replay one seed of the simulation with its trace: make sim-replay SIM_SEED=<n>
	@test -n "$${SIM_SEED:-}" || { echo "usage: make sim-replay SIM_SEED=<n>" >&2; exit 2; }
	cargo test --release --lib sim::tests::replay -- --exact --nocapture

.PHONY: bench-allocator
bench-allocator: ## Allocator benchmarks (criterion), ends with the allocation speedup line
	cargo bench --bench allocator
	@python3 $(TOOLS)/bench-summary.py allocator

.PHONY: bench-e2e
bench-e2e: k8s-bin ## 1,000 and 10,000 claims: claims/s and API server CPU per claim vs the minimal write set; 20 pools; peak RSS
	cargo bench --bench e2e

.PHONY: bench-vs-caip
bench-vs-caip: k8s-bin ## Side by side with the Go provider (built from its Go module): 1,000, 3,000 and 10,000 claims
	cargo bench --bench vs_caip

.PHONY: bench-memory
bench-memory: k8s-bin ## The manager's memory with 100,000 claims and IPAddresses cached (MEMORY_CLAIMS=n)
	cargo bench --bench memory

.PHONY: mutants
mutants: ## The proof of the proof: each regression of tests/tools/mutants.py, one at a time, and what catches it
	python3 $(TOOLS)/mutants.py $${MUTANTS_ONLY:+--only $$MUTANTS_ONLY} $${MUTANTS_RELEASE:+--release}
