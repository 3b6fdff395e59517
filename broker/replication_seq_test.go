package broker_test

import (
	"context"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
)

// TestLocalOriginSeqSurvivesUnloadAndCrash: local entries are numbered 1,
// 2, 3, ... (stored with the entry) across rollovers, a graceful unload
// (the number is in the ledger list's snapshot) and a crash (the takeover
// scan finds it), with no gap and no reuse.
func TestLocalOriginSeqSurvivesUnloadAndCrash(t *testing.T) {
	cli, adm, rc := oneBroker(t, func(c *broker.Config) { c.RolloverEntries = 4 })
	ctx := context.Background()
	topic := "public/default/localseq"
	createTopicWithSub(t, ctx, adm, topic, "s")
	var ids []*clientv1.MessageId
	p, _ := openProducer(t, cli, topic, "p")
	for i := range int64(6) {
		ids = append(ids, p.sendOK(i))
	}
	if _, err := adm.UnloadTopic(ctx, &clientv1.UnloadTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	p2, _ := openProducer(t, cli, topic, "p2")
	for i := range int64(3) {
		ids = append(ids, p2.sendOK(i))
	}
	rc.Kill(0)
	rc.Restart(0)
	cli, _ = conn(t, rc.Addrs()[0])
	p3, _ := openProducer(t, cli, topic, "p3")
	for i := range int64(3) {
		ids = append(ids, p3.sendOK(i))
	}
	srv := rc.Broker(0)
	for i, id := range ids {
		_, md, err := broker.ShipFormForTesting(srv, topic, id.LedgerId, id.EntryId)
		if err != nil {
			t.Fatal(err)
		}
		if md.GetOriginSeq() != int64(i+1) {
			t.Fatalf("message %d at %d:%d has origin_seq %d, want %d", i, id.LedgerId, id.EntryId, md.GetOriginSeq(), i+1)
		}
	}
}
