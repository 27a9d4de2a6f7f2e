# roompub: build, demo and checks. Needs only Go (see go.mod) and bash.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

GO ?= go
# BIN is where build puts the commands; VERSION is what their --version
# prints, stamped into main.version: git describe of the checkout, or empty
# outside one (the commands then print the module version of the build
# info). Set them on the command line (make build VERSION=v1.2.3), not
# from the environment, where a VERSION of something else may linger.
BIN := bin
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null)
# Packages whose Fuzz targets `make test` (2s each, two at a time) and `make fuzz` (60s each) run.
FUZZ_PKGS := ./events ./validate ./checkpoint ./config ./room ./room/ingest ./room/reader ./witness ./tiles

.PHONY: build run image test unit integration fuzz-short fuzz bench fmt vet lint samples clean

## build: compile the commands into $(BIN)/, their --version stamped with $(VERSION)
build:
	$(GO) build -ldflags '-X main.version=$(VERSION)' -o $(BIN)/ ./cmd/...

## run: build, then verify the bundled samples and check every verdict
run: build
	testdata/samples/run.sh $(BIN)/publisher

## image: the OCI image, offline, as an OCI image layout in $(BIN)/image/ (static publisher and subscriber stamped with $(VERSION), CA certificates, user 65532; default command publisher serve on 0.0.0.0); prints its digest
# SOURCE_DATE_EPOCH (default: the last commit's time) is the image's
# created time and every file's, so the same commit builds the same digest.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
image:
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags '-X main.version=$(VERSION)' -o $(BIN)/image-bin/ ./cmd/publisher ./cmd/subscriber
	$(GO) build -o $(BIN)/ ./cmd/roompub-image
	rm -rf $(BIN)/image
	$(BIN)/roompub-image --out $(BIN)/image --publisher $(BIN)/image-bin/publisher --subscriber $(BIN)/image-bin/subscriber \
	    --image-version '$(or $(VERSION),devel)' --created-unix '$(SOURCE_DATE_EPOCH)'

## test: unit tests (race detector), integration tests, the fault suite, then 2s per fuzz target
test: unit integration test-faults fuzz-short

## unit: fast tests of the libraries and commands, with the race detector; then the allocation and big-file tests without it
unit:
	$(GO) test -race -count=1 ./events/... ./validate/... ./schemas/... ./config/... ./checkpoint/... ./witness/... ./tiles/... ./internal/... ./cmd/... ./test/layout/... ./test/crashfs/...
	$(GO) test -count=1 -run 'NoAllocs|BigFiles' ./events/... ./validate/... ./checkpoint/...

## integration: against real embedded nats-servers (JetStream on disk), the upstream verifier's rules, then the built binaries (and the v0.1.0 store, TestStoreV010)
integration:
	$(GO) test -race -count=1 ./room/...
	$(GO) test -race -count=1 ./test/upstream/...
	$(GO) test -count=1 -timeout 20m ./test/integration/...

## test-faults: injected faults (killed servers, step-downs, cut routes, full and read-only stores) on a real 3-server cluster and the embedded server; prints the counts (about 5 min)
.PHONY: test-faults
test-faults:
	$(GO) test -count=1 -v ./test/faults/...

## test-upgrade: the rolling upgrade from v0.1.0 alone (TestRollingUpgradeV010 of test/faults: serve of v0.1.0, built from git, beside this build's on one stream; both builds' audits); make test-faults runs it too (about 15 s, 30 s the first time)
.PHONY: test-upgrade
test-upgrade:
	$(GO) test -count=1 -v -run '^TestRollingUpgradeV010$$' ./test/faults/

## test-crash: the crash tests alone (test/crashfs, then TestCrash* and TestClusterCrash* of test/faults on a FUSE filesystem that drops what was not fsynced, TestClusterCrashAll only here) with CRASH_TRIALS trials of TestCrash (default 20; needs /dev/fuse and root, else they skip)
CRASH_TRIALS ?= 20
.PHONY: test-crash
test-crash:
	$(GO) test -count=1 -v ./test/crashfs/...
	ROOMPUB_CRASH_TRIALS=$(CRASH_TRIALS) ROOMPUB_CLUSTER_CRASH=1 $(GO) test -count=1 -v -run '^(TestCrash|TestClusterCrash)' ./test/faults/...

## capacity: what docs/operations.md's capacity model rests on: entries per second and CPU per 1,000 entries of each process, one partition then three, on the 3-server cluster (CAPACITY_LINES per room, default 20000; about 2 min; a quiet machine)
CAPACITY_LINES ?= 20000
.PHONY: capacity
capacity:
	ROOMPUB_CAPACITY=1 ROOMPUB_CAPACITY_LINES=$(CAPACITY_LINES) $(GO) test -count=1 -run '^TestCapacity$$' -timeout 20m -v ./test/faults/

## bench-records: BenchmarkMarkedRoom: one room of RECORDS records with markers (default 100000), one in INSTANCE_EVERY (default 10) on one instance: a restarted gate's first record, its heap, the server's heap per record, that instance's evidence
RECORDS ?= 100000
INSTANCE_EVERY ?= 10
.PHONY: bench-records
bench-records:
	ROOMPUB_BENCH_RECORDS=$(RECORDS) ROOMPUB_BENCH_INSTANCE_EVERY=$(INSTANCE_EVERY) $(GO) test -run '^$$' -bench '^BenchmarkMarkedRoom$$' -benchtime 1x -timeout 60m ./room/ingest/

## bench-checkpointer-start: BenchmarkCheckpointerStart: a checkpointer's start on CKPT_ENTRIES entries in 10 rooms (default 100000; 1000000 takes about 10 min, most of it filling the stream), reading every room vs resuming from the rooms' checkpoints: seconds to the end of the catch-up read, messages read
CKPT_ENTRIES ?= 100000
.PHONY: bench-checkpointer-start
bench-checkpointer-start:
	ROOMPUB_BENCH_ENTRIES=$(CKPT_ENTRIES) $(GO) test -run '^$$' -bench '^BenchmarkCheckpointerStart$$' -benchtime 3x -timeout 60m ./room/checkpointer/

## soak: SOAK (default 30m) on the 3-server cluster: shippers, records, followers, audits, a serve or nats-server restart every SOAK/12; bounded memory and goroutines; not part of make test
SOAK ?= 30m
SOAK_TIMEOUT ?= 50m
.PHONY: soak
soak:
	ROOMPUB_SOAK=$(SOAK) nice $(GO) test -count=1 -run '^TestSoak$$' -timeout $(SOAK_TIMEOUT) -v ./test/faults/

fuzz-short:
	@GO=$(GO) .ci/fuzz -fuzztime 2s $(FUZZ_PKGS)

## fuzz: every Fuzz target in $(FUZZ_PKGS), FUZZTIME each (default 60s)
FUZZTIME ?= 60s
fuzz:
	@GO=$(GO) .ci/fuzz -fuzztime $(FUZZTIME) $(FUZZ_PKGS)

## bench: per-entry Go benchmarks with allocations, one identity's request under another's flood, then cmd/roompub-bench: roompub against raw JetStream on one embedded server, same bytes, and the long chain, parallel and read rows again keyless and witnessed (3 litewitness processes) beside the attested ones (about 4 to 5 min on a quiet 2-core machine; BENCH_MODES=attested: about 2; BENCH_FLAGS adds flags)
BENCH_FLAGS ?=
BENCH_MODES ?= keyless,attested,witnessed
bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./events ./validate
	$(GO) test -run='^$$' -bench=BenchmarkJournalUnderFlood -benchtime=300x ./room/ingest
	@$(MAKE) --no-print-directory build
	$(BIN)/roompub-bench --publisher $(BIN)/publisher --subscriber $(BIN)/subscriber --modes $(BENCH_MODES) $(BENCH_FLAGS)

## bench-curves: the cost curves of docs/performance.md: roompub against raw JetStream by chain length (10 to 1,000,000 entries), concurrent chains (1 to 10,000) and rooms (1 to 10,000), CURVE_ROUNDS rounds per point (default 2; about 15 min on a quiet 2-core machine)
CURVE_ROUNDS ?= 2
.PHONY: bench-curves
bench-curves: build
	for c in chain-length chains rooms; do $(BIN)/roompub-bench --curve $$c --rounds $(CURVE_ROUNDS) --publisher $(BIN)/publisher --subscriber $(BIN)/subscriber $(BENCH_FLAGS); done

## bench-r3: the cost of the R3 cluster (docs/performance.md, "The R3 cluster on loopback"): the long chain and parallel rows on one embedded server (R1), then on 3 embedded nats-servers clustered on loopback, both write streams at 3 replicas (--replicas 3); roompub against raw JetStream on the same bytes in each run, stores in temporary directories (R3_FLAGS adds flags to both runs; about 3 min on a quiet 2-core machine)
R3_FLAGS ?=
.PHONY: bench-r3
bench-r3: build
	d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	$(BIN)/roompub-bench --only long --only parallel --store-dir "$$d" $(R3_FLAGS); \
	$(BIN)/roompub-bench --replicas 3 $(R3_FLAGS)

## bench-check: the side-by-side run only; exit 1 when a ratio is below its floor or audit's memory is over its caps (128 MiB RSS, 64 MiB live heap)
.PHONY: bench-check bench-quick
bench-check: build
	$(BIN)/roompub-bench --check --publisher $(BIN)/publisher --subscriber $(BIN)/subscriber $(BENCH_FLAGS)

## bench-quick: the side-by-side run at small sizes (seconds; what the integration test runs)
bench-quick: build
	$(BIN)/roompub-bench --quick --publisher $(BIN)/publisher --subscriber $(BIN)/subscriber $(BENCH_FLAGS)

## fmt: rewrite Go files in gofmt style
fmt:
	gofmt -l -w .

## vet: go vet, including the generators under testdata
vet:
	$(GO) vet ./... ./testdata/samples/gen ./testdata/store-v0.1.0/gen

## lint: fail if any Go file is not gofmt-clean, then vet
lint:
	@files=$$(gofmt -l .); if [[ -n $$files ]]; then echo "not gofmt-clean:"; echo "$$files"; exit 1; fi
	@$(MAKE) --no-print-directory vet

## samples: regenerate testdata/samples from testdata/samples/gen
samples:
	$(GO) run ./testdata/samples/gen -out testdata/samples

clean:
	rm -rf $(BIN)/
