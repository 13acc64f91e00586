# kbridge: see README.md. Every target that needs packages or hugepages
# depends on `deps`, which installs only what is missing.
SHELL   := /bin/bash
# The newest Go 1.21+ on PATH, in /usr/local/go or Debian's /usr/lib/go-1.N
# (deploy/go.sh; make deps installs one); it fetches the toolchain go.mod
# names by itself. Looked up once, when a recipe first needs it: after deps,
# which may have just installed it (make demo on a fresh machine).
ifeq ($(origin GO),undefined)
GO       = $(eval GO := $(shell bash deploy/go.sh))$(GO)
endif
# The toolchain go.mod names (its toolchain line, the one home of the
# version): a Go's go.env may say GOTOOLCHAIN=local (Debian's and the
# upstream tarball's do), and a machine's Go then ignores the line. Every go
# command the recipes and the tests run gets it, unless the caller chose.
export GOTOOLCHAIN ?= $(shell sed -n 's/^toolchain //p' go.mod)
# The one version string of a build: the binary's (`kbridge version`), the
# .deb's and kbridge.pc's (deploy/version.sh: git describe, Debian-valid).
# Computed once: every rule of a run uses the same string.
ifeq ($(origin VERSION),undefined)
VERSION := $(shell bash deploy/version.sh)
endif
BIN     := bin
PREFIX  ?= /usr/local
# The DPDK that pkg-config finds: Debian's, or one built into a prefix of
# its own with PKG_CONFIG_PATH=<prefix>/lib/<triplet>/pkgconfig (docs/DPDK.md).
DPDK_CFLAGS = $(shell pkg-config --cflags libdpdk)
DPDK_LIBS   = $(shell pkg-config --libs libdpdk)
# DPDK linked statically, as DPVS, F-Stack, dperf and Gatekeeper link it:
# their mempool handler table is ordered otherwise than a shared kbridge's.
# -latomic: 25.11's libdpdk.pc no longer names it, and its drivers' 16-byte
# atomics (net_sfc) need it from a compiler that does not add it itself
# (Debian unstable's GCC 16 does, as needed; Debian 12's and 13's do not).
DPDK_STATIC_LIBS = $(shell pkg-config --static --libs libdpdk) -latomic
# cgo refuses compiler flags it does not know, and DPDK's pkg-config file
# names machine flags (24.11: -mrtm) that are none of its business to judge:
# let the -m<feature> kind through, for this build and the go builds the
# tests run. A plain go build needs the same (README, "DPDK versions").
export CGO_CFLAGS_ALLOW ?= -m[a-z0-9-]+
# Go 1.26 and later put the heap at a random address in the lower 64 TiB (the
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
# Debian's hardening for the C that cgo links into kbridge (ring/, doctor/),
# as dpkg-buildflags gives it: fortified string functions, a stack
# protector, relocations read-only and bound at start (lintian's hardening
# checks). Added to what the caller set, if anything.
export CGO_CFLAGS := $(if $(CGO_CFLAGS),$(CGO_CFLAGS),-O2 -g) -D_FORTIFY_SOURCE=2 -fstack-protector-strong
export CGO_LDFLAGS := $(CGO_LDFLAGS) -Wl,-z,relro -Wl,-z,now
# DPDK_SRC: the source tree of the DPDK pkg-config finds (its VERSION and
# lib/vhost/vhost_user.h are all that is read). With it the build checks
# kbridge's copy of librte_vhost's message layout (ring/vhost_msg.h) against
# DPDK's own (tests/vhost-layout.c), and a DPDK newer than the layouts
# kbridge knows builds once that check passed. By default the copy of
# Debian's source that deploy/dpdk-src.sh keeps (make deps fetches it), if
# there is one for this DPDK; DPDK_SRC= builds without the check.
DPDK_SRC ?= $(wildcard /var/cache/kbridge/dpdk-src/$(shell pkg-config --modversion libdpdk 2>/dev/null))
ifneq ($(DPDK_SRC),)
VHOST_LAYOUT := $(BIN)/.vhost-layout
export CGO_CFLAGS := $(CGO_CFLAGS) -DKB_VH_LAYOUT_PROBED
endif
# Compiler warnings the DPDK app's side must not give, in C and in C++.
# On a DPDK not yet tried a new deprecation may warn: make WERROR= builds anyway.
WERROR ?= -Werror
HDR_WARN = -Wall -Wextra $(WERROR)
# What a DPDK app includes: kbridge.h, which includes the headers of its
# concerns, and KNI's API over it (docs/KNI.md).
KBRIDGE_HEADERS := $(addprefix include/kbridge/,kbridge.h kbridge_ring.h kbridge_classify.h kbridge_owner.h kbridge_wakeup.h kbridge_port.h kbridge_link.h kbridge_requests.h)
APP_HEADERS := $(KBRIDGE_HEADERS) $(addprefix include/kbridge/,kbridge_child.h rte_kni.h rte_kni_common.h rte_kni_compat.h)
GOSRC   := $(shell find . -name '*.go' -not -path './bin/*') $(wildcard ring/*.c ring/*.h include/kbridge/*.h) go.mod go.sum

.PHONY: all deps deb image build man header-check test fuzz unit-test testbed-up testbed-down demo install generate vet vulncheck clean

all: build

deps:
	@bash deploy/deps.sh

build: $(BIN)/kbridge $(BIN)/kbridge-refapp $(BIN)/kbridge-kniapp $(BIN)/kbridge-floor header-check man \
	$(BIN)/kbridge-refapp-static $(BIN)/kbridge-kniapp-static librte_kni

# A position-independent executable, as Debian builds its binaries
# (ASLR for the program too; lintian's hardening-no-pie).
GOBUILD = $(GO) build -trimpath -buildmode=pie -ldflags "-X main.version=$(VERSION)"
$(BIN)/kbridge: $(GOSRC) $(VHOST_LAYOUT)
	@mkdir -p $(BIN)
	$(GOBUILD) -o $@ ./cmd/kbridge

# A man page per command, made from the command line's own definitions
# (cmd/kbridge/man.go, behind its build tag), dated by the commit.
man: $(BIN)/man/kbridge.8
$(BIN)/man/kbridge.8: $(GOSRC)
	rm -rf $(BIN)/man
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || date +%s) \
		$(GO) run -trimpath -tags kbridge_man -ldflags "-X main.version=$(VERSION)" ./cmd/kbridge gen-man $(BIN)/man

$(BIN)/kbridge-refapp: tests/refapp/refapp.c tests/refapp/flood.c tests/refapp/flood.h $(KBRIDGE_HEADERS)
	@mkdir -p $(BIN)
	$(CC) -O2 -g $(HDR_WARN) -Iinclude/kbridge $(DPDK_CFLAGS) -o $@ tests/refapp/refapp.c tests/refapp/flood.c $(DPDK_LIBS)

# The two apps again, linked with DPDK statically (pkg-config --static): the
# test bed's KBT_APP for tests/e2e's static mode, and tests/kni's.
$(BIN)/kbridge-refapp-static: tests/refapp/refapp.c tests/refapp/flood.c tests/refapp/flood.h $(KBRIDGE_HEADERS)
	@mkdir -p $(BIN)
	$(CC) -O2 -g $(HDR_WARN) -Iinclude/kbridge $(DPDK_CFLAGS) -o $@ tests/refapp/refapp.c tests/refapp/flood.c $(DPDK_STATIC_LIBS)

$(BIN)/kbridge-kniapp-static: tests/kniapp/kniapp.c $(APP_HEADERS)
	@mkdir -p $(BIN)
	$(CC) -O2 -g $(HDR_WARN) -Iinclude/kbridge $(DPDK_CFLAGS) -o $@ $< $(DPDK_STATIC_LIBS)

# The floor kbridge is measured against (tests/floor): a plain C forwarder
# on the same rings and TAP, run by the bed in kbridge's place.
$(BIN)/kbridge-floor: tests/floor/floor.c $(KBRIDGE_HEADERS) ring/burst_prefetch.h ring/burst_cut.h ring/burst_csum.h ring/burst.h
	@mkdir -p $(BIN)
	$(CC) -O2 -g $(HDR_WARN) -Iinclude/kbridge -Iring $(DPDK_CFLAGS) -o $@ $< $(DPDK_LIBS)

# The KNI application of tests/kni: rte_kni.h is all it includes of kbridge.
$(BIN)/kbridge-kniapp: tests/kniapp/kniapp.c $(APP_HEADERS)
	@mkdir -p $(BIN)
	$(CC) -O2 -g $(HDR_WARN) -Iinclude/kbridge $(DPDK_CFLAGS) -o $@ $< $(DPDK_LIBS)

# librte_kni: rte_kni.h's bodies compiled once as exported functions
# (librte_kni/rte_kni.c), shared and static, in $(BIN)/lib/ (docs/KNI.md,
# librte_kni). The soname is librte_kni.so.ABI, ABI the DPDK's own (23 for
# 22.11: DPDK's librte_kni.so.23), read from its librte_eal.so, and the
# version script's nodes are named after it (DPDK_23). One object, -fPIC,
# for both: a static app is a position-independent executable too.
.PHONY: librte_kni
librte_kni: $(BIN)/lib/librte_kni.so $(BIN)/lib/librte_kni.a
DPDK_ABI = $(shell readelf -d $(shell pkg-config --variable=libdir libdpdk)/librte_eal.so 2>/dev/null | sed -n 's/.*(SONAME).*\[librte_eal\.so\.\([0-9]*\)\]/\1/p')
KNI_LIB_CFLAGS = -O2 -g $(HDR_WARN) -fPIC -fvisibility=hidden -D_FORTIFY_SOURCE=2 -fstack-protector-strong
$(BIN)/lib/rte_kni.o: librte_kni/rte_kni.c $(APP_HEADERS)
	@mkdir -p $(BIN)/lib
	$(CC) $(KNI_LIB_CFLAGS) -Iinclude/kbridge $(DPDK_CFLAGS) -c -o $@ $<
$(BIN)/lib/librte_kni.so: $(BIN)/lib/rte_kni.o librte_kni/rte_kni.map
	@abi='$(DPDK_ABI)'; [ -n "$$abi" ] || { echo "librte_kni: no librte_eal.so in $$(pkg-config --variable=libdir libdpdk) to take DPDK's ABI from" >&2; exit 1; }; \
	kbv=$$(sed -n 's/^#define KBRIDGE_REGISTRY_V_ \([0-9]*\) .*/\1/p' include/kbridge/kbridge_wakeup.h); [ -n "$$kbv" ] || { echo "librte_kni: no KBRIDGE_REGISTRY_V_ in include/kbridge/kbridge_wakeup.h" >&2; exit 1; }; \
	sed -e "s/@ABI@/$$abi/" -e "s/@KBV@/$$kbv/" librte_kni/rte_kni.map >$(BIN)/lib/rte_kni.map && \
	$(CC) -shared -o $@ $< -Wl,-soname,librte_kni.so.$$abi -Wl,--version-script=$(BIN)/lib/rte_kni.map \
		-Wl,-z,relro -Wl,-z,now -Wl,--no-undefined $(DPDK_LIBS) -lpthread && \
	ln -sfn librte_kni.so $(BIN)/lib/librte_kni.so.$$abi && echo "librte_kni: $@, soname librte_kni.so.$$abi"
$(BIN)/lib/librte_kni.a: $(BIN)/lib/rte_kni.o
	rm -f $@
	$(AR) rcD $@ $<

# The app's headers compile without a warning, each alone, as C and as C++
# (many DPDK apps are C++), against whichever DPDK pkg-config finds, and
# README.md's example of kbridge.h compiles (tests/header-check.sh); rte_kni.h
# also as librte_kni.pc's Cflags use it (RTE_KNI_LIBRARY).
header-check: $(BIN)/.header-check
$(BIN)/.header-check: $(APP_HEADERS) tests/header-check.sh README.md
	@mkdir -p $(BIN)
	CC="$(CC)" CXX="$(CXX)" CFLAGS="$(HDR_WARN) -Iinclude/kbridge $(DPDK_CFLAGS)" bash tests/header-check.sh $(APP_HEADERS)
	CC="$(CC)" CXX="$(CXX)" CFLAGS="$(HDR_WARN) -DRTE_KNI_LIBRARY -Iinclude/kbridge $(DPDK_CFLAGS)" bash tests/header-check.sh include/kbridge/rte_kni.h
	@touch $@

# govulncheck over the daemon's module, offline: the Go vulnerability
# database is golang.org/x/vulndb's OSV files, a module the Go module proxy
# serves, at the snapshot named here (move it on to see newer reports).
# Fails (exit 3) on a vulnerability kbridge's code can reach, in the standard
# library of the toolchain or in a module it requires. tests/bench and
# deploy/kubernetes are left out: tools of the tests, never shipped.
VULNCHECK := golang.org/x/vuln/cmd/govulncheck@v1.9.0
VULNDB    := golang.org/x/vulndb@v0.0.0-20261105234957-e22db6528018
.PHONY: vulncheck
vulncheck:
	@db=$$(cd / && $(GO) mod download -json $(VULNDB) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && \
		test -d "$$db/data/osv" || { echo "vulncheck: cannot download $(VULNDB)"; exit 1; }; \
		echo "vulncheck: $(VULNCHECK) on $$($(GO) env GOVERSION), database $(VULNDB)"; \
		$(GO) run $(VULNCHECK) -db "file://$$db/data/osv" ./...

# The vhost-user message layout against DPDK's source (DPDK_SRC, above):
# compiled, never run; a difference is a static assertion's error.
$(BIN)/.vhost-layout: tests/vhost-layout.c ring/vhost_msg.h $(DPDK_SRC)/lib/vhost/vhost_user.h
	@mkdir -p $(BIN)
	@src=$$(cat $(DPDK_SRC)/VERSION 2>/dev/null); have=$$(pkg-config --modversion libdpdk); \
	[ "$$src" = "$$have" ] || { echo "vhost-layout: DPDK_SRC=$(DPDK_SRC) is DPDK $${src:-(no VERSION file)}, pkg-config finds $$have: name the source of the DPDK kbridge builds against, or DPDK_SRC= for none" >&2; exit 1; }
	$(CC) -fsyntax-only -I$(DPDK_SRC)/lib/vhost -Iring $(DPDK_CFLAGS) tests/vhost-layout.c
	@echo "vhost-layout: ring/vhost_msg.h is DPDK $$(cat $(DPDK_SRC)/VERSION)'s vhu_msg_context (DPDK_SRC=$(DPDK_SRC))"
	@touch $@

# gofmt, go vet, staticcheck (this version, from the Go module proxy on
# first use) and shellcheck (Debian's; make deps installs it) on every
# shell script git tracks (following what they source), at its warning
# level: each exception is argued where it is, in a directive. Its infos
# and style notes (SC2016 on text single-quoted on purpose, A && B || C
# where C is meant either way) are not gated. The tag adds the man page
# generator (cmd/kbridge/man.go).
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet -tags kbridge_man ./...
	$(GO) run $(STATICCHECK) -tags kbridge_man ./...
	shellcheck -x -P SCRIPTDIR -S warning $$(git ls-files '*.sh' deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm .ci/run)

# The test command: unit tests everywhere, then the root-only integration
# tests on real DPDK, TAP devices and the namespace test bed. Packages run
# one at a time (-p 1): several share the test bed, bpffs pins and CPU 1.
# Then the DPDK tests again on 24.11 and 25.11 and across the three
# (test-dpdk). test-host is the first half alone.
test: test-host
	@$(MAKE) --no-print-directory test-dpdk

.PHONY: test-host
test-host: deps build vet vulncheck bench-test fuzz
	$(GO) test -p 1 -count=1 -timeout 40m ./... 2>&1 | tee test.log; exit $${PIPESTATUS[0]}

# The DPDK tests again on the LTS releases beside the host's, each in a
# Debian root that tests/dpdkroot/root.sh makes (and caches in
# /var/cache/kbridge): 24.11 (Debian 13) and 25.11 (Debian unstable); then
# across them and the host's (tests/crossver); docs/DPDK.md. Root.
# test-dpdk24 and test-dpdk25: one root, and across it and the host's.
.PHONY: test-dpdk test-dpdk24 test-dpdk25
test-dpdk: build
	GO=$(GO) bash tests/dpdkroot/ci.sh
test-dpdk24: build
	GO=$(GO) KBR_BED_RELEASE=24.11 bash tests/dpdkroot/ci.sh 24.11
test-dpdk25: build
	GO=$(GO) bash tests/dpdkroot/ci.sh 25.11

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
# DEB_DPDK=24.11 or 25.11 (root): kbridge built and packaged in that
# release's Debian root of tests/dpdkroot, against its DPDK and depending
# on its packages: bin/dpdk<release>/kbridge_<version>_<arch>.deb.
DEB_DPDK ?=
deb: $(if $(DEB_DPDK),,$(BIN)/kbridge man librte_kni)
	@KBRIDGE_DEB_DPDK=$(DEB_DPDK) GO=$(GO) bash deploy/deb.sh $(if $(DEB_DPDK),$(BIN)/dpdk$(DEB_DPDK),$(BIN))

# The OCI image of kbridge (root): bin/kbridge, the DPDK runtime it was
# built against and the example configuration, from this machine's Debian
# packages, imported into podman's storage as kbridge:<version> and
# kbridge:latest (deploy/image/build.sh; deploy/kubernetes/README.md).
# IMAGE_DPDK=24.11 or 25.11: kbridge built in that release's Debian root of
# tests/dpdkroot against its DPDK, with that root's packages, as
# kbridge:<version>-dpdk<release> and kbridge:dpdk<release>.
IMAGE_DPDK ?=
image: $(BIN)/kbridge
	@KBRIDGE_IMAGE_DPDK=$(IMAGE_DPDK) GO=$(GO) bash deploy/image/build.sh $(BIN)

generate:
	$(GO) generate ./xdp/

# What an app builds with (install-dev, alone needs no make build): the
# app's headers in include/kbridge/, and kbridge.h linked into include/
# itself with the headers it includes (the compiler looks for a quoted
# include beside the link, not beside its target); librte_kni in lib/ with
# its soname link and the link -lrte_kni finds; the pkg-config files. Then
# ldconfig, unless staged in a DESTDIR, so that dlopen finds librte_kni.so,
# when PREFIX/lib is on the loader's path (/usr/local/lib is, on Debian);
# otherwise it says so, since ldconfig would not look there. LDCONFIG=: (the
# tests') leaves the host's cache alone.
LDCONFIG ?= ldconfig
.PHONY: install-dev
install-dev: librte_kni
	install -d $(DESTDIR)$(PREFIX)/include/kbridge
	install -m 0644 $(APP_HEADERS) $(DESTDIR)$(PREFIX)/include/kbridge/
	for h in $(notdir $(KBRIDGE_HEADERS)); do ln -sfn kbridge/$$h $(DESTDIR)$(PREFIX)/include/$$h || exit 1; done
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig
	soname=$$(readelf -d $(BIN)/lib/librte_kni.so | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p') && \
	install -m 0644 $(BIN)/lib/librte_kni.so $(DESTDIR)$(PREFIX)/lib/$$soname.0 && \
	ln -sfn $$soname.0 $(DESTDIR)$(PREFIX)/lib/$$soname && ln -sfn $$soname $(DESTDIR)$(PREFIX)/lib/librte_kni.so
	install -m 0644 $(BIN)/lib/librte_kni.a $(DESTDIR)$(PREFIX)/lib/librte_kni.a
	for pc in kbridge librte_kni librte_kni-libs; do \
		sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$${prefix}/lib|' -e 's|@VERSION@|$(VERSION)|' deploy/debian/$$pc.pc.in >$(DESTDIR)$(PREFIX)/lib/pkgconfig/$$pc.pc || exit 1; \
	done
	@if [ -n "$(DESTDIR)" ]; then exit 0; fi; \
	lib=$$(readlink -f $(PREFIX)/lib); \
	for d in $$($(LDCONFIG) -v -N 2>/dev/null | sed -n 's/^\([^[:space:]][^:]*\):.*/\1/p'); do \
		[ "$$(readlink -f "$$d")" = "$$lib" ] && { $(LDCONFIG) 2>/dev/null || echo "install-dev: run ldconfig as root, for dlopen to find $(PREFIX)/lib/librte_kni.so"; exit 0; }; \
	done; \
	echo "install-dev: $(PREFIX)/lib is not on the loader's path (ldconfig -v -N): dlopen(\"librte_kni.so\") and an app linked -lrte_kni find it only with LD_LIBRARY_PATH=$(PREFIX)/lib, or once it is in /etc/ld.so.conf.d/ and ldconfig has run"

install: build install-dev
	install -D -m 0755 $(BIN)/kbridge $(DESTDIR)$(PREFIX)/bin/kbridge
	bash deploy/unit.sh $(PREFIX) >$(BIN)/kbridge.service
	install -D -m 0644 $(BIN)/kbridge.service $(DESTDIR)/etc/systemd/system/kbridge.service
	install -D -m 0644 deploy/kbridge.service.d/10-dpdk-app.conf $(DESTDIR)/etc/systemd/system/kbridge.service.d/10-dpdk-app.conf
	bash deploy/instance-unit.sh $(BIN)/kbridge.service >$(BIN)/kbridge@.service
	install -D -m 0644 $(BIN)/kbridge@.service $(DESTDIR)/etc/systemd/system/kbridge@.service
	install -D -m 0644 deploy/kbridge.service.d/10-dpdk-app.conf $(DESTDIR)/etc/systemd/system/kbridge@.service.d/10-dpdk-app.conf
	install -D -m 0644 docs/DOCTOR.md $(DESTDIR)$(PREFIX)/share/doc/kbridge/DOCTOR.md
	install -D -m 0644 deploy/kbridge.service.d/30-mode-xdp.conf.example $(DESTDIR)$(PREFIX)/share/doc/kbridge/examples/30-mode-xdp.conf.example
	install -d $(DESTDIR)$(PREFIX)/share/man/man8
	install -m 0644 $(BIN)/man/*.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	$(BIN)/kbridge completion bash >$(BIN)/kbridge.bash
	install -D -m 0644 $(BIN)/kbridge.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/kbridge
	$(BIN)/kbridge completion zsh >$(BIN)/_kbridge
	install -D -m 0644 $(BIN)/_kbridge $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_kbridge
	test -e $(DESTDIR)/etc/kbridge/kbridge.yaml || install -D -m 0644 deploy/kbridge.yaml $(DESTDIR)/etc/kbridge/kbridge.yaml

clean:
	rm -rf $(BIN) test.log
