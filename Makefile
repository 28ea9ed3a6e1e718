# Tether's one entry point for building, testing and measuring.
# `make test` is what CI runs (.ci/run); `make demo` is the first thing to try.

GO      ?= go
BIN     := bin/tether
AGENT   := bin/tether-agent
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/tetherhq/tether/cli/agentcli.version=$(VERSION)

PKG_VERSION ?= $(shell packaging/debversion.sh $(VERSION))
ARCHES      ?= amd64 arm64
DIST        ?= dist

.PHONY: all build setup packages test test-faults lint fmt-check vet staticcheck demo bench fuzz clean man

all: build

## build: compile the tether binary into bin/tether, and the agent-only tether-agent into bin/tether-agent
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) .
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(AGENT) ./cli/tether-agent

## packages: the Debian packages tether and tether-agent, amd64 and arm64, into dist/ (nfpm, pinned in packaging/go.mod)
## (VERSION=v1.2.3 names the build, the package version is derived from it by packaging/debversion.sh; ARCHES=amd64 one only; DIST=DIR elsewhere)
packages:
	@set -e; mkdir -p $(DIST); for arch in $(ARCHES); do \
		CGO_ENABLED=0 GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o dist/stage/tether . ; \
		CGO_ENABLED=0 GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o dist/stage/tether-agent ./cli/tether-agent ; \
		for p in tether tether-agent; do \
			(cd packaging && VERSION=$(PKG_VERSION) ARCH=$$arch $(GO) tool nfpm package -f $$p.yaml -p deb -t $(abspath $(DIST))/) ; \
		done; \
	done; rm -rf dist/stage; ls -l $(DIST)/*.deb

## man: the manual page, generated from the command tree, into bin/tether.1
man: build
	$(BIN) man > bin/tether.1

## setup: install what some tests use beyond Go (iproute2, iptables, git, chromium; QEMU, libvirt, a kernel, busybox-static) as root,
## or print the apt-get line; then start libvirt's daemons when they do not answer
setup:
	@.ci/setup
	@.ci/libvirtd

## test: formatting, vet, staticcheck, then every test with the race detector
## (it names what `make setup` would install, when tests will skip for want of it)
test: lint
	@.ci/setup --check
	$(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) test-faults

## test-faults: the tests that restart the broker, alone (one package at a time)
# Only the packages that have such tests are built for it (found anew
# each run: a new one is not forgotten).
FAULT_PACKAGES = $(shell grep -rl --include='*_test.go' 'func Test[A-Za-z0-9_]*Fault' . | xargs -n1 dirname | sort -u)
test-faults:
	TETHER_FAULT_TESTS=1 $(GO) test -count=1 -p 1 -run 'Fault' $(FAULT_PACKAGES)

## lint: gofmt, go vet and staticcheck (pinned in go.mod as a tool)
lint: fmt-check vet staticcheck

fmt-check:
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) tool staticcheck ./...

## demo: deploy examples/quickstart on this machine (embedded mode)
demo: build
	./$(BIN) deploy examples/quickstart
	@echo
	@echo "The site is in /tmp/tether-quickstart. Run 'make demo' again: nothing changes."
	@echo "Edit or delete a file there and run it once more: exactly that file is repaired."
	@echo "To see drift healed as it happens: ./$(BIN) deploy examples/quickstart --watch --drift-policy heal"

## bench: the benchmarks behind docs/performance.md
bench: build
	$(GO) test ./agent/engine -run '^$$' -bench . -benchtime 20x -count 3
	$(GO) test ./model/lang -run '^$$' -bench Compile1000 -benchmem -benchtime 20x
	$(GO) test ./model/lang -run '^$$' -bench CompileFleet -benchmem -benchtime 3x
	$(GO) test ./server/store/sqlite -run '^$$' -bench . -benchmem -benchtime 20x
	$(GO) test ./bus/amqp -run '^$$' -bench 'BusEvents|BareAMQP' -benchtime 20000x -count 3
	$(GO) test ./cli -run '^$$' -bench EmbeddedDeploy -benchtime 10x
	./$(BIN) bench deploy --files 1000 --runs 10
	$(GO) test ./server/store/postgres -run '^$$' -bench . -benchtime 1000x -count 3
	./$(BIN) bench ingest --events 20000
	./$(BIN) bench export --resources 100000 --change 1
	./$(BIN) bench converge --agents 1000 --resources 20
	./$(BIN) bench broker-auth --agents 1000
	$(GO) test ./cli/e2e -run '^$$' -bench Provision -benchtime 1x
	./$(BIN) bench ingest-tls --events 20000
	$(GO) test ./server -run '^$$' -bench BenchmarkAPIUnderSlowConnections -benchtime 10x -count 1
	$(GO) test ./agent/target/ssh -run '^$$' -bench Agentless -benchmem -count 3

## fuzz: run the fuzz targets for a while each
fuzz:
	$(GO) test ./model -run '^$$' -fuzz FuzzParseID -fuzztime 60s
	$(GO) test ./model/lang -run '^$$' -fuzz FuzzCompile -fuzztime 60s
	$(GO) test ./model/lang -run '^$$' -fuzz FuzzScanSource -fuzztime 60s
	$(GO) test ./server/webhook -run '^$$' -fuzz FuzzVerify -fuzztime 60s

clean:
	rm -rf bin dist examples/*/.tether
