# KubeNest: `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

# Version of this build: the image tag and what `--version` prints.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Kubernetes version the components are built from; must match go.mod.
KUBE_VERSION := v1.36.3

# Tools and binaries that take minutes to build are cached by version outside the repo.
CACHE_DIR ?= $(HOME)/.cache/kubenest
TOOLS_DIR := $(CACHE_DIR)/tools
CONTROLLER_GEN_VERSION := v0.23.0
CONTROLLER_GEN := $(TOOLS_DIR)/controller-gen-$(CONTROLLER_GEN_VERSION)

BIN_DIR := _output/bin
GO_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=36 \
	-X k8s.io/component-base/version.gitTreeState=clean \
	-X github.com/kubenest-io/kubenest/pkg/version.Version=$(VERSION)
GO_BUILD := CGO_ENABLED=0 go build -trimpath -ldflags '$(GO_LDFLAGS)'

BINARIES := nest-operator nest-controlplane

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
lint: ## gofmt and go vet.
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	go vet ./...

.PHONY: test
test: lint verify-gen $(BIN_DIR)/nest-controlplane ## Unit and integration tests (real kube-apiserver, etcd and tenant processes; no cluster needed).
	NEST_CONTROLPLANE=$(CURDIR)/$(BIN_DIR)/nest-controlplane go test ./...

$(CONTROLLER_GEN):
	@mkdir -p $(TOOLS_DIR)
	GOBIN=$(TOOLS_DIR) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
	mv $(TOOLS_DIR)/controller-gen $@
