package region

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/region/regiontest"
)

// TestTopicLoadsWithBookieOfLastSegmentGone kills the owner of a topic
// written at E3/Qw3/Qa3 on 4 bookies and, with it, one bookie of its open
// ledger's last segment, for good. Recovery must re-add the ledger's tail
// (the bookies only know a last-add-confirmed below the last entry) and
// cannot reach Qa=3 on that ensemble: it must move the tail to the spare
// bookie. The other broker must serve the topic within 30 s, and every
// acknowledged message must be there.
func TestTopicLoadsWithBookieOfLastSegmentGone(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 4, Broker: func(_ int, c *broker.Config) {
		c.DefaultEnsembleSize, c.DefaultWriteQuorum, c.DefaultAckQuorum = 3, 3, 3
	}})
	addrs := rc.Addrs()
	topic := "public/default/recovery-dead-bookie"
	owner := regiontest.LookupOwner(t, addrs[0], topic, func(string) bool { return true })
	oi := 0
	if owner == addrs[1] {
		oi = 1
	}
	acked := produce(t, dial(t, owner), topic, 0, 200)

	// The open ledger and its last segment.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	_, adm := dialAdmin(t, owner)
	st, err := adm.GetTopicInternalStats(ctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	open := st.Ledgers[len(st.Ledgers)-1]
	if open.Closed {
		t.Fatalf("last ledger %d already closed", open.LedgerId)
	}
	kv, err := rc.Regional.Get(ctx, ledger.LedgerKey(open.LedgerId), metadata.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var md ledger.Metadata
	if err := json.Unmarshal(kv.Value, &md); err != nil {
		t.Fatal(err)
	}
	victim := md.Segments[len(md.Segments)-1].Ensemble[0].ID
	vi := -1
	for i := range rc.Bookies.N() {
		if rc.Bookies.ID(i) == victim {
			vi = i
		}
	}
	rc.Kill(oi)
	rc.Bookies.Kill(vi)
	start := time.Now()
	t.Logf("killed broker %d and bookie %s of ledger %d's last segment %v", oi, victim, open.LedgerId, md.Segments[len(md.Segments)-1].Ensemble)

	other := addrs[1-oi]
	regiontest.LookupOwner(t, other, topic, func(o string) bool { return o == other })
	_, oadm := dialAdmin(t, other)
	var loaded time.Duration
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := oadm.GetTopicInternalStats(cctx, &clientv1.GetTopicInternalStatsRequest{Topic: topic})
		ccancel()
		if err == nil {
			loaded = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic not loaded on the other broker after 60 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("topic loaded on the other broker %v after the kills", loaded)
	if loaded > 30*time.Second {
		t.Errorf("topic took %v to load, want <= 30 s", loaded)
	}
	kv, err = rc.Regional.Get(ctx, ledger.LedgerKey(open.LedgerId), metadata.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var rmd ledger.Metadata
	if err := json.Unmarshal(kv.Value, &rmd); err != nil {
		t.Fatal(err)
	}
	if rmd.State != ledger.StateClosed {
		t.Fatalf("ledger %d is %s after the topic loaded", open.LedgerId, rmd.State)
	}
	for _, b := range rmd.Segments[len(rmd.Segments)-1].Ensemble {
		if b.ID == victim {
			t.Errorf("recovered ledger's last segment still names the dead bookie %s: %+v", victim, rmd.Segments)
		}
	}
	acked = append(acked, produce(t, dial(t, other), topic, 1000, 20)...)
	got := consume(t, dial(t, other), topic, "s", 220)
	seen := map[string]int{}
	for _, p := range got {
		seen[p]++
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	lost := 0
	for i := range 200 {
		if seen[fmt.Sprintf("m%d", i)] == 0 {
			lost++
		}
	}
	for i := range 20 {
		if seen[fmt.Sprintf("m%d", 1000+i)] == 0 {
			lost++
		}
	}
	t.Logf("acked %d, received %d, %d distinct, %d duplicates, %d lost", len(acked), len(got), len(seen), dups, lost)
	if lost > 0 {
		t.Fatalf("LOST %d acknowledged messages", lost)
	}
}
