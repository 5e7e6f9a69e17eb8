# KubeNest: `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

# Version of this build: the image tag and what `--version` prints. Read once (not `?=`, which
# would run git at every use): a file edited while `make up` runs must not give the chart a tag
# other than the image's.
ifeq ($(origin VERSION),undefined)
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
endif
# Kubernetes version the components are built from; must match go.mod.
KUBE_VERSION := v1.36.3

# Tools and binaries that take minutes to build are cached by version outside the repo.
CACHE_DIR ?= $(HOME)/.cache/kubenest
TOOLS_DIR := $(CACHE_DIR)/tools
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := $(TOOLS_DIR)/controller-gen-$(CONTROLLER_GEN_VERSION)

# Static binaries for the image, and the same setting for tests so that both share one build
# cache (a different CGO_ENABLED rebuilds every package).
export CGO_ENABLED := 0

BIN_DIR := _output/bin
GO_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=36 \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X github.com/kubenest-io/kubenest/pkg/version.Version=$(VERSION)
GO_BUILD := go build -ldflags '$(GO_LDFLAGS)'

BINARIES := nest-operator nest-controlplane nest-etcd node-agent nest-portal nest-hosts kubectl-nest

# Images, built without Docker and imported into the local cluster's nodes.
IMAGE_REPO ?= kubenest.io/kubenest
IMAGE := $(IMAGE_REPO):$(VERSION)
IMAGES_DIR := _output/images
PAUSE_IMAGE := kubenest.io/pause:3.10
BUSYBOX_IMAGE := kubenest.io/busybox:1.35
# The CoreDNS version cmd/nest-dns (a module of its own) is built from, and nest-dns's own
# revision on it: raise NEST_DNS_REVISION (and the tag in pkg/controlplane/settings.go and the
# chart's values) when cmd/nest-dns changes, so that nodes holding the old image take the new.
COREDNS_VERSION := $(shell grep -o 'github.com/coredns/coredns v[^ ]*' cmd/nest-dns/go.mod | cut -d' ' -f2)
NEST_DNS_REVISION := 2
COREDNS_IMAGE := kubenest.io/coredns:$(COREDNS_VERSION)-$(NEST_DNS_REVISION)
# The local cluster's volume provisioner (its default StorageClass), built from its Go module.
IMAGE_TARS := $(addprefix $(IMAGES_DIR)/,kubenest.tar pause.tar busybox.tar coredns.tar)

# The local host cluster's own binaries, built from the k8s.io/kubernetes module go.mod pins.
KUBE_BIN := $(CACHE_DIR)/bin/$(KUBE_VERSION)
KUBE_BINARIES := $(addprefix $(KUBE_BIN)/,kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
KUBE_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36 \
	-X k8s.io/component-base/version.gitTreeState=clean
KUBECTL := $(KUBE_BIN)/kubectl --kubeconfig _output/host.kubeconfig
HELM_VERSION := v4.3.1
HELM := $(TOOLS_DIR)/helm-$(HELM_VERSION)
NODES ?= 2
# Nodes tenants may borrow (kubenest.io/lendable=true), space-separated; empty: the last node.
LENDABLE ?=
CERT_MANAGER_CRDS = $(shell go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)/deploy/crds
# The chart as the local cluster runs it: images imported (never pulled), the node agents run
# by "local up" instead of the installer DaemonSet, test-only annotations honoured, the e2e's
# platform CA issuer allowed for tenants, the portal on a NodePort (the e2e finds its port on the
# Service).
# The portal's node port is fixed, so that the local OpenID Connect provider ("local oidc", run
# by "local up") can send people back to it; its client secret and CA are under
# _output/local/oidc (when the cluster runs it).
PORTAL_NODE_PORT := 30080
PORTAL_URL := http://172.30.0.11:$(PORTAL_NODE_PORT)
OIDC_DIR := _output/local/oidc
HELM_INSTALL = set -e; $(KUBECTL) create namespace kubenest-system --dry-run=client -o yaml | $(KUBECTL) apply -f - >/dev/null; \
	oidc=; if [ -f $(OIDC_DIR)/client-secret ]; then \
		$(KUBECTL) -n kubenest-system create secret generic kubenest-portal-oidc --from-file=client-secret=$(OIDC_DIR)/client-secret \
			--dry-run=client -o yaml | $(KUBECTL) apply -f - >/dev/null; \
		oidc="--set portal.oidc.issuerURL=https://172.30.0.1:9443 --set portal.oidc.clientID=kubenest-portal \
			--set portal.oidc.redirectURL=$(PORTAL_URL)/oidc/callback --set portal.oidc.clientSecret.secretName=kubenest-portal-oidc \
			--set portal.oidc.displayName=local-oidc --set-file portal.oidc.caBundle=$(OIDC_DIR)/ca.crt"; fi; \
	$(HELM) upgrade --install kubenest charts/kubenest --kubeconfig _output/host.kubeconfig \
	--namespace kubenest-system --create-namespace --set image.tag=$(VERSION) --set image.pullPolicy=Never \
	--set nodeAgent.install=false --set operator.allowTestAnnotations=true \
	--set 'operator.certManagerIssuers={ClusterIssuer/e2e-platform-ca}' \
	--set portal.enabled=true --set portal.service.type=NodePort --set portal.service.nodePort=$(PORTAL_NODE_PORT) \
	$$oidc --wait --timeout 5m

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
		/^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2 } \
		/^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: build
build: $(addprefix $(BIN_DIR)/,$(BINARIES)) ## Build every binary into _output/bin.

$(BIN_DIR)/%: FORCE
	@mkdir -p $(BIN_DIR)
	$(GO_BUILD) -o $@ ./cmd/$*

.PHONY: FORCE
FORCE:

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy, CRDs (charts/kubenest/crds), RBAC and apply configurations.
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) applyconfiguration paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=charts/kubenest/crds
	$(CONTROLLER_GEN) rbac:roleName=kubenest-operator paths=./internal/controller/... \
		output:rbac:artifacts:config=charts/kubenest/files

.PHONY: verify-gen
verify-gen: generate ## Fail when generated files are not up to date.
	@git diff --exit-code -- api charts/kubenest/crds charts/kubenest/files \
		|| { echo "generated files are stale: run 'make generate' and commit the result"; exit 1; }
	@test -z "$$(git status --porcelain -- api charts/kubenest/crds charts/kubenest/files)" \
		|| { echo "generated files are not committed:"; git status --porcelain -- api charts; exit 1; }

.PHONY: lint
lint: $(HELM) ## gofmt, go vet (with the e2e and benchlocal tags; cmd/nest-dns too) and helm lint.
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet -tags e2e,benchlocal ./...
	cd cmd/nest-dns && go vet ./...
	$(HELM) lint --strict charts/kubenest
	$(HELM) lint --strict charts/kubenest --set metrics.serviceMonitor.enabled=true --set metrics.grafanaDashboard.enabled=true \
		--set portal.enabled=true --set portal.oidc.issuerURL=https://idp.example --set portal.oidc.clientID=portal \
		--set portal.oidc.redirectURL=https://portal.example/oidc/callback --set portal.oidc.clientSecret.secretName=portal-oidc \
		--set portal.oidc.caBundle=PEM
	@# As "helm upgrade --reuse-values" renders it over a release from before these values existed.
	$(HELM) lint --strict charts/kubenest --set portal.enabled=true --set metrics.secure=null --set metrics.serviceMonitor=null \
		--set metrics.grafanaDashboard=null --set portal.oidc=null --set operator.maxStartingTenants=null --set operator.sharedNodeQuota=null \
		--set operator.sharedNodeCopyBytes=null --set operator.sharedNodeFinishedPods=null

.PHONY: test
test: lint verify-gen $(BIN_DIR)/nest-controlplane $(BIN_DIR)/nest-etcd ## Unit and integration tests (real kube-apiserver, etcd and tenant processes; no cluster needed).
	NEST_CONTROLPLANE=$(CURDIR)/$(BIN_DIR)/nest-controlplane NEST_ETCD=$(CURDIR)/$(BIN_DIR)/nest-etcd go test ./...

##@ Local cluster

.PHONY: image
image: $(IMAGE_TARS) ## Build the images (KubeNest, pause, busybox, CoreDNS) as tarballs in _output/images.

# With this machine's iptables (nft) userland, which "nest-controlplane kube-proxy" executes.
$(IMAGES_DIR)/kubenest.tar: $(addprefix $(BIN_DIR)/,$(BINARIES)) /usr/sbin/xtables-nft-multi hack/iptables-files
	iptables=$$(hack/iptables-files); go run ./hack/build-image --ref $(IMAGE) --out $@ \
		$(foreach b,$(BINARIES),--file /usr/local/bin/$(b)=$(BIN_DIR)/$(b)) $$iptables

$(IMAGES_DIR)/pause.tar: $(BIN_DIR)/pause
	go run ./hack/build-image --ref $(PAUSE_IMAGE) --out $@ --file /pause=$< --entrypoint /pause --user 65535:65535

# cert-manager's controllers, test-only: "make up" runs them so tenants can use a cert-manager
# issuer (spec.pki). Not part of the image.
$(BIN_DIR)/certmanager: FORCE
	@mkdir -p $(BIN_DIR)
	go build -ldflags '-s -w' -o $@ ./test/e2e/certmanager

$(BIN_DIR)/pause: FORCE
	@mkdir -p $(BIN_DIR)
	go build -ldflags '-s -w' -o $@ ./hack/pause

# A general-purpose image from Debian's busybox-static, for pods that need a shell.
$(IMAGES_DIR)/busybox.tar: /bin/busybox
	go run ./hack/build-image --ref $(BUSYBOX_IMAGE) --out $@ --user 0:0 --file /bin/busybox=/bin/busybox \
		$(foreach a,$(shell /bin/busybox --list | grep -vx busybox),--link /bin/$(a)=busybox)

# Cluster DNS of the tenants and of the local cluster: CoreDNS with the plugins their
# Corefiles use, built from cmd/nest-dns, whose own go.mod keeps CoreDNS's dependencies apart.
$(BIN_DIR)/nest-dns: FORCE
	@mkdir -p $(BIN_DIR)
	cd cmd/nest-dns && go build -ldflags '-s -w' -o $(CURDIR)/$@ .

$(IMAGES_DIR)/coredns.tar: $(BIN_DIR)/nest-dns
	go run ./hack/build-image --ref $(COREDNS_IMAGE) --out $@ --file /coredns=$< --entrypoint /coredns

/bin/busybox:
	apt-get install -y busybox-static

/usr/sbin/xtables-nft-multi:
	apt-get install -y iptables

$(KUBE_BIN)/%:
	@mkdir -p $(KUBE_BIN)
	go build -ldflags '$(KUBE_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/$*

.PHONY: host-deps
host-deps: ## Install the Debian packages the local cluster needs, when missing.
	@missing=""; for p in containerd runc containernetworking-plugins iptables conntrack busybox-static chromium curl; do \
		dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
		if [ -n "$$missing" ]; then echo "installing$$missing"; apt-get install -y $$missing; fi

.PHONY: up
up: host-deps build image $(KUBE_BINARIES) $(HELM) $(BIN_DIR)/certmanager ## Bring up a local host cluster, install KubeNest with Helm and create the demo tenant.
	go run ./test/e2e/local up --kube-bin $(KUBE_BIN) --nest-etcd $(BIN_DIR)/nest-etcd \
		--node-agent $(CURDIR)/$(BIN_DIR)/node-agent \
		--cert-manager $(CURDIR)/$(BIN_DIR)/certmanager --cert-manager-crds $(CERT_MANAGER_CRDS) \
		$(addprefix --image ,$(IMAGE_TARS)) --kube-proxy-image $(IMAGE) --nodes $(NODES) $(addprefix --lendable ,$(LENDABLE)) \
		--oidc-redirect-uri $(PORTAL_URL)/oidc/callback
	$(HELM_INSTALL)
	$(KUBECTL) apply --server-side -f test/e2e/testdata/demo.yaml
	$(KUBECTL) -n demo wait virtualcluster/demo --for=condition=Ready --timeout=5m
	$(KUBECTL) -n demo get secret demo-kubeconfig -o jsonpath='{.data.value}' | base64 -d > _output/demo.kubeconfig
	@ln -sf $(KUBE_BIN)/kubectl $(BIN_DIR)/kubectl
	@echo; echo "KubeNest is up. The host cluster and the demo tenant:"
	@echo "  export PATH=$(CURDIR)/$(BIN_DIR):\$$PATH"
	@echo "  kubectl --kubeconfig _output/host.kubeconfig get virtualclusters -A"
	@echo "  kubectl --kubeconfig _output/demo.kubeconfig get ns"
	@echo "'make e2e' runs the end-to-end tests against it; 'make down' removes it all."

.PHONY: redeploy
redeploy: build $(IMAGES_DIR)/kubenest.tar $(IMAGES_DIR)/coredns.tar $(HELM) ## Rebuild the KubeNest and tenant DNS images, load them into the running local cluster and roll the chart's pods.
	go run ./test/e2e/local load --image $(IMAGES_DIR)/kubenest.tar --image $(IMAGES_DIR)/coredns.tar
	@# Helm installs CRDs but never upgrades them.
	$(KUBECTL) apply --server-side --force-conflicts -f charts/kubenest/crds
	$(HELM_INSTALL)
	$(KUBECTL) -n kubenest-system rollout restart deployment
	$(KUBECTL) -n kubenest-system rollout status deployment --timeout 3m

.PHONY: down
down: ## Stop the local cluster and remove everything it created.
	go run ./test/e2e/local down
	rm -f _output/demo.kubeconfig $(BIN_DIR)/kubectl

.PHONY: e2e
E2E_RUN ?= .
e2e: previous-release $(HELM) ## End-to-end tests against the local cluster ('make up' first); E2E_RUN=regexp picks tests.
	go test -tags e2e -count=1 -timeout 60m -v -run '$(E2E_RUN)' ./test/e2e/ -args -kubeconfig $(CURDIR)/_output/host.kubeconfig \
		-kubectl $(KUBE_BIN)/kubectl -helm $(HELM) -previous-chart $(CURDIR)/$(PREVIOUS_DIR)/charts/kubenest \
		-previous-tag $(PREVIOUS_VERSION)

# The previous release, which TestOperatorUpgrade upgrades from: the last commit that landed
# before this one's work began. Its tree is exported (git archive) into _output/previous and its
# KubeNest and tenant DNS images built there and loaded into the local cluster under their own tags.
PREVIOUS_RELEASE := b1a9dc6decdb2cc3a72cfee098aa41e102912b29
PREVIOUS_DIR := _output/previous
PREVIOUS_VERSION := release-$(shell echo $(PREVIOUS_RELEASE) | cut -c1-12)

.PHONY: previous-release
previous-release: ## Build the previous release's KubeNest and tenant DNS images and load them into the local cluster (for TestOperatorUpgrade).
	@git cat-file -e $(PREVIOUS_RELEASE)^{commit} 2>/dev/null || git fetch --quiet origin $(PREVIOUS_RELEASE) 2>/dev/null || \
		{ echo "previous release $(PREVIOUS_RELEASE) is not in this clone's history, nor fetched from origin: TestOperatorUpgrade needs it (git fetch --unshallow)"; exit 1; }
	@if [ "$$(cat $(PREVIOUS_DIR)/.release 2>/dev/null)" != "$(PREVIOUS_RELEASE)" ]; then \
		rm -rf $(PREVIOUS_DIR) && mkdir -p $(PREVIOUS_DIR) && git archive $(PREVIOUS_RELEASE) | tar -x -C $(PREVIOUS_DIR) && \
		echo $(PREVIOUS_RELEASE) > $(PREVIOUS_DIR)/.release; fi
	$(MAKE) --no-print-directory -C $(PREVIOUS_DIR) VERSION=$(PREVIOUS_VERSION) _output/images/kubenest.tar _output/images/coredns.tar
	go run ./test/e2e/local load --image $(PREVIOUS_DIR)/_output/images/kubenest.tar --image $(PREVIOUS_DIR)/_output/images/coredns.tar

.PHONY: bench
BENCH ?= all
bench: ## Benchmarks against the local cluster ('make up' first; all of them take about 15 minutes); BENCH='create --count=3' runs one. Never part of 'make test'.
	go run ./test/bench --kubeconfig _output/host.kubeconfig --json _output/bench.json $(BENCH) | tee -i _output/bench.txt

$(HELM):
	@mkdir -p $(TOOLS_DIR)
	GOBIN=$(TOOLS_DIR) go install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)
	mv $(TOOLS_DIR)/helm $@

$(CONTROLLER_GEN):
	@mkdir -p $(TOOLS_DIR)
	GOBIN=$(TOOLS_DIR) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(TOOLS_DIR)/controller-gen $@

##@ Conformance

# The Kubernetes conformance suite against a tenant of the local cluster (test/conformance).
# e2e.test, ginkgo and the test images' binaries are built from the k8s.io/kubernetes module
# go.mod pins, in hack/conformance (a module of its own with the same replace block, so the
# suite's dependencies never move ours), and cached by version: a cold build takes minutes.
CONFORMANCE_BIN := $(CACHE_DIR)/conformance/$(KUBE_VERSION)
# What each binary is built from, in hack/conformance.
CONFORMANCE_PKG_ginkgo := github.com/onsi/ginkgo/v2/ginkgo
CONFORMANCE_PKG_agnhost := k8s.io/kubernetes/test/images/agnhost
CONFORMANCE_PKG_nnp := k8s.io/kubernetes/test/images/nonewprivs
CONFORMANCE_PKG_sample-apiserver := k8s.io/sample-apiserver
CONFORMANCE_PKG_etcd := ./etcd
CONFORMANCE_IMAGE_BINS := $(addprefix $(CONFORMANCE_BIN)/,agnhost nnp sample-apiserver etcd busybox pause)
CONFORMANCE_IMAGES := $(IMAGES_DIR)/conformance
CONFORMANCE_IMAGE_TARS := $(addprefix $(CONFORMANCE_IMAGES)/,agnhost.tar agnhost-prev.tar nginx.tar nginx-new.tar \
	nautilus.tar kitten.tar busybox.tar glibc-dns-testing.tar nonewprivs.tar sample-apiserver.tar etcd.tar pause.tar)
# The Debian tools the test images carry, with their libraries (hack/conformance/images).
CONFORMANCE_TOOLS := /usr/bin/curl /usr/bin/nc.openbsd /usr/bin/dig /usr/bin/bash /usr/sbin/ip /usr/bin/ss /usr/bin/getent
CONFORMANCE_FOCUS ?= \[Conformance\]
CONFORMANCE_SKIP ?=
CONFORMANCE_PROCS ?= 4
CONFORMANCE_SERIAL ?= true
CONFORMANCE_KEEP ?= false
# Runs of a failing spec before it counts as failed; a spec that passes on a later run is listed
# as flaky in the summary. 1 for a conformance figure (CONFORMANCE.md).
CONFORMANCE_FLAKE_ATTEMPTS ?= 1
# Host nodes lent to the tenant; 0 when the host has no free lendable node (host-access specs then fail).
CONFORMANCE_LENT_NODES ?= 1
# false: a tenant of lent nodes only (the host needs as many free lendable nodes: make up NODES=3 LENDABLE='kn-worker-2 kn-worker-3').
CONFORMANCE_SHARED_NODE ?= true
# The tenant's spec.nodes.sharedPlacement (Overflow or OptIn); empty: OptIn with 2 lent nodes or more, Overflow with fewer
# (the suite wants two untainted nodes).
CONFORMANCE_SHARED_PLACEMENT ?=
CONFORMANCE_RUN = go run ./test/conformance --kubeconfig _output/host.kubeconfig --out _output/conformance

.PHONY: conformance
conformance: conformance-bin conformance-images $(KUBE_BIN)/kubectl ## Kubernetes conformance against a new tenant (shared node + 1 lent node); CONFORMANCE_FOCUS/_SKIP=regexp, CONFORMANCE_SERIAL=false, CONFORMANCE_KEEP=true.
	go run ./test/e2e/local load $(addprefix --image ,$(CONFORMANCE_IMAGE_TARS))
	$(CONFORMANCE_RUN) --e2e-test $(CONFORMANCE_BIN)/e2e.test --ginkgo $(CONFORMANCE_BIN)/ginkgo \
		--kubectl $(KUBE_BIN)/kubectl --focus '$(CONFORMANCE_FOCUS)' --skip '$(CONFORMANCE_SKIP)' \
		--procs $(CONFORMANCE_PROCS) --serial=$(CONFORMANCE_SERIAL) --keep=$(CONFORMANCE_KEEP) \
		--lent-nodes $(CONFORMANCE_LENT_NODES) --shared-node=$(CONFORMANCE_SHARED_NODE) --shared-placement '$(CONFORMANCE_SHARED_PLACEMENT)' --flake-attempts $(CONFORMANCE_FLAKE_ATTEMPTS)

.PHONY: conformance-clean
conformance-clean: ## Delete the tenant a CONFORMANCE_KEEP=true run left and return its lent node.
	$(CONFORMANCE_RUN) --cleanup

.PHONY: conformance-bin
conformance-bin: $(CONFORMANCE_BIN)/e2e.test $(CONFORMANCE_BIN)/ginkgo $(CONFORMANCE_IMAGE_BINS) ## Build e2e.test, ginkgo and the test images' binaries (cached by version).

.PHONY: conformance-images
conformance-images: $(CONFORMANCE_IMAGE_TARS) ## Build the images the conformance specs run, under the names the suite expects.

# hack/conformance must pin the Kubernetes version the cache directory is named after.
.PHONY: conformance-version
conformance-version:
	@grep -qE '^(require )?\s*k8s.io/kubernetes $(KUBE_VERSION)$$' hack/conformance/go.mod || \
		{ echo "hack/conformance/go.mod does not require k8s.io/kubernetes $(KUBE_VERSION) (KUBE_VERSION): keep them in step"; exit 1; }

$(CONFORMANCE_BIN)/e2e.test: | conformance-version
	@mkdir -p $(CONFORMANCE_BIN)
	cd hack/conformance && go test -c -ldflags '$(KUBE_LDFLAGS)' -o $@ k8s.io/kubernetes/test/e2e

$(CONFORMANCE_BIN)/pause: hack/pause/main.go
	@mkdir -p $(CONFORMANCE_BIN)
	go build -ldflags '-s -w' -o $@ ./hack/pause

# Upstream's BusyBox of the suite's busybox image, from source (Debian's differs: see the script).
$(CONFORMANCE_BIN)/busybox: hack/conformance/busybox | /usr/bin/gcc
	hack/conformance/busybox $@

/usr/bin/gcc:
	apt-get install -y gcc make bzip2 libc6-dev

$(CONFORMANCE_BIN)/%: | conformance-version
	@mkdir -p $(CONFORMANCE_BIN)
	cd hack/conformance && go build -ldflags '$(KUBE_LDFLAGS)' -o $@ $(CONFORMANCE_PKG_$*)

# All of them in one go (each takes a second): hack/conformance/images says what each is.
$(CONFORMANCE_IMAGE_TARS) &: $(CONFORMANCE_IMAGE_BINS) $(CONFORMANCE_TOOLS) hack/build-image/main.go \
		$(wildcard hack/conformance/images hack/conformance/program-files hack/conformance/etc/*)
	hack/conformance/images $(CONFORMANCE_BIN) "$$(cd hack/conformance && go list -m -f '{{.Dir}}' k8s.io/kubernetes)" $(CONFORMANCE_IMAGES)

/usr/bin/curl:
	apt-get install -y curl

/usr/bin/nc.openbsd:
	apt-get install -y netcat-openbsd

/usr/bin/dig:
	apt-get install -y bind9-dnsutils

/usr/sbin/ip /usr/bin/ss:
	apt-get install -y iproute2
