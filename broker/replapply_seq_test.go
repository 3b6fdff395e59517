package broker_test

import (
	"context"
	"fmt"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/wire"
)

// TestOriginSeqAcrossRolloverAndRetention: origin_seq numbers a topic's
// entries 1, 2, 3, ... across ledger rollovers, keeps every retained
// entry's number when retention deletes the head ledgers (TrimmedEntries)
// and after an unload, and continues after them; shipForm fills the origin
// in and leaves the payload as stored.
func TestOriginSeqAcrossRolloverAndRetention(t *testing.T) {
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { c.RolloverEntries = 5 })
	ctx := context.Background()
	topic := "public/default/originseq"
	createTopicWithSub(t, ctx, adm, topic, "s")
	p, _ := openProducer(t, cli, topic, "p")
	var ids []*clientv1.MessageId
	for i := range int64(23) {
		ids = append(ids, p.sendOK(i))
	}
	srv := rc.Broker(0)
	check := func(from int) {
		t.Helper()
		for i := from; i < len(ids); i++ {
			seq, _, ok := broker.OriginSeqForTesting(srv, topic, ids[i].LedgerId, ids[i].EntryId)
			if !ok || seq != int64(i+1) {
				t.Fatalf("message %d at %d:%d: origin_seq %d ok=%v, want %d", i, ids[i].LedgerId, ids[i].EntryId, seq, ok, i+1)
			}
		}
	}
	check(0)
	if ids[0].LedgerId == ids[22].LedgerId {
		t.Fatalf("no rollover: every message in ledger %d", ids[0].LedgerId)
	}
	// Consume and acknowledge the first 15: retention deletes the 3 ledgers
	// they fill.
	c := subscribe(t, cli, topic, "s", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	var last *clientv1.MessageId
	for range 15 {
		last, _ = c.next()
	}
	if e := c.ack(last, true); e != nil {
		t.Fatal(e)
	}
	var trimmed int64
	waitFor(t, "retention to delete the consumed ledgers", func() bool {
		_, trimmed, _ = broker.OriginSeqForTesting(srv, topic, ids[22].LedgerId, ids[22].EntryId)
		return trimmed >= 15
	})
	if _, _, ok := broker.OriginSeqForTesting(srv, topic, ids[0].LedgerId, ids[0].EntryId); ok {
		t.Fatalf("origin_seq of an entry in a deleted ledger reported")
	}
	check(15)
	// The numbering survives an unload (TrimmedEntries is in the ledger
	// list) and continues with new entries.
	if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	p2, _ := openProducer(t, cli, topic, "p2")
	for i := range int64(4) {
		ids = append(ids, p2.sendOK(i))
	}
	check(15)
	_, trimmed2, _ := broker.OriginSeqForTesting(srv, topic, ids[26].LedgerId, ids[26].EntryId)
	if trimmed2 != trimmed {
		t.Fatalf("TrimmedEntries %d after unload, was %d", trimmed2, trimmed)
	}
	t.Logf("trimmed %d entries; last origin_seq %d", trimmed, len(ids))

	// shipForm: origin filled in, payload as stored.
	data, md, err := broker.ShipFormForTesting(srv, topic, ids[20].LedgerId, ids[20].EntryId)
	if err != nil {
		t.Fatal(err)
	}
	if md.GetOriginRegion() != "test" || md.GetOriginSeq() != 21 || md.GetOriginLedgerId() != ids[20].LedgerId ||
		md.GetOriginEntryId() != ids[20].EntryId || md.GetReplicated() {
		t.Fatalf("ship form metadata %v", md)
	}
	md2, payload, err := wire.DecodeEntry(data)
	if err != nil || md2.GetOriginSeq() != 21 {
		t.Fatalf("ship form bytes: %v %v", md2, err)
	}
	b, err := wire.DecodeBatch(md2, payload)
	if err != nil || string(b.Messages[0].Payload) != fmt.Sprintf("m%d", 20) {
		t.Fatalf("ship form payload: %v %v", b, err)
	}
}
