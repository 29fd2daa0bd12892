# nodedns — per-node DNS for Kubernetes.
# `make help` lists the targets.

GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
BIN       := bin
export CGO_ENABLED := 0
# The frontend and shared code run under the race detector; the rest (CoreDNS,
# client-go, Helm) without it, to keep the suite's time and memory in bounds.
RACE_PKGS := ./frontend/... ./shared/...

.PHONY: help build test bench demo testbed tools images fuzz clean difftest memstudy

help: ## List the targets.
	@awk 'BEGIN{FS=":.*## "} /^[a-zA-Z0-9_.-]+:.*## /{printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build bin/nodedns-frontend, bin/nodedns-backend and bin/nodedns-loadtest.
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/nodedns-frontend ./frontend
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/nodedns-backend ./backend
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/nodedns-loadtest ./loadtest

# `make test` runs both tiers under gotestsum (gotest.tools/gotestsum,
# pinned and built by tools/gotestsum/build.sh into ~/.cache/nodedns): it
# shows each package's result and each failing test's output as they come,
# records every `go test -json` event in TEST_EVENTS, and ends with one
# summary of both tiers and their failures. tools/testsummary then adds
# tests run, passed, failed, skipped, and each skip reason with its count;
# with NODEDNS_STRICT_SKIPS=1 (.ci/run) a skip is an error unless
# tools/testsummary/allow.go names its reason. Both tiers run even when the
# first fails; the status is non-zero when anything failed.
TEST_OUT    := $(BIN)/test
TEST_EVENTS := $(TEST_OUT)/events.json
TESTSUMMARY := $(BIN)/testsummary
# The tiers, as one command whose stdout is both tiers' events.
REST_PKGS    = $(shell $(GO) list ./... | grep -v -E '/nodedns/(frontend|shared)(/|$$)')
TEST_TIERS   = status=0; \
	CGO_ENABLED=1 $(GO) test -json -race -count=1 -timeout 20m $(RACE_PKGS) || status=1; \
	$(GO) test -json -count=1 -timeout 60m $(REST_PKGS) || status=1; \
	exit $$status

test: build ## Run the whole test suite; as root, first install what it needs (tools/deps.sh, make tools); end with a summary of what ran and skipped.
	@tools/deps.sh test
	@if [ "$$(id -u)" -eq 0 ]; then $(MAKE) --no-print-directory tools; fi
	$(GO) vet ./...
	$(GO) build -o $(TESTSUMMARY) ./tools/testsummary
	@rm -f $(TEST_EVENTS)
	@gotestsum=$$(tools/gotestsum/build.sh) || exit 1; status=0; \
	$$gotestsum --format pkgname-and-test-fails --hide-summary=skipped --jsonfile $(TEST_EVENTS) \
		--raw-command -- sh -c '$(TEST_TIERS)' || status=1; \
	$(TESTSUMMARY) $(TEST_EVENTS) || status=1; \
	exit $$status

# `make difftest` runs the differential suite alone (difftest/README.md);
# `make test` runs it too, with the rest. Its last line is the summary.
DIFFTEST_OUT := $(BIN)/difftest.txt

difftest: build ## Compare the frontend with the backend on every Corefile shape of the chart (root; about 5 min); last line: queries, differences, unasked upstream names.
	@mkdir -p $(BIN); rm -f $(DIFFTEST_OUT)
	@status=0; NODEDNS_DIFFTEST_SUMMARY=$(CURDIR)/$(DIFFTEST_OUT) NODEDNS_BACKEND_BIN=$(CURDIR)/$(BIN)/nodedns-backend NODEDNS_FRONTEND_BIN=$(CURDIR)/$(BIN)/nodedns-frontend \
		$(GO) test -count=1 -timeout 20m -v -run '^(TestDifferential|FuzzDifferential)$$' ./difftest/ || status=$$?; \
	if [ -s $(DIFFTEST_OUT) ]; then cat $(DIFFTEST_OUT); else echo "difftest: no summary (the suite did not run to its end)"; status=1; fi; \
	exit $$status

# Flags of `make bench`; the defaults shield the measurement from other work
# on the machine (they need root). `make bench BENCH_FLAGS=` runs without.
BENCH_FLAGS ?= -nice=-20 -realtime

bench: build ## Print the side-by-side performance table (frontend, unbound, dnsmasq, CoreDNS as NodeLocal DNSCache).
	$(BIN)/nodedns-loadtest bench $(BENCH_FLAGS)

# Flags of `make demo`, passed to `nodedns-loadtest demo` (see loadtest/README.md).
DEMO_FLAGS ?=

demo: ## Show nodedns on a testbed node (answers, cache hits, no conntrack entry), then compare the designs (root; installs what is missing).
	tools/deps.sh demo
	$(MAKE) build
	$(MAKE) tools
	$(BIN)/nodedns-loadtest demo -out out/demo $(DEMO_FLAGS)

# Flags of `make apicost` (see docs/apiserver-cost.md); the defaults are the
# main run: nodes 10,30,50, 1,000 Services × 5 endpoints, 50 endpoints rolling.
APICOST_FLAGS ?=

.PHONY: apicost
apicost: build ## Measure what nodedns backends cost kube-apiserver next to kube-proxy's watches (root; ~25 min; tables in bin/apicost.md).
	NODEDNS_ETCD=$${NODEDNS_ETCD:-$$(apicost/build-etcd.sh)} $(GO) run ./apicost/cmd/nodedns-apicost -out $(BIN)/apicost.md $(APICOST_FLAGS)

# Flags of `make apicost-scale`: thousands of simulated nodes of each design
# (kube-proxy, a stock CoreDNS DaemonSet, nodedns's backend), calibrated
# against 20 real agents of each (docs/apiserver-cost.md).
APISCALE_FLAGS ?= -simulate=1000,5000 -sim-calibrate=20 -sim-ramp=100 -services=250 -churn-interval=1s -window=20s -settle=5s -burst-window=20s -ready-timeout=10m

.PHONY: apicost-scale
apicost-scale: build ## API server cost of 1,000 and 5,000 simulated nodes per design: steady, churn, relist storm (root; ~35 min; bin/apicost-scale.md and .png).
	NODEDNS_ETCD=$${NODEDNS_ETCD:-$$(apicost/build-etcd.sh)} $(GO) run ./apicost/cmd/nodedns-apicost -out $(BIN)/apicost-scale.md -plot $(BIN)/apicost-scale.png $(APISCALE_FLAGS)

memstudy: build ## Measure the nodedns pod's memory as kubelet does (working set per container cgroup) against cluster size and CPU count, beside node-cache and a CoreDNS replica (root; ~60 min; MEMSTUDY_FLAGS=-memstudy.quick: ~5 min; tables in bin/memstudy.md).
	@env $$(tools/memstudy/peers.sh) NODEDNS_BACKEND_BIN=$(CURDIR)/$(BIN)/nodedns-backend NODEDNS_FRONTEND_BIN=$(CURDIR)/$(BIN)/nodedns-frontend \
	  $(GO) test ./backend -run 'TestMemoryStudy$$' -count=1 -v -timeout 150m -memstudy -memstudy.out=$(CURDIR)/$(BIN)/memstudy.md $(MEMSTUDY_FLAGS) > $(BIN)/memstudy.log 2>&1 \
	  || { tail -n 40 $(BIN)/memstudy.log; exit 1; }
	@cat $(BIN)/memstudy.md
	@grep '^memstudy:' $(BIN)/memstudy.log

tools: ## Build the testbed's Kubernetes binaries: kube-apiserver, kube-proxy, and kubelet, controller-manager, scheduler, kubectl for real nodes (first time about 3.5 min on two cores; cached in ~/.cache/nodedns), and gotestsum.
	tools/k8s/build.sh realnode
	tools/k8s/build.sh e2e.test agnhost
	tools/gotestsum/build.sh >/dev/null

testbed: tools ## Run etcd + kube-apiserver in the foreground; prints a kubeconfig; Ctrl-C stops.
	$(GO) run ./testbed/cmd/nodedns-testbed

FUZZTIME ?= 30s
fuzz: ## Run every fuzz target for FUZZTIME (default 30s) each.
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' frontend shared images); do \
		pkg=./$$(dirname $$f); \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "== $$pkg $$t"; \
			$(GO) test $$pkg -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME); \
		done; \
	done

REGISTRY  ?= ghcr.io/nodedns

# The images' tag: VERSION when given on the command line or in the
# environment, else the chart's appVersion (what the chart deploys).
IMAGE_VERSION = $(if $(filter command line environment,$(origin VERSION)),$(VERSION))

images: ## Write OCI archives (linux/amd64 + linux/arm64 indexes) of nodedns-frontend and nodedns-backend to bin/images, without root or a Docker engine (images/README.md).
	$(GO) run ./images/cmd/nodedns-images -out $(BIN)/images -registry $(REGISTRY) -version '$(IMAGE_VERSION)'

.PHONY: release
release: ## Push both multi-arch image indexes and the chart (oci://REGISTRY/nodedns:VERSION): make release REGISTRY=... VERSION=... [PLAIN_HTTP=1] (images/README.md).
	@test -n '$(IMAGE_VERSION)' || { echo 'make release: set VERSION=<semver>, e.g. make release REGISTRY=ghcr.io/OWNER VERSION=0.2.0'; exit 2; }
	$(GO) run ./images/cmd/nodedns-images -release -registry $(REGISTRY) -version '$(IMAGE_VERSION)' $(if $(PLAIN_HTTP),-insecure)

.PHONY: pod.yaml
pod.yaml: ## Regenerate pod.yaml and the values table of helm/nodedns/README.md from the chart.
	$(GO) test ./helm -run '^TestPodYAML$$' -count=1 -update
	$(GO) run ./helm/internal/valuesdoc

clean: ## Remove build output.
	rm -rf $(BIN)

.PHONY: e2e shapes lifecycle
e2e: ## Run the real-node tests: kubelets with containerd, runc and CNI in node namespaces, images built here (root; testbed/README.md); the whole shape matrix and the whole lifecycle matrix with them.
	tools/k8s/build.sh realnode
	NODEDNS_SHAPES=all $(LIFECYCLE_ENV) $(GO) test -count=1 -timeout 240m -v -run '^(TestRealNode|TestImages|TestHelm|TestMigration|TestLinkLocal|TestNodeIP|TestSlowDomain|TestShapes|TestLifecycle|TestFallbackNodesSource)' ./images/ ./testbed/ ./testbed/e2e/

# `make shapes` runs the shape matrix alone (TestShapes, docs/platforms.md):
# nodedns installed, upgraded and uninstalled under client load on each
# distribution's DNS objects, on one two-node cluster. SHAPES selects
# shapes by name (comma-separated); `make test` runs only k3s. With
# NODEDNS_CPA_SRC set to a cluster-proportional-autoscaler source tree
# (with vendor/), the autoscalers are the real one built from it. Its last
# line is the summary.
SHAPES     ?= all
SHAPES_OUT := $(BIN)/shapes.txt

shapes: build ## Run the shape matrix on real nodes (root; about 24 min); last line: shapes: P passed of T (names).
	@tools/k8s/build.sh realnode >/dev/null
	@mkdir -p $(BIN); rm -f $(SHAPES_OUT)
	@status=0; NODEDNS_SHAPES=$(SHAPES) NODEDNS_SHAPES_SUMMARY=$(CURDIR)/$(SHAPES_OUT) \
		$(GO) test -count=1 -timeout 70m -v -run '^TestShapes$$' ./testbed/e2e/ || status=$$?; \
	if [ -s $(SHAPES_OUT) ]; then cat $(SHAPES_OUT); else echo "shapes: 0 passed (the matrix did not run)"; status=1; fi; \
	exit $$status

# The lifecycle matrix (testbed/e2e/lifecycle_test.go): every row in every
# mode, the API server down for the issue's 10 minutes. Without these
# variables (`make test`) TestLifecycle runs its cheap default subset.
LIFECYCLE_ENV ?= NODEDNS_LIFECYCLE_ROWS=all NODEDNS_LIFECYCLE_MODES=all NODEDNS_LIFECYCLE_APIDOWN=10m
LIFECYCLE_OUT := $(BIN)/lifecycle.txt

lifecycle: ## Run the lifecycle matrix alone: each event of a nodedns pod's life in each mode on real nodes (root; about 90 min); last line: lifecycle: E events x M modes, F failed, L lost of N lookups, longest gap G s.
	tools/k8s/build.sh realnode
	@mkdir -p $(BIN); rm -f $(LIFECYCLE_OUT)
	@status=0; $(LIFECYCLE_ENV) NODEDNS_LIFECYCLE_SUMMARY=$(CURDIR)/$(LIFECYCLE_OUT) \
		$(GO) test -count=1 -timeout 150m -v -run '^TestLifecycle$$' ./testbed/e2e/ || status=$$?; \
	if [ -s $(LIFECYCLE_OUT) ]; then cat $(LIFECYCLE_OUT); else echo "lifecycle: no summary (the matrix did not run to its end)"; status=1; fi; \
	exit $$status

# `make conformance` runs Kubernetes' own [sig-network] DNS e2e specs on two
# real kubelet nodes for each design (conformance/README.md); the JUnit
# reports and summary.md go to bin/conformance/<design>/.
CONFORMANCE_DESIGNS ?= coredns,iptables,link-local,node-ip
CONFORMANCE_OTHERS  ?= 1

.PHONY: conformance
conformance: build ## Run Kubernetes' [sig-network] DNS conformance specs on real nodes: nodedns in each mode and CoreDNS as the control (root); last line: conformance: P passed, F failed of T.
	@mkdir -p $(BIN)/conformance
	NODEDNS_CONFORMANCE_DESIGNS=$(CONFORMANCE_DESIGNS) NODEDNS_CONFORMANCE_OTHERS=$(CONFORMANCE_OTHERS) NODEDNS_CONFORMANCE_OUT=$(CURDIR)/$(BIN)/conformance \
		$(GO) test -count=1 -timeout 90m -v -run '^TestConformance$$' ./conformance/
