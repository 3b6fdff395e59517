package broker_test

import (
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/region/regiontest"
)

// TestConsumerDeliveryBoundedInBytes: a consumer that grants 1 000 permits
// and never reads its stream holds at most its
// max_pending_delivery_bytes_per_consumer (plus one entry) in the broker
// (before: every entry its permits allowed was queued for it, bounded by
// count alone: 40 MiB here, and 50 GiB at the defaults with 5 MiB
// entries). Another subscription on another connection is not held up by
// it, and once the stuck consumer reads it gets every message; the budget
// then holds nothing.
func TestConsumerDeliveryBoundedInBytes(t *testing.T) {
	const limit = 4 << 20
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 1,
		Broker: func(_ int, c *broker.Config) {
			c.MaxPendingDeliveryBytesPerConsumer = limit
			c.MaxPendingDeliveryBytesPerConnection = 2 * limit
			c.MaxPendingDeliveryBytes = 4 * limit
		}})
	topic := "public/default/delivery-bytes"
	cli, _ := conn(t, rc.Addrs()[0])
	p, _ := openProducer(t, cli, topic, "p")
	const msgs = 40
	payload := randomPayload(1 << 20)
	for seq := int64(1); seq <= msgs; seq++ {
		if r := p.send(seq, payload); r.GetError() != nil {
			t.Fatalf("send %d: %v", seq, r.GetError())
		}
	}

	for _, typ := range []clientv1.SubscriptionType{clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED,
		clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE, clientv1.SubscriptionType_SUBSCRIPTION_TYPE_KEY_SHARED} {
		t.Run(typ.String(), func(t *testing.T) {
			checkStuckConsumerBounded(t, rc, cli, topic, typ, payload, msgs, limit)
		})
	}
}

// checkStuckConsumerBounded subscribes a consumer of type typ that does
// not read, checks the broker holds at most limit plus one entry for it
// while another subscription is served, then reads everything.
func checkStuckConsumerBounded(t *testing.T, rc *regiontest.Cluster, cli clientv1.MeridianClient, topic string, typ clientv1.SubscriptionType, payload []byte, msgs int, limit int64) {
	stuckCli, _ := conn(t, rc.Addrs()[0])
	stuck := subscribe(t, stuckCli, topic, "stuck-"+typ.String(), typ) // 1 000 permits, not read
	// The broker queues what fits, then stops: sample until it settles.
	var peak int64
	var settled int
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end) && settled < 20; {
		time.Sleep(50 * time.Millisecond)
		n := broker.PendingDeliveryBytesForTesting(rc.Broker(0))
		if n == peak && n > 0 {
			settled++
		} else {
			settled = 0
		}
		peak = max(peak, n)
	}
	t.Logf("a consumer that never reads: broker delivery budget peak %d bytes (limit %d)", peak, limit)
	if peak == 0 {
		t.Fatal("nothing was queued for the consumer")
	}
	if peak > limit+(1<<20)+2*256 {
		t.Fatalf("broker queued %d bytes for one consumer, limit %d plus one entry", peak, limit)
	}

	// Another subscription, on another connection, gets everything.
	other := subscribe(t, cli, topic, "other-"+typ.String(), clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED)
	for i := 0; i < msgs; i++ {
		id, _ := other.next()
		if e := other.ack(id, false); e != nil {
			t.Fatalf("ack: %v", e)
		}
	}

	// The stuck consumer reads now: every message arrives, none lost.
	seen := map[[2]int64]bool{}
	dups := 0
	for len(seen) < msgs {
		id, got := stuck.next()
		if got != string(payload) {
			t.Fatalf("message %v: payload differs", id)
		}
		k := [2]int64{id.GetLedgerId(), id.GetEntryId()}
		if seen[k] {
			dups++
		}
		seen[k] = true
		if e := stuck.ack(id, false); e != nil {
			t.Fatalf("ack: %v", e)
		}
	}
	t.Logf("the stuck consumer then received all %d messages, 0 lost, %d duplicates", msgs, dups)
	waitFor(t, "the delivery budget to drain", func() bool { return broker.PendingDeliveryBytesForTesting(rc.Broker(0)) == 0 })
}
