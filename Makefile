# Meridian build, test and lint targets. Every tool comes from the Go module
# proxy (pinned in go.mod as tool dependencies) except protoc, which comes
# from Debian's protobuf-compiler package.

GO        ?= go
PKGS      := ./...
# Core packages run under the race detector in CI.
RACE_PKGS := ./metadata/... ./bookie/... ./topology/... ./broker/... ./client/... ./region/... ./internal/... ./replicator/... ./chaos/...
TEST_TIMEOUT ?= 10m

CHAOS_SEEDS ?= 1 2 3
CHAOS_DURATION ?= 5m
CHAOS_SCENARIOS ?= zombie-owner wiped-bookie region-partition remote-rejects ack-holes-crash power-loss power-loss-quorum clock-jump operator-actions

.PHONY: all build test test-long chaos fuzz test-short test-stress lint proto proto-check bench bench-cluster bench-metadata bench-storage bench-compare bench-geo bench-security clean

all: build

build:
	$(GO) build $(PKGS)

## test: everything CI runs — lint, generated-code check, race tests of the core, the rest plainly.
test: lint proto-check
	$(GO) test -race -timeout $(TEST_TIMEOUT) $(RACE_PKGS)
	$(GO) test -timeout $(TEST_TIMEOUT) -skip 'TestChaosSmoke|TestChaosCatchesAckBeforeSync' $$($(GO) list ./... | grep -vE '/(metadata|bookie|topology|broker|client|region|internal|replicator|chaos)(/|$$)')
	$(GO) test -timeout 20m -count=1 -run 'TestChaosSmoke|TestChaosCatchesAckBeforeSync' ./cmd/meridian/

## test-long: the long variants (kill -9 rounds, randomized model, 10 linearizability rounds, ledger soak, a region rebuilt under the same name); ~10 minutes.
test-long:
	MERIDIAN_LONG=1 MERIDIAN_LONG_TESTS=1 LEDGER_SOAK_ROUNDS=8 $(GO) test -timeout 30m -count=1 ./metadata/ ./bookie/ ./bookie/ledger/
	MERIDIAN_LONG=1 $(GO) test -timeout 10m -count=1 -run 'TestDevCluster|TestDevRegionRebuild' ./cmd/meridian/
	MERIDIAN_LONG=1 $(GO) test -race -timeout 10m -count=1 -run 'TestReplicatedSubscriptionMoveWAN|TestClientFailoverLong' ./region/
	MERIDIAN_LONG=1 $(GO) test -timeout 30m -count=1 -run 'TestDrillFailoverLong' ./cmd/meridian/
	MERIDIAN_LONG=1 $(GO) test -race -timeout 10m -count=1 -run 'TestDeadLetterAcrossBrokerKill' ./client/

## test-stress: the race suite -count=3 under two busy loops hogging the CPUs (.ci/stress); see docs/TESTING.md.
test-stress:
	RACE_PKGS="$(RACE_PKGS)" .ci/stress

FUZZTIME ?= 60s
FUZZPKGS ?= ./...

## fuzz: every Fuzz target for FUZZTIME each (make fuzz FUZZTIME=60s); plain `make test` runs only the
## seeds in testdata/fuzz. A crash is written to the package's testdata/fuzz/FuzzXxx/ by go test: commit it as a seed.
fuzz:
	@set -e; for pkg in $$($(GO) list $(FUZZPKGS)); do \
	  for fz in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$fz ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$fz$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg; \
	  done; \
	done

test-short:
	$(GO) test -short -timeout $(TEST_TIMEOUT) $(PKGS)

lint:
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$bad" ]; then echo "gofmt needed: $$bad"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)

PROTOS := $(shell find api -name '*.proto' 2>/dev/null)

## proto: regenerate api/**/*.pb.go with Debian's protoc and the pinned plugins.
proto:
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler"; exit 1; }
	$(GO) build -o .bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	$(GO) build -o .bin/protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc
	protoc --plugin=protoc-gen-go=.bin/protoc-gen-go --plugin=protoc-gen-go-grpc=.bin/protoc-gen-go-grpc \
	  --go_out=. --go_opt=paths=source_relative \
	  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
	  -I . $(PROTOS)

## proto-check: fail if the committed generated code differs from what `make proto` makes.
proto-check:
	@if ! command -v protoc >/dev/null; then echo "proto-check skipped: protoc not installed"; exit 0; fi; \
	  tmp=$$(mktemp -d); cp -r api $$tmp/before; \
	  $(MAKE) --no-print-directory proto >/dev/null; \
	  if ! diff -r $$tmp/before api >/dev/null; then echo "generated protobuf code is stale: run make proto and commit"; diff -r $$tmp/before api | head -20; rm -rf $$tmp; exit 1; fi; \
	  rm -rf $$tmp; echo "generated protobuf code is current"

RESULTS ?= bench/results.json

## bench: every benchmark recorded in docs/BENCHMARKS.md (about 3 minutes on 2 cores); rewrites each
## target's records in $(RESULTS) (bench/record: one record per figure with command, date, machine, load).
bench:
	@for t in bench-metadata bench-storage bench-compare; do \
	  out=$$(mktemp); $(MAKE) --no-print-directory $$t >$$out 2>&1; rc=$$?; cat $$out; \
	  if [ $$rc -ne 0 ]; then rm -f $$out; exit $$rc; fi; \
	  $(GO) run ./bench/record -command "make $$t" -in $$out -o $(RESULTS); rc=$$?; rm -f $$out; \
	  [ $$rc -eq 0 ] || exit $$rc; \
	done

## bench-cluster: a Meridian region of processes (1 meta, 3 bookies, 2 brokers, E3/Qw2/Qa2) against a 3-node
## JetStream cluster (R3, sync_interval always and default), max and half of Meridian's max (~3 minutes);
## records its figures in $(RESULTS).
bench-cluster:
	@out=$$(mktemp); BENCH_JSON=$$out bench/cluster-vs-jetstream.sh; rc=$$?; \
	if [ $$rc -eq 0 ]; then $(GO) run ./bench/record -command "make bench-cluster" -prefix cluster -in $$out -o $(RESULTS); rc=$$?; fi; \
	rm -f $$out; exit $$rc

bench-metadata:
	$(GO) test -run '^$$' -bench Store -benchtime 2000x ./metadata/

## bench-storage: bookie and ledger adds beside the raw disk's fdatasync rate and bandwidth.
bench-storage:
	$(GO) test -p 1 -run '^$$' -bench 'BenchmarkBookie|BenchmarkLedger' -benchtime 2s ./bookie/ ./bookie/ledger/

## bench-compare: raw disk vs Meridian standalone vs embedded NATS JetStream, one run.
bench-compare:
	$(GO) test -run '^$$' -bench BenchmarkCompare -benchtime=1x -timeout 10m ./region/

## bench-security: publish throughput and p99 with TLS and tokens against plaintext, two standalones side by side (~2 minutes a round).
bench-security:
	bench/security.sh 3

## bench-geo: replication lag p50/p99 (1k and 10k msg/s of 1 KiB, 0 and 40 ms one way), catch-up after a
## 60 s cut and reconnect after the heal, between two in-process regions behind the link proxy (~8 minutes).
bench-geo:
	@echo "== the raw disk in the same run (4 KiB write + fdatasync)"
	@$(GO) test -run '^$$' -bench 'BenchmarkCompare/disk/fdatasync-4KiB' -benchtime=1x ./region/ | grep -E 'Benchmark|^ok'
	@for lat in 0ms 40ms; do for rate in 1000 10000; do \
	  echo "== $$rate msg/s, one-way latency $$lat"; \
	  GEO_BENCH=1 GEO_BENCH_RATE=$$rate GEO_BENCH_LATENCY=$$lat GEO_BENCH_SECONDS=20 GEO_BENCH_CUT=60s \
	    $(GO) test -count=1 -timeout 15m -run 'TestGeoReplicationLagLong$$' -v ./region/ | grep -E 'geo_bench_test|^(ok|FAIL|---)' || exit 1; \
	done; done

## chaos: the long randomized chaos suite: `meridian chaos run --dev a,b,c` for each of CHAOS_SEEDS, every fault
## family but operator, CHAOS_DURATION of faults each, then every named scenario on --dev a,b, operator-actions included
## (reports in chaos-reports/; one scenario alone: make chaos CHAOS_SEEDS= CHAOS_SCENARIOS=operator-actions);
## runs them all and fails if any verdict was invalid (or a run could not complete).
chaos:
	$(GO) build -o .bin/meridian ./cmd/meridian
	@fail=0; \
	for seed in $(CHAOS_SEEDS); do \
	  echo "== chaos seed $$seed"; \
	  .bin/meridian chaos run --dev a,b,c --seed $$seed --duration $(CHAOS_DURATION) --rate 1000 \
	    --report chaos-reports/seed-$$seed || fail=1; \
	done; \
	for sc in $(CHAOS_SCENARIOS); do \
	  echo "== chaos scenario $$sc"; \
	  .bin/meridian chaos run --dev a,b --scenario $$sc --rate 1000 --report chaos-reports/$$sc || fail=1; \
	done; \
	exit $$fail

clean:
	rm -rf .bin
