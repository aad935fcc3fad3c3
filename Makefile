# rdma: the fixed targets are deps, test, demo, bench, capi (see ../shared/DESIGN.md).
GO        ?= go
GOFLAGS   ?=
FUZZTIME  ?= 10s
BUILD     := build

.PHONY: all deps test test-go test-fuzz demo bench capi vet clean

all: vet test

# System packages: rdma-core's headers and libraries for the cgo provider.
deps:
	@if command -v apt-get >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
			librdmacm-dev libibverbs-dev pkg-config gcc iproute2 >/dev/null; \
	else echo "make deps: no apt-get; install librdmacm-dev and libibverbs-dev by hand"; fi
	$(GO) mod download

# All tests, with the race detector, then a short run of every fuzz target.
test: test-go test-fuzz

test-go:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...

# Every parser that reads bytes off the network has a fuzz target; run each briefly.
test-fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
			echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

vet:
	$(GO) vet ./...

clean:
	rm -rf $(BUILD)
