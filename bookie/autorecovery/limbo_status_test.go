package autorecovery_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/meridianmq/meridian/topology"
)

// TestStatusShowsInstanceAndLimbo: the status names each bookie's instance
// (from its metadata cookie) and, for a re-formatted bookie still in limbo,
// why: how many ledgers below its limbo bound still list its old instance,
// and whether a spare bookie exists to move them to (with exactly E
// bookies there is none and they are rebuilt on the new instance).
func TestStatusShowsInstanceAndLimbo(t *testing.T) {
	store := metadatatest.Start(t)
	ctx := context.Background()
	put := func(key string, v any) {
		t.Helper()
		val, _ := json.Marshal(v)
		if _, err := store.Put(ctx, key, val, metadata.AnyVersion, 0); err != nil {
			t.Fatal(err)
		}
	}
	var ens []topology.BookieInfo
	for _, id := range []string{"bookie-0", "bookie-1", "bookie-2"} {
		b := topology.BookieInfo{ID: id, Address: "127.0.0.1:1", Region: "local", Rack: "r"}
		ens = append(ens, b)
		put(topology.BookieRegistryPrefix+id, b)
		c := bookie.Cookie{Version: 1, BookieID: id, InstanceID: "instance-of-" + id}
		if id == "bookie-1" {
			c.LimboBelowLedger, c.LimboDecommissioned = 10, true
		}
		put(bookie.CookieKey(id), c)
	}
	put(autorecovery.DecommissionedPrefix+"bookie-1", map[string]any{"reason": "re-formatted (limbo)"})
	for _, id := range []int64{3, 5, 12} {
		put(ledger.LedgerKey(id), ledger.Metadata{ID: id, State: ledger.StateClosed, Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, LastEntry: 9,
			Segments: []ledger.Segment{{FirstEntry: 0, Ensemble: ens}}})
	}
	// Ledger 7's place was rebuilt on the new instance: it does not count.
	rebuiltEns := append([]topology.BookieInfo(nil), ens...)
	rebuiltEns[1].InstanceID = "instance-of-bookie-1"
	put(ledger.LedgerKey(7), ledger.Metadata{ID: 7, State: ledger.StateClosed, Ensemble: 3, WriteQuorum: 2, AckQuorum: 2, LastEntry: 9,
		Segments: []ledger.Segment{{FirstEntry: 0, Ensemble: rebuiltEns}}})
	check := func(wantSpare bool) {
		t.Helper()
		r, err := autorecovery.Status(ctx, store)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range r.Bookies {
			if b.InstanceID != "instance-of-"+b.ID {
				t.Errorf("%s: instance %q", b.ID, b.InstanceID)
			}
			if b.ID != "bookie-1" {
				if b.LimboBelowLedger != 0 || b.LimboReason != "" {
					t.Errorf("%s not in limbo, status says %d %q", b.ID, b.LimboBelowLedger, b.LimboReason)
				}
				continue
			}
			t.Logf("%s: limbo below %d: %s", b.ID, b.LimboBelowLedger, b.LimboReason)
			if b.LimboBelowLedger != 10 || !strings.Contains(b.LimboReason, "2 ledger(s) below 10 still list its old instance") {
				t.Errorf("limbo status %d %q, want below 10 with 2 ledgers listing it", b.LimboBelowLedger, b.LimboReason)
			}
			if got := strings.Contains(b.LimboReason, "no spare bookie"); got == wantSpare {
				t.Errorf("limbo reason %q: mentions no spare bookie = %v, want %v", b.LimboReason, got, !wantSpare)
			}
		}
	}
	check(false)
	// A fourth writable bookie is a spare: autorecovery can move them.
	put(topology.BookieRegistryPrefix+"bookie-3", topology.BookieInfo{ID: "bookie-3", Address: "127.0.0.1:1", Region: "local", Rack: "r"})
	put(bookie.CookieKey("bookie-3"), bookie.Cookie{Version: 1, BookieID: "bookie-3", InstanceID: "instance-of-bookie-3"})
	check(true)
}
