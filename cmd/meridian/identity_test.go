package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
)

// Package bookie cannot import autorecovery or ledger (they import it), so
// it repeats a few of their keys; they must agree.
func TestBookieKeysMatchTheirOwners(t *testing.T) {
	if bookie.DecommissionKeyPrefix != autorecovery.DecommissionedPrefix {
		t.Fatalf("bookie.DecommissionKeyPrefix %q != autorecovery.DecommissionedPrefix %q", bookie.DecommissionKeyPrefix, autorecovery.DecommissionedPrefix)
	}
	prefix, counter := bookie.LedgerKeys()
	if prefix != ledger.LedgerKeyPrefix || counter != ledger.LedgerIDCounterKey {
		t.Fatalf("bookie.LedgerKeys() = %q %q, ledger has %q %q", prefix, counter, ledger.LedgerKeyPrefix, ledger.LedgerIDCounterKey)
	}
}

// ackedLines parses the complete --output json lines of a producer that
// may have been stopped mid-line.
func ackedLines(s string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			continue
		}
		if id, ok := m["id"].(string); ok && id != "-1:-1:-1" {
			out[id] = true
		}
	}
	return out
}

// TestWipedBookieProcessLevel is issue 7's wiped-bookie scenario with real
// processes, E3/Qw2/Qa2 on three bookies and two brokers: a producer
// writes through broker A, A is killed mid-stream (its ledger stays open),
// one bookie of the open ledger loses its disk. Restarted as is, the
// bookie refuses to start; `meridian bookie format --force` makes it a new
// instance in limbo. While a second bookie of the ledger is down, broker B
// tries to recover the topic (the wiped bookie must not let it close the
// ledger short); once it is back, every acknowledged message is consumed
// through B.
func TestWipedBookieProcessLevel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts six processes (-short)")
	}
	dir := t.TempDir()
	cliBinary(t)

	metaGRPC := startMetaProc(t, dir)

	type bk struct {
		id, http, cfg string
		p             *proc
	}
	var bookies []*bk
	byID := map[string]*bk{}
	for i := range 3 {
		b := &bk{id: fmt.Sprintf("bookie-%d", i+1), http: cliFreeAddr(t)}
		grpcAddr := cliFreeAddr(t)
		b.cfg = bookieProcConfig(t, dir, b.id, grpcAddr, b.http, fmt.Sprintf("rack-%d", i), metaGRPC, func(m yamlMap) {
			m["session_ttl"] = "3s"
			delete(m, "gossip")
		})
		b.p = startProc(t, b.id, "bookie", "--config", b.cfg)
		bookies = append(bookies, b)
		byID[b.id] = b
	}
	for _, b := range bookies {
		waitHTTP(t, b.p, "http://"+b.http+"/readyz", 90*time.Second)
	}

	type br struct {
		grpc string
		p    *proc
	}
	startBroker := func(name string) *br {
		b := &br{grpc: cliFreeAddr(t)}
		httpAddr := cliFreeAddr(t)
		cfg := brokerProcConfig(t, dir, name, b.grpc, httpAddr, metaGRPC, func(x yamlMap) {
			x["default_ensemble_size"], x["default_write_quorum"], x["default_ack_quorum"] = 3, 2, 2
			x["session_ttl"] = "3s"
			x["retention_interval"] = "1h" // the topic has no subscription while producing
		})
		b.p = startProc(t, name, "broker", "--config", cfg)
		waitHTTP(t, b.p, "http://"+httpAddr+"/readyz", 90*time.Second)
		return b
	}
	brokerA, brokerB := startBroker("broker-a"), startBroker("broker-b")

	// Produce through A only, then kill A mid-stream.
	const topic = "public/default/wiped"
	prod := startProc(t, "producer", "produce", "--url", brokerA.grpc, "--topic", topic, "--count", "1000000",
		"--rate", "3000", "--size", "100", "--output", "json", "--send-timeout", "5s")
	waitFor(t, "2000 acknowledged messages", 60*time.Second, func() (bool, string) {
		n := len(ackedLines(prod.log.String()))
		return n >= 2000, fmt.Sprint(n, " acked")
	})
	brokerA.p.kill()
	prod.kill()
	acked := ackedLines(prod.log.String())
	t.Logf("broker A killed with %d messages acknowledged", len(acked))

	// The topic's open ledger and a bookie of its last segment.
	store, err := metadata.NewClient(context.Background(), []string{metaGRPC}, "local")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	res, err := store.List(context.Background(), ledger.LedgerKeyPrefix, metadata.Page{}, metadata.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var open *ledger.Metadata
	for _, kv := range res.KVs {
		var md ledger.Metadata
		if err := json.Unmarshal(kv.Value, &md); err != nil {
			t.Fatal(err)
		}
		if md.State == ledger.StateOpen {
			open = &md
		}
	}
	if open == nil {
		t.Fatal("no open ledger after killing the broker")
	}
	ens := open.Segments[len(open.Segments)-1].Ensemble
	victim, down := byID[ens[0].ID], byID[ens[1].ID]
	t.Logf("open ledger %d; wiping %s, then stopping %s while broker B recovers", open.ID, victim.id, down.id)

	// Lose its disk. Restarting as is must fail, naming the fix.
	victim.p.kill()
	for _, d := range []string{"journal", "ledgers"} {
		if err := os.RemoveAll(filepath.Join(dir, victim.id, d)); err != nil {
			t.Fatal(err)
		}
	}
	r := runCLI(t, "", "bookie", "--config", victim.cfg)
	if r.code == 0 || !strings.Contains(r.stderr, "meridian bookie format --force") {
		t.Fatalf("wiped bookie without format: exit %d, stderr %s", r.code, tail(r.stderr, 2000))
	}
	t.Logf("wiped bookie refused to start: %s", tail(strings.TrimSpace(r.stderr), 600))
	r = runCLI(t, "", "bookie", "format", "--config", victim.cfg)
	if r.code == 0 {
		t.Fatalf("format without --force on a bookie known to metadata succeeded: %s", r.stdout)
	}
	r = runCLI(t, "", "bookie", "format", "--force", "--config", victim.cfg)
	if r.code != 0 || !strings.Contains(r.stdout, "limbo") {
		t.Fatalf("format --force: exit %d, stdout %q, stderr %s", r.code, r.stdout, tail(r.stderr, 2000))
	}
	t.Logf("format: %s", strings.TrimSpace(r.stdout))
	victim.p = startProc(t, victim.id, "bookie", "--config", victim.cfg)
	waitHTTP(t, victim.p, "http://"+victim.http+"/readyz", 90*time.Second)
	if m := httpGet("http://" + victim.http + "/metrics"); !strings.Contains(m, "\nmeridian_bookie_limbo 1") {
		t.Fatal("re-formatted bookie is not in limbo")
	}

	// The other replica of a third of the entries goes down: for those the
	// wiped bookie is the only reachable replica, and it must not make
	// broker B's recovery close the ledger before them. A consumer makes B
	// try to load the topic meanwhile (it may get nothing: the ledger stays
	// in recovery).
	down.p.kill()
	maxAcked := int64(-1) // the last acknowledged entry of the open ledger
	for id := range acked {
		var l, e, b int64
		if _, err := fmt.Sscanf(id, "%d:%d:%d", &l, &e, &b); err == nil && l == open.ID {
			maxAcked = max(maxAcked, e)
		}
	}
	probe := startProc(t, "probe", "consume", "--url", brokerB.grpc, "--topic", topic, "--subscription", "probe",
		"--from", "earliest", "--output", "json")
	ledgerState := func() (*ledger.Metadata, string) {
		kv, err := store.Get(context.Background(), ledger.LedgerKey(open.ID), metadata.ReadOptions{})
		if err != nil {
			return nil, err.Error()
		}
		var md ledger.Metadata
		if err := json.Unmarshal(kv.Value, &md); err != nil {
			t.Fatal(err)
		}
		return &md, fmt.Sprintf("state %s last entry %d", md.State, md.LastEntry)
	}
	waitFor(t, "broker B starts recovering the ledger", 90*time.Second, func() (bool, string) {
		md, st := ledgerState()
		return md != nil && md.State != ledger.StateOpen, st
	})
	// Watch B's recovery attempts for a while: it must not close the
	// ledger before the last acknowledged entry.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if md, st := ledgerState(); md != nil && md.State == ledger.StateClosed && md.LastEntry < maxAcked {
			t.Fatalf("LOST: ledger %d closed at entry %d while %s was down, entry %d was acknowledged (%s)", open.ID, md.LastEntry, down.id, maxAcked, st)
		}
	}
	_, st := ledgerState()
	t.Logf("while %s was down: ledger %d %s (last acknowledged entry %d)", down.id, open.ID, st, maxAcked)
	probe.kill()
	down.p = startProc(t, down.id, "bookie", "--config", down.cfg)
	waitHTTP(t, down.p, "http://"+down.http+"/readyz", 90*time.Second)

	// Recover through broker B and read everything acknowledged.
	var seen map[string]int
	waitFor(t, "consume every acknowledged message through broker B", 180*time.Second, func() (bool, string) {
		r := runCLI(t, "", "consume", "--url", brokerB.grpc, "--topic", topic, "--subscription", "check",
			"--from", "earliest", "--count", fmt.Sprint(len(acked)), "--idle", "30s", "--output", "json")
		if r.code != 0 {
			return false, fmt.Sprintf("consume exit %d: %s", r.code, tail(r.stderr, 1000))
		}
		seen = map[string]int{}
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil {
				seen[fmt.Sprint(m["id"])]++
			}
		}
		return true, ""
	})
	lost, dups := 0, 0
	for id := range acked {
		if seen[id] == 0 {
			lost++
			if lost <= 5 {
				t.Errorf("LOST: acknowledged message %s not consumed", id)
			}
		}
	}
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("%d acknowledged, %d consumed, %d lost, %d duplicates", len(acked), len(seen), lost, dups)
	if lost > 0 {
		t.Fatalf("%d acknowledged messages lost", lost)
	}
}
