# ztpd build, test and benchmark targets. Tests that need root and network
# namespaces skip themselves when not run as root.
SHELL   := /bin/bash
GO      ?= go
BIN     ?= bin/ztpd
LAB_BIN ?= bin/ztpd-lab
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: package k8s-bins peer-bins build test test-short lint fuzz bench bench-go bench-dhcp bench-dhcp-positions bench-dhcp6 bench-tftp bench-iso bench-ztp bench-joins bench-api bench-storm bench-observed bench-webui bench-scale bench-rollout lab clean

# The product (ztpd) and the namespace lab (ztpd-lab), side by side: ztpd-lab
# runs the ztpd next to it, and the simulated kubelet (kubeletsim) next to it.
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/ztpd
	$(GO) build -trimpath -ldflags '-s -w' -o $(LAB_BIN) ./cmd/ztpd-lab
	$(GO) build -trimpath -ldflags '-s -w' -o $(dir $(LAB_BIN))kubeletsim ./testenv/cmd/kubeletsim

# The Debian package dist/ztpd_<version>_<arch>.deb: a static binary, the
# hardened unit, /etc/ztpd/ztpd.yaml, man pages and completions generated
# from the commands (ztpd gendocs), built with nfpm (internal/packaging).
# PKG_VERSION: the newest v* tag without its v, else 0.0.0~git<commit time>.<hash>.
PKG_ARCH    ?= $(shell $(GO) env GOARCH)
PKG_VERSION ?= $(shell v=$$(git describe --tags --match 'v[0-9]*' 2>/dev/null) && echo "$$v" | sed 's/^v//; s/-/+/g' || \
                 echo "0.0.0~git$$(git log -1 --format=%cd --date=format:%Y%m%d%H%M%S 2>/dev/null || date -u +%Y%m%d%H%M%S).$$(git rev-parse --short HEAD 2>/dev/null || echo dev)")
PKG_BUILD   := dist/build
package:
	rm -rf $(PKG_BUILD)
	CGO_ENABLED=0 GOOS=linux GOARCH=$(PKG_ARCH) $(GO) build -trimpath -ldflags '-s -w -X main.version=$(PKG_VERSION)' -o $(PKG_BUILD)/ztpd ./cmd/ztpd
	$(GO) run -ldflags '-X main.version=$(PKG_VERSION)' ./cmd/ztpd gendocs --man $(PKG_BUILD)/man --completions $(PKG_BUILD)/completions
	$(GO) run ./internal/packaging/mkdeb --version '$(PKG_VERSION)' --arch $(PKG_ARCH) --binary $(PKG_BUILD)/ztpd \
	  --man $(PKG_BUILD)/man --completions $(PKG_BUILD)/completions --examples examples/profiles --out dist

# The one test command (README, .ci/run): unit, real-client and namespace
# tests; it ends by listing every skipped test and why. The SDK test with
# cloudstack-go's newest release is a module of its own (one module pins one
# SDK version), testenv/sdktest/newest: its tests join the same summary.
SDK_NEWEST := testenv/sdktest/newest
test: build
	@set -o pipefail; { s=0; $(GO) test -count=1 -timeout 20m -json ./... || s=1; \
	  (cd $(SDK_NEWEST) && $(GO) test -count=1 -timeout 10m -json ./...) || s=1; exit $$s; } | $(GO) run ./testenv/cmd/testsummary

# The real kube-apiserver, kube-controller-manager and kubeadm of every
# version in testenv/k8sbin/versions, kubemark (the hollow node) and
# kube-scheduler of every kubemark version there, and etcd, built from the Go module
# proxy into ~/.cache/ztpd/k8s (ZTPD_K8S_CACHE); cached by version, so only
# the first run builds (~35 min on 2 cores). Tests that need them skip
# without them; .ci/run builds them first.
k8s-bins:
	testenv/k8sbin/build.sh

# Real peers Debian does not package: busybox with udhcpc6 (testenv/busybox).
peer-bins:
	testenv/busybox/build.sh

test-short:
	$(GO) test -short ./...
	cd $(SDK_NEWEST) && $(GO) test -short ./...

STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint:
	@.ci/tracked-files-check
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd $(SDK_NEWEST) && $(GO) vet ./...
	$(STATICCHECK) ./...

# Short fuzz runs of every parser (FUZZTIME per target).
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$pkg || exit 1; \
	  done; done

# The bench-* targets run the shell drivers in bench/; the Go load
# generators they build are testenv/cmd/<command> (ARCHITECTURE.md,
# "Test-only code").
bench: bench-go bench-dhcp bench-dhcp6 bench-tftp bench-iso bench-ztp bench-joins bench-api bench-storm bench-observed bench-webui bench-rollout

bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Watch a simulated fleet onboard (root): 4 switches, 1 ONIE, 3 VMs, 2 clusters.
lab: build
	$(LAB_BIN) --ztpd $(BIN)

bench-storm:
	bash bench/boot-storm.sh

# How cost grows with the fleet (root, wrk; long, so not in `make bench`):
# boot storm, RSS, CPU and store bytes per device, restart, backup and the
# API under wrk at SIZES (10000 30000 65000) with EVENTS (1000000) events;
# IPV6=1 over DHCPv6 and IPv6 (a /64 pool: 100,000 switches all stormed).
bench-scale:
	bash bench/scale.sh

# The web console under a 10,000-switch boot storm (root, chromium): the
# devices page's first render with 10,000 devices, SSE messages and device
# updates per second, the tab's memory.
bench-webui:
	bash bench/webui.sh

# N (500) simulated kubelets join a real kube-apiserver with the switches'
# ztpd certificates while ztpd watches: time until ztpd shows all joined next
# to the API server's own view (root; make k8s-bins first).
bench-observed:
	bash bench/observed-join.sh

# DHCPv4 DORA/s of ztpd, Kea (memfile) and dnsmasq side by side (root; perfdhcp, kea-dhcp4, dnsmasq).
bench-dhcp: build
	ZTPD_BIN=$(CURDIR)/$(BIN) bash bench/dhcp-rate.sh

# The cabling plan's cost: ztpd without and with a 10,000-position plan, relayed
# requests with option 82, side by side (root; perfdhcp).
bench-dhcp-positions: build
	MODE=positions ZTPD_BIN=$(CURDIR)/$(BIN) bash bench/dhcp-rate.sh

bench-dhcp6: build
	ZTPD_BIN=$(CURDIR)/$(BIN) bash bench/dhcp6-rate.sh

bench-iso: build
	ZTPD=$(CURDIR)/$(BIN) bench/iso-build.sh

bench-api: build
	bash bench/api.sh

bench-joins: build
	bash bench/joins.sh

# A rolling Kubernetes upgrade of 200 simulated nodes, 10 at a time (the
# real engine, desired-state owner and store; times scaled by SCALE, 0.1):
# wall time against the floor, the sum of the steps over the parallelism.
bench-rollout:
	bash bench/rollout.sh

bench-tftp: build
	bash bench/tftp-rate.sh

bench-ztp: build
	bash bench/ztp-json.sh

bench-images: build
	bash bench/http-images.sh

clean:
	rm -rf bin dist
