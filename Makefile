# kbridge: see README.md. Every target that needs packages or hugepages
# depends on `deps`, which installs only what is missing.
SHELL   := /bin/bash
# The newest Go 1.21+ on PATH, in /usr/local/go or Debian's /usr/lib/go-1.N
# (deploy/go.sh; make deps installs one); it fetches the toolchain go.mod
# names by itself. Debian's Go says GOTOOLCHAIN=local in its go.env: auto
# here, unless the caller chose. Looked up once, when a recipe first needs
# it: after deps, which may have just installed it (make demo on a fresh
# machine).
ifeq ($(origin GO),undefined)
GO       = $(eval GO := $(shell bash deploy/go.sh))$(GO)
endif
export GOTOOLCHAIN ?= auto
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
BIN     := bin
PREFIX  ?= /usr/local
# The DPDK that pkg-config finds: Debian's, or one built into a prefix of
# its own with PKG_CONFIG_PATH=<prefix>/lib/<triplet>/pkgconfig (docs/DPDK.md).
DPDK_CFLAGS = $(shell pkg-config --cflags libdpdk)
DPDK_LIBS   = $(shell pkg-config --libs libdpdk)
# cgo refuses compiler flags it does not know, and DPDK's pkg-config file
# names machine flags (24.11: -mrtm) that are none of its business to judge:
# let the -m<feature> kind through, for this build and the go builds the
# tests run. A plain go build needs the same (README, "DPDK versions").
export CGO_CFLAGS_ALLOW ?= -m[a-z0-9-]+
# Go 1.26 puts its heap at a random address in the lower 64 TiB (the
# randomizedheapbase64 experiment, on by default). A DPDK secondary must map
# the app's hugepage memory at the primary's addresses, from 4 GiB up, and
# about one start in a thousand found its own Go heap there (EAL: "Cannot get
# a virtual area at requested address"; CI failed on it). Without the
# experiment the heap starts at 768 GiB, above DPDK's window, as in Go 1.25.
# The Go test processes that play DPDK primaries need it as much as kbridge.
# A plain go build needs the same (docs/DPDK.md). Added to what the caller
# set, if anything.
comma := ,
export GOEXPERIMENT := $(if $(findstring norandomizedheapbase64,$(GOEXPERIMENT)),$(GOEXPERIMENT),$(if $(GOEXPERIMENT),$(GOEXPERIMENT)$(comma))norandomizedheapbase64)
# Compiler warnings the DPDK app's side must not give, in C and in C++.
# On a DPDK not yet tried a new deprecation may warn: make WERROR= builds anyway.
WERROR ?= -Werror
HDR_WARN = -Wall -Wextra $(WERROR)
# What a DPDK app includes: kbridge.h, which includes the headers of its
# concerns, and KNI's API over it (docs/KNI.md).
KBRIDGE_HEADERS := $(addprefix ring/,kbridge.h kbridge_ring.h kbridge_classify.h kbridge_owner.h kbridge_wakeup.h kbridge_port.h kbridge_link.h kbridge_requests.h)
APP_HEADERS := $(KBRIDGE_HEADERS) ring/kbridge_child.h ring/rte_kni.h ring/rte_kni_common.h ring/rte_kni_compat.h
GOSRC   := $(shell find . -name '*.go' -not -path './bin/*') $(wildcard ring/*.c ring/*.h) go.mod go.sum

.PHONY: all deps deb image build header-check test fuzz unit-test testbed-up testbed-down demo install generate vet clean

all: build

deps:
	@bash deploy/deps.sh

build: $(BIN)/kbridge $(BIN)/kbridge-refapp $(BIN)/kbridge-kniapp $(BIN)/kbridge-floor header-check

$(BIN)/kbridge: $(GOSRC)
	@mkdir -p $(BIN)
	$(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o $@ ./cmd/kbridge

$(BIN)/kbridge-refapp: tests/refapp/refapp.c tests/refapp/flood.c tests/refapp/flood.h $(KBRIDGE_HEADERS)
	@mkdir -p $(BIN)
	$(CC) -O2 -g $(HDR_WARN) -Iring $(DPDK_CFLAGS) -o $@ tests/refapp/refapp.c tests/refapp/flood.c $(DPDK_LIBS)

# The floor kbridge is measured against (tests/floor): a plain C forwarder
# on the same rings and TAP, run by the bed in kbridge's place.
$(BIN)/kbridge-floor: tests/floor/floor.c $(KBRIDGE_HEADERS) ring/prefetch.h
	@mkdir -p $(BIN)
	$(CC) -O2 -g $(HDR_WARN) -Iring $(DPDK_CFLAGS) -o $@ $< $(DPDK_LIBS)

# The KNI application of tests/kni: rte_kni.h is all it includes of kbridge.
$(BIN)/kbridge-kniapp: tests/kniapp/kniapp.c $(APP_HEADERS)
	@mkdir -p $(BIN)
	$(CC) -O2 -g $(HDR_WARN) -Iring $(DPDK_CFLAGS) -o $@ $< $(DPDK_LIBS)

# The app's headers compile without a warning, each alone, as C and as C++
# (many DPDK apps are C++), against whichever DPDK pkg-config finds, and
# README.md's example of kbridge.h compiles (tests/header-check.sh).
header-check: $(BIN)/.header-check
$(BIN)/.header-check: $(APP_HEADERS) tests/header-check.sh README.md
	@mkdir -p $(BIN)
	CC="$(CC)" CXX="$(CXX)" CFLAGS="$(HDR_WARN) -Iring $(DPDK_CFLAGS)" bash tests/header-check.sh $(APP_HEADERS)
	@touch $@

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

# The test command: unit tests everywhere, then the root-only integration
# tests on real DPDK, TAP devices and the namespace test bed. Packages run
# one at a time (-p 1): several share the test bed, bpffs pins and CPU 1.
# Then the DPDK tests again on 24.11 (test-dpdk24). test-host is the first
# half alone.
test: test-host
	@$(MAKE) --no-print-directory test-dpdk24

.PHONY: test-host
test-host: deps build vet bench-test fuzz
	$(GO) test -p 1 -count=1 -timeout 40m ./... 2>&1 | tee test.log; exit $${PIPESTATUS[0]}

# The DPDK tests again on Debian 13's DPDK 24.11, in a root that
# tests/dpdk24/root.sh makes (and caches in /var/cache/kbridge), and across
# the two DPDKs (tests/crossver); docs/DPDK.md. Root.
.PHONY: test-dpdk24
test-dpdk24: build
	GO=$(GO) bash tests/dpdk24/ci.sh

# Unit tests only: no root, no DPDK primary, no namespaces.
unit-test: bench-test
	$(GO) test -count=1 -short ./...

# The offload code's fuzz targets, a few seconds each: new corpus entries a
# run finds stay in the Go cache, the committed seeds in tap/vnet/testdata.
.PHONY: fuzz
# A crash a run finds is written to tap/vnet/testdata/fuzz and fails the
# second try as a seed, so trying twice only absorbs a fuzzing worker that a
# loaded machine starved (seen once here), never a real failure.
# The vhost-user message sequences are not here: they need a running
# kbridge on the root bed, which go test -fuzz's worker processes cannot
# share; TestVhostRandomSequences (./tests/vhost, root) runs a fixed count of
# seeds instead (KB_VHOST_SEQUENCES, default 40).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzCoalesce$$' -fuzztime 5s -fuzzminimizetime 2s ./tap/vnet/ || \
	$(GO) test -run '^$$' -fuzz '^FuzzCoalesce$$' -fuzztime 5s -fuzzminimizetime 2s ./tap/vnet/
	$(GO) test -run '^$$' -fuzz '^FuzzSplit$$' -fuzztime 5s -fuzzminimizetime 2s ./tap/vnet/ || \
	$(GO) test -run '^$$' -fuzz '^FuzzSplit$$' -fuzztime 5s -fuzzminimizetime 2s ./tap/vnet/

# tests/bench and deploy/kubernetes (the pod specs' schema check against
# k8s.io/api) are Go modules of their own, so their dependencies stay out of
# the daemon's go.mod and ./... above does not reach them: vet and test them here.
.PHONY: bench-test
bench-test:
	cd tests/bench && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd deploy/kubernetes && $(GO) vet ./... && $(GO) test -count=1 ./...

testbed-up: deps build
	@bash tests/testbed/up.sh

testbed-down:
	@bash tests/testbed/down.sh

demo: deps build
	@bash tests/demo.sh

# The benchmark (root): every forwarder side by side on the test bed;
# writes results/bench-<UTC>.md and results/latency-cdf-<UTC>.png. A subset or a
# smoke test: make bench BENCH_FLAGS='-forwarders direct,kbridge-adaptive -quick'
.PHONY: bench
bench: deps build
	cd tests/bench && $(GO) build -o ../../$(BIN)/kbt-bench .
	KBT_BENCH_COMMAND="make bench$(if $(BENCH_FLAGS), BENCH_FLAGS='$(BENCH_FLAGS)')" $(BIN)/kbt-bench $(BENCH_FLAGS)

# The soak (root; not in CI): SOAK_MINUTES (default 30) of
# NFS listings and reads, iperf3 and sockperf through kbridge on the test bed
# in mode SOAK_MODE (ring, the default, or vhost), a policy reload every
# minute, a kbridge restart and an app restart; then the vhost-user fuzz
# target for SOAK_FUZZ_MINUTES (default 5). Waits for the bed to be free.
# Writes results/soak-<UTC>-<mode>.md; non-zero on a leak, a data mismatch,
# a crash or a fuzz finding. A short run: SOAK_MINUTES=4 make soak
.PHONY: soak
soak: deps build
	GO=$(GO) bash tests/soak/soak.sh

# The vhost-user fuzz target (root): FuzzVhostSequences against one
# kbridge per fuzz worker for FUZZTIME (default 60s), one worker at a time.
FUZZTIME ?= 60s
.PHONY: fuzz-vhost
fuzz-vhost: deps build
	$(GO) test -p 1 -count=1 -run '^$$' -fuzz FuzzVhostSequences -fuzztime $(FUZZTIME) -parallel 1 ./tests/vhost/

# The latency budget (root): a traced ping-pong per forwarder (direct,
# kbridge-adaptive, testpmd) split into wakeup delays (perf sched), kbridge's
# counters and residence, and the rest; writes results/latency-budget-<UTC>.md.
.PHONY: latency-budget
latency-budget: deps build
	cd tests/bench && $(GO) build -o ../../$(BIN)/kbt-bench .
	KBT_BENCH_COMMAND="make latency-budget$(if $(BENCH_FLAGS), BENCH_FLAGS='$(BENCH_FLAGS)')" $(BIN)/kbt-bench -budget $(BENCH_FLAGS)

# The CPU 0 profile (root): perf record of CPU 0 with call graphs
# during iperf3 each way, the NFS read of big.bin and NFS ls -R through
# kbridge-adaptive; writes results/profile-<UTC>.md, the table of shares, and
# a flame graph per workload beside it (results/profile-<UTC>-<workload>.png).
# More rounds, interleaved, with ranges: make profile BENCH_FLAGS='-rounds 3'
.PHONY: profile
profile: deps build
	cd tests/bench && $(GO) build -o ../../$(BIN)/kbt-bench .
	KBT_BENCH_COMMAND="make profile$(if $(BENCH_FLAGS), BENCH_FLAGS='$(BENCH_FLAGS)')" $(BIN)/kbt-bench -profile $(BENCH_FLAGS)

# A Debian package of bin/kbridge, for the DPDK it was built against:
# bin/kbridge_<version>_<arch>.deb (deploy/deb.sh; docs/PACKAGING.md).
deb: $(BIN)/kbridge
	@bash deploy/deb.sh $(BIN)

# The OCI image of kbridge (root): bin/kbridge, the DPDK runtime it was
# built against and the example configuration, from this machine's Debian
# packages, imported into podman's storage as kbridge:<version> and
# kbridge:latest (deploy/image/build.sh; deploy/kubernetes/README.md).
# IMAGE_DPDK=24.11: kbridge built in the Debian 13 root of tests/dpdk24
# against its DPDK 24.11, with that root's packages, as
# kbridge:<version>-dpdk24.11 and kbridge:dpdk24.11.
IMAGE_DPDK ?=
image: $(BIN)/kbridge
	@KBRIDGE_IMAGE_DPDK=$(IMAGE_DPDK) GO=$(GO) bash deploy/image/build.sh $(BIN)

generate:
	$(GO) generate ./xdp/

# The app's headers in include/kbridge/, and kbridge.h linked into include/
# itself with the headers it includes: the compiler looks for a quoted
# include beside the link, not beside its target.
install: build
	install -D -m 0755 $(BIN)/kbridge $(DESTDIR)$(PREFIX)/bin/kbridge
	install -d $(DESTDIR)$(PREFIX)/include/kbridge
	install -m 0644 $(APP_HEADERS) $(DESTDIR)$(PREFIX)/include/kbridge/
	for h in $(notdir $(KBRIDGE_HEADERS)); do ln -sfn kbridge/$$h $(DESTDIR)$(PREFIX)/include/$$h || exit 1; done
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' deploy/debian/kbridge.pc.in >$(DESTDIR)$(PREFIX)/lib/pkgconfig/kbridge.pc
	install -D -m 0644 deploy/kbridge.service $(DESTDIR)/etc/systemd/system/kbridge.service
	install -D -m 0644 deploy/kbridge.service.d/10-dpdk-app.conf $(DESTDIR)/etc/systemd/system/kbridge.service.d/10-dpdk-app.conf
	bash deploy/instance-unit.sh >$(BIN)/kbridge@.service
	install -D -m 0644 $(BIN)/kbridge@.service $(DESTDIR)/etc/systemd/system/kbridge@.service
	install -D -m 0644 deploy/kbridge.service.d/10-dpdk-app.conf $(DESTDIR)/etc/systemd/system/kbridge@.service.d/10-dpdk-app.conf
	install -D -m 0644 docs/DOCTOR.md $(DESTDIR)$(PREFIX)/share/doc/kbridge/DOCTOR.md
	install -D -m 0644 deploy/kbridge.service.d/30-mode-xdp.conf.example $(DESTDIR)$(PREFIX)/share/doc/kbridge/examples/30-mode-xdp.conf.example
	test -e $(DESTDIR)/etc/kbridge/kbridge.yaml || install -D -m 0644 deploy/kbridge.yaml $(DESTDIR)/etc/kbridge/kbridge.yaml

clean:
	rm -rf $(BIN) test.log
