# rdma: the fixed targets are deps, test, demo, bench, capi (see docs/design.md).
GO        ?= go
GOFLAGS   ?=
# Each new input the fuzzer keeps is minimized for at most this long, so that
# a short run spends its time fuzzing (the default, 60s, can take it all).
FUZZMINIMIZETIME ?= 1s
BUILD     := build
STATICCHECK_VERSION := v0.8.2
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck

.PHONY: all deps test lint test-go test-examples test-fuzz test-ops demo bench bench-apps capi vet clean

all: test

# System packages for the tests. Building needs only gcc: the rdmacore
# provider opens rdma-core's libraries at run time. The tests use them
# (libibverbs1, librdmacm1, ibverbs-providers) and compare the provider's
# ABI declarations with rdma-core's headers (libibverbs-dev, librdmacm-dev).
# procps (sysctl) and iproute2 serve the network-namespace tests; QEMU, kmod
# and xz the Soft-RoCE VM (scripts/softroce); prometheus (promtool and the
# server) make test-ops's checks of promrdma. Then the Go modules, and
# staticcheck at a pinned version through the Go module proxy.
deps:
	@if command -v apt-get >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
			libibverbs1 librdmacm1 ibverbs-providers librdmacm-dev libibverbs-dev \
			pkg-config gcc iproute2 util-linux procps qemu-system-x86 kmod xz-utils prometheus >/dev/null; \
	else echo "make deps: no apt-get; install rdma-core's libraries and headers, procps and qemu-system-x86 by hand"; fi
	$(GO) mod download
	$(GO) -C cmd/perfplot mod download
	$(GO) -C promrdma mod download
	$(GO) -C bench mod download
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Everything CI checks: lint, the Go tests with the race detector, the C test,
# every example, the C demo, the operator's checks, then a short run of every
# fuzz target.
test: lint test-go test-c test-examples demo test-ops test-fuzz

# gofmt, go vet, a tidy go.mod and go.sum, and staticcheck, on the module and
# on cmd/perfplot, promrdma and bench (modules of their own: see their docs).
lint: vet
	@unformatted=$$($(GO)fmt -l $$(git ls-files '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted" >&2; exit 1; fi
	$(GO) mod tidy -diff
	$(GO) -C cmd/perfplot vet ./...
	$(GO) -C cmd/perfplot mod tidy -diff
	$(GO) -C promrdma vet ./...
	$(GO) -C promrdma mod tidy -diff
	$(GO) -C bench vet ./...
	$(GO) -C bench mod tidy -diff
	@command -v $(STATICCHECK) >/dev/null 2>&1 || \
		{ echo "make lint: $(STATICCHECK) not found; make deps installs it" >&2; exit 1; }
	$(STATICCHECK) ./...
	cd cmd/perfplot && $(STATICCHECK) ./...
	cd promrdma && $(STATICCHECK) ./...
	cd bench && $(STATICCHECK) ./...

# go test's usual output (a closing ok or FAIL per package), then a count of
# the tests and every skipped one with its reason (internal/testsummary).
# TestManyConnsHeld again without the race detector, at its full count
# (10,000 connections held in one process). bench/'s smoke test runs every
# application workload briefly, its answers checked (~40 s).
test-go:
	$(GO) run ./internal/testsummary -race -count=1 -p 1 -timeout 20m ./...
	$(GO) test -count=1 -timeout 5m -run '^TestManyConnsHeld$$' .
	$(GO) -C cmd/perfplot test -race -count=1 ./...
	$(GO) -C promrdma test -race -count=1 ./...
	$(GO) -C bench test -race -count=1 ./...

# Every Go example built and run on loopback, its output checked.
test-examples:
	GO=$(GO) scripts/examples-test.sh

# Every parser that reads bytes off the network has a fuzz target; run each
# for a count of executions (scripts/fuzz-counts), FUZZTIME=60s for a duration.
test-fuzz:
	GO=$(GO) FUZZMINIMIZETIME=$(FUZZMINIMIZETIME) scripts/fuzz-test.sh

# As a new user and an operator meet it (scripts/ops-test.sh): a build and
# vet with the oldest Go release go.mod declares; a fresh module outside the
# repository that gets the library with go get (a replace directive to a
# copy of this tree) on that release, builds the README's program and runs
# the Example functions; promtool check metrics and a real Prometheus scrape
# of promrdma, on 127.0.0.1.
test-ops:
	GO=$(GO) scripts/ops-test.sh

vet:
	$(GO) vet ./...

clean:
	rm -rf $(BUILD)

# --- C API -------------------------------------------------------------------
# librdma.so, its header rdma_lib.h (hand-written: cgo's own header speaks Go
# types) and rdma.pc, so that `cc $$(pkg-config --cflags --libs rdma) prog.c`
# works with PKG_CONFIG_PATH=build/lib/pkgconfig.
CC        ?= cc
CAPI_LIB  := $(BUILD)/lib/librdma.so
CAPI_HDR  := $(BUILD)/include/rdma_lib.h
CAPI_PC   := $(BUILD)/lib/pkgconfig/rdma.pc
C_BIN     := $(BUILD)/bin
C_FLAGS   := -O2 -Wall -Wextra -Werror -I$(BUILD)/include
C_LIBS    := -L$(BUILD)/lib -Wl,-rpath,'$$ORIGIN/../lib' -lrdma -pthread

.PHONY: test-c capi-asan bench-capi

capi:
	@mkdir -p $(BUILD)/lib/pkgconfig $(BUILD)/include
	$(GO) build -buildmode=c-shared -ldflags=-extldflags=-Wl,-soname,librdma.so -o $(CAPI_LIB) ./capi/clib
	@rm -f $(BUILD)/lib/librdma.h
	cp capi/clib/include/rdma_lib.h $(CAPI_HDR)
	cp capi/clib/rdma.pc $(CAPI_PC)

# The C test drives librdma.so from several pthreads: a server and clients,
# every error and its text, all-to-all, a hostile server; then, in a network
# namespace of its own, the examples' simple client and client against it.
# Everything is built with AddressSanitizer, librdma.so too (go build -asan:
# the Go side checks its own loads and stores into C memory against ASan's
# shadow, so a write past a C caller's buffer from Go is caught as well).
ASAN      := $(BUILD)/asan
ASAN_LIB  := $(ASAN)/lib/librdma.so
ASAN_BIN  := $(ASAN)/bin
ASAN_CFLAGS := -O1 -g -fsanitize=address -fno-omit-frame-pointer -Wall -Wextra -Werror -I$(ASAN)/include
ASAN_LIBS := -L$(ASAN)/lib -Wl,-rpath,'$$ORIGIN/../lib' -lrdma -pthread
# halt_on_error: the first bad access ends the run with ASan's report.
export ASAN_OPTIONS ?= halt_on_error=1:abort_on_error=0

capi-asan:
	@mkdir -p $(ASAN)/lib/pkgconfig $(ASAN)/include $(ASAN_BIN)
	$(GO) build -asan -buildmode=c-shared -ldflags=-extldflags=-Wl,-soname,librdma.so -o $(ASAN_LIB) ./capi/clib
	@rm -f $(ASAN)/lib/librdma.h
	cp capi/clib/include/rdma_lib.h $(ASAN)/include/rdma_lib.h
	cp capi/clib/rdma.pc $(ASAN)/lib/pkgconfig/rdma.pc

test-c: capi-asan
	$(CC) $(ASAN_CFLAGS) -o $(ASAN_BIN)/capi_test capi/clib/testdata/capi_test.c $(ASAN_LIBS)
	@for p in server client async onesided; do \
		echo "$(CC) -fsanitize=address ... -o $(ASAN_BIN)/$$p examples/c/$$p.c"; \
		$(CC) $(ASAN_CFLAGS) -o $(ASAN_BIN)/$$p examples/c/$$p.c $(ASAN_LIBS) || exit 1; \
	done
	PKG_CONFIG_PATH=$(CURDIR)/$(ASAN)/lib/pkgconfig sh -c \
		'$(CC) -fsanitize=address -g -Wall -Werror -o $(ASAN_BIN)/simple_client examples/c/simple_client.c $$(pkg-config --cflags --libs rdma)'
	timeout 300 $(ASAN_BIN)/capi_test $(ASAN_BIN)/simple_client $(ASAN_BIN)/client $(ASAN_BIN)/async $(ASAN_BIN)/onesided

# The original rdma_lib's example server and two clients on loopback,
# all-to-all, on the default provider; fails (never hangs) unless all three
# finish.
demo: capi
	@mkdir -p $(C_BIN)
	@for p in server client simple_client; do \
		echo "$(CC) ... -o $(C_BIN)/$$p examples/c/$$p.c"; \
		$(CC) $(C_FLAGS) -o $(C_BIN)/$$p examples/c/$$p.c $(C_LIBS) || exit 1; \
	done
	examples/c/demo.sh $(C_BIN)

# A 64-byte send/recv round trip through librdma.so from C, through capi from
# Go and through rdma.Conn, in one run.
bench-capi: capi
	@mkdir -p $(C_BIN)
	$(CC) $(C_FLAGS) -o $(C_BIN)/capi_bench capi/clib/testdata/capi_bench.c $(C_LIBS)
	CAPI_BENCH_C=$(CURDIR)/$(C_BIN)/capi_bench $(GO) test -run '^$$' -bench RoundTrip64 -benchmem ./capi/

# --- Benchmarks --------------------------------------------------------------
# The Go benchmarks of verbs, the root package (rdma.Conn) and collectives,
# with -benchmem, then rdmaperf's loopback comparison (rdma vs TCP through the
# same code, server in a separate process, median of PERF_ROUNDS rounds),
# then the same with rdma.Buffers (zero copy) up to 64 MiB beside memcpy
# (the TCP baseline runs with the host's congestion control, which the report
# names; PERF_FLAGS='... -tcp-cc reno' runs it as soft's same-host connections
# do), then rdmaconns: CONNS_N connections held in one process, per endpoint
# resident memory, registered memory, descriptors and setup time, on soft's
# shared-memory and TCP paths beside Go's TCP (10,000: make bench CONNS_N=10000).
# Everything goes to $(BENCH_OUT)/results.txt, rdmaperf's report also to
# $(BENCH_OUT)/rdmaperf.json and drawn (cmd/perfplot: throughput and p50
# latency against message size, rdma beside tcp) in $(BENCH_OUT)/rdmaperf.svg
# and .png. BENCHTIME bounds each verbs/conn benchmark, COLL_BENCHTIME each
# collectives one (16 MiB per op); a few minutes on 2 cores. Last, bench-mpi:
# the collectives beside Open MPI under mpirun (Open MPI installed on demand).
BENCH_OUT      := $(BUILD)/bench
BENCHTIME      ?= 1s
COLL_BENCHTIME ?= 3x
PERF_ROUNDS    ?= 5
PERF_SIZES     ?= 64,1K,16K,64K,1M
PERF_FLAGS     ?= -loopback -fork -rounds $(PERF_ROUNDS) -t 1s -sizes $(PERF_SIZES)
# The zero-copy run: stream from and into rdma.Buffers, up to 64 MiB, with
# the same run's single-core memcpy bandwidth as the reference line.
PERF_BUFFER_FLAGS ?= -loopback -fork -rounds $(PERF_ROUNDS) -t 1s -test stream -buffers -memcpy -sizes 64K,256K,1M,4M,16M,64M
CONNS_N        ?= 1000

bench:
	@mkdir -p $(BENCH_OUT) $(BUILD)/bin
	$(GO) build -o $(BUILD)/bin/rdmaperf ./cmd/rdmaperf
	$(GO) build -o $(BUILD)/bin/rdmaconns ./cmd/rdmaconns
	@rm -f $(BENCH_OUT)/rdmaperf.json $(BENCH_OUT)/failed
	@( \
		echo "# make bench $$(date -u +%Y-%m-%dT%H:%M:%SZ); $$($(GO) version); $$(nproc) CPUs"; \
		echo "# $(GO) test -run '^\$$' -bench . -benchmem -benchtime $(BENCHTIME) ./verbs/... ."; \
		$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -timeout 20m ./verbs/... . \
			|| echo "go benchmarks of verbs and rdma" >> $(BENCH_OUT)/failed; \
		echo "# $(GO) test -run '^\$$' -bench . -benchmem -benchtime $(COLL_BENCHTIME) ./collectives/..."; \
		$(GO) test -run '^$$' -bench . -benchmem -benchtime $(COLL_BENCHTIME) -timeout 20m ./collectives/... \
			|| echo "go benchmarks of collectives" >> $(BENCH_OUT)/failed; \
		echo "# rdmaperf $(PERF_FLAGS)"; \
		$(BUILD)/bin/rdmaperf $(PERF_FLAGS) -json-file $(BENCH_OUT)/rdmaperf.json \
			|| echo "rdmaperf" >> $(BENCH_OUT)/failed; \
		echo "# rdmaperf $(PERF_BUFFER_FLAGS)"; \
		$(BUILD)/bin/rdmaperf $(PERF_BUFFER_FLAGS) -json-file $(BENCH_OUT)/rdmaperf-buffers.json \
			|| echo "rdmaperf -buffers" >> $(BENCH_OUT)/failed; \
		[ ! -f $(BENCH_OUT)/rdmaperf.json ] || $(GO) -C cmd/perfplot run . $(CURDIR)/$(BENCH_OUT)/rdmaperf.json \
			$$([ ! -f $(BENCH_OUT)/rdmaperf-buffers.json ] || echo $(CURDIR)/$(BENCH_OUT)/rdmaperf-buffers.json) \
			$(CURDIR)/$(BENCH_OUT)/rdmaperf.svg $(CURDIR)/$(BENCH_OUT)/rdmaperf.png \
			|| echo "perfplot" >> $(BENCH_OUT)/failed; \
		echo "# rdmaconns -n $(CONNS_N) -q"; \
		$(BUILD)/bin/rdmaconns -n $(CONNS_N) -q || echo "rdmaconns" >> $(BENCH_OUT)/failed; \
		echo "# cmd/rdmacoll/mpi/bench-mpi.sh $(BENCH_OUT)/mpi (make bench-mpi)"; \
		GO=$(GO) cmd/rdmacoll/mpi/bench-mpi.sh $(BENCH_OUT)/mpi || echo "bench-mpi" >> $(BENCH_OUT)/failed; \
	) 2>&1 | tee $(BENCH_OUT)/results.txt
	@echo "make bench: results in $(BENCH_OUT)/results.txt, rdmaperf's report in $(BENCH_OUT)/rdmaperf.json, drawn in $(BENCH_OUT)/rdmaperf.svg and .png"
	@if [ -f $(BENCH_OUT)/failed ]; then \
		echo "make bench: FAILED: $$(paste -sd, $(BENCH_OUT)/failed) (see $(BENCH_OUT)/results.txt)" >&2; exit 1; fi

# cmd/rdmacoll (allreduce, broadcast, allgather, alltoall: median time,
# algbw, busbw, every element checked) beside the same operations of Open MPI
# (cmd/rdmacoll/mpi/collmpi.c) under the same mpirun, on 2 and 4 ranks, in
# COLL_ROUNDS interleaved rounds, and the ratio of their times
# ($(BENCH_OUT)/mpi/ratio-n*.txt); then the conns engine beside Open MPI's TCP
# BTL, and (as root) on 2 network-namespace hosts x 2 ranks
# (cmd/rdmacoll/mpi/bench-netns.sh). Installs Debian's openmpi-bin and
# libopenmpi-dev if mpicc or mpirun is missing (make test never does).
# COLL_RANKS, COLL_SIZES, COLL_ITERS, COLL_FLAGS and MPIRUN_FLAGS: see the script.
.PHONY: bench-mpi
bench-mpi:
	GO=$(GO) cmd/rdmacoll/mpi/bench-mpi.sh $(BENCH_OUT)/mpi

# --- Applications ------------------------------------------------------------
# bench/: real applications (go-redis against redcon, hashicorp/raft with a
# leader failover, net/http, gRPC, yamux) over rdma and over Go's TCP in the
# same run, client and servers in separate processes, on soft's shared memory
# and soft's TCP path; ops/s, CPU per op, p50/p99 and the rdma/TCP ratio in a
# table, $(BENCH_OUT)/apps.json and the ratios drawn in $(BENCH_OUT)/apps.svg.
# APPS_FLAGS='-workloads redis,raft -rounds 5' narrows or widens it; in the
# Soft-RoCE guest on rdmacore: scripts/softroce-bench-apps.sh.
APPS_ROUNDS ?= 3
APPS_FLAGS  ?= -rounds $(APPS_ROUNDS) -t 1s

bench-apps:
	@mkdir -p $(BENCH_OUT) $(BUILD)/bin
	$(GO) -C bench build -o $(CURDIR)/$(BUILD)/bin/bench-apps .
	$(BUILD)/bin/bench-apps $(APPS_FLAGS) -json $(BENCH_OUT)/apps.json -svg $(BENCH_OUT)/apps.svg

# --- Soft-RoCE ---------------------------------------------------------------
# The rdmacore provider on a real kernel RDMA stack: builds test binaries and
# runs them in a QEMU guest with the kernel's rdma_rxe driver
# (scripts/softroce/run-in-vm.sh, which builds and caches its image from
# Debian packages): rdmacore's own tests with the verbs conformance suite, and
# the VM tests of other packages (scripts/softroce-test.sh).
# `scripts/softroce/run-in-vm.sh --selftest` checks the VM with rdma-core's tools.
.PHONY: test-softroce
test-softroce:
	GO=$(GO) scripts/softroce-test.sh
	GO=$(GO) scripts/softroce-mixed.sh
	GO=$(GO) scripts/softroce-rsocket.sh

# --- Connections held on Soft-RoCE -----------------------------------------
# cmd/rdmaconns on rdmacore in the guest: 1,000 connections held (64 KiB
# rings) and 200 with the default Config, registered and resident memory,
# descriptors and setup time per connection (scripts/softroce-conns.sh).
.PHONY: bench-softroce-conns
bench-softroce-conns:
	GO=$(GO) scripts/softroce-conns.sh

# --- Mixed fleets on Soft-RoCE -----------------------------------------------
# In the same guest: a veth pair from the guest's rxe-carrying namespace to one
# without RDMA; an auto dial across it falls back to soft after
# Config.RDMAConnectTimeout, and a group with a rank across it; plus the mixed
# listener and a group of rdmacore and soft ranks. Part of test-softroce
# (~40 s more: a second guest boot).
.PHONY: test-softroce-mixed
test-softroce-mixed:
	GO=$(GO) scripts/softroce-mixed.sh
