package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/region/regiontest"
)

// storedLedgers returns the ledger IDs of the topic's stored ledger list
// (nil, false when the list does not exist).
func storedLedgers(t *testing.T, rc *regiontest.Cluster, topic string) (map[int64]bool, bool) {
	t.Helper()
	kv, err := rc.Regional.Get(context.Background(), "managed-ledgers/"+topic, metadata.ReadOptions{})
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Ledgers []struct {
			ID int64 `json:"id"`
		} `json:"ledgers"`
	}
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		t.Fatal(err)
	}
	out := map[int64]bool{}
	for _, l := range rec.Ledgers {
		out[l.ID] = true
	}
	return out, true
}

// TestDeleteTopicRacedByProducerFailsCleanly: a producer reclaims the topic
// between the delete's unload and its deletion. The delete must fail with a
// retryable error and delete nothing: every acknowledged message stays in a
// listed, readable ledger. Without the race, the retried delete succeeds.
func TestDeleteTopicRacedByProducerFailsCleanly(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 1})
	ctx := context.Background()
	cli, adm := conn(t, rc.Addrs()[0])
	topic := "public/default/delete-race"
	if _, err := adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: "keep",
		InitialPosition: clientv1.InitialPosition_INITIAL_POSITION_EARLIEST}); err != nil {
		t.Fatal(err)
	}
	acked := map[string]*clientv1.MessageId{}
	p, _ := openProducer(t, cli, topic, "before")
	for i := range int64(10) {
		acked[fmt.Sprintf("m%d", i)] = p.sendOK(i)
	}
	var mu sync.Mutex // the hook runs in the broker's goroutine
	raced := 0
	broker.SetBeforeTopicDeleteForTesting(rc.Broker(0), func() {
		mu.Lock()
		defer mu.Unlock()
		for i := range 5 {
			name := fmt.Sprintf("reclaimer-%d", i)
			_, r, err := rawSend(ctx, cli, topic, name, 0)
			if err != nil || r.GetError() != nil || r.GetMessageId() == nil {
				t.Errorf("reclaiming producer %s: %v %v", name, err, r)
				continue
			}
			acked[name] = r.GetMessageId()
			raced++
		}
	})
	_, err := adm.DeleteTopic(ctx, &clientv1.DeleteTopicRequest{Topic: topic, Force: true})
	broker.SetBeforeTopicDeleteForTesting(rc.Broker(0), nil)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("delete raced by %d acknowledged sends: %v", raced, err)

	// No acknowledged message is orphaned: its ledger is listed...
	listed, ok := storedLedgers(t, rc, topic)
	for name, id := range acked {
		if !ok || !listed[id.GetLedgerId()] {
			t.Fatalf("acknowledged message %s at %d:%d is orphaned: ledger not in the topic's ledger list (list exists: %v)", name, id.GetLedgerId(), id.GetEntryId(), ok)
		}
	}
	if err == nil {
		t.Fatal("delete succeeded although a producer reclaimed the topic")
	}
	if code(err) != clientv1.ErrorCode_ERROR_CODE_UNAVAILABLE || !strings.Contains(err.Error(), "retry") {
		t.Fatalf("raced delete: %v (code %v), want UNAVAILABLE saying to retry", err, code(err))
	}
	// ...and readable, by the subscription that still exists.
	c := subscribe(t, cli, topic, "keep", clientv1.SubscriptionType_SUBSCRIPTION_TYPE_EXCLUSIVE)
	seen := map[string]bool{}
	for len(seen) < len(acked) {
		_, payload := c.next()
		if _, ok := acked[payload]; !ok {
			t.Fatalf("unexpected message %q", payload)
		}
		seen[payload] = true
	}
	c.cancel()

	// Without a race the retried delete removes everything.
	waitFor(t, "the retried delete", func() bool {
		_, err := adm.DeleteTopic(ctx, &clientv1.DeleteTopicRequest{Topic: topic, Force: true})
		if err != nil {
			t.Logf("retry delete: %v", err)
		}
		return err == nil
	})
	if _, ok := storedLedgers(t, rc, topic); ok {
		t.Fatal("ledger list still stored after the delete")
	}
	res, err := rc.Regional.List(ctx, "cursors/"+topic+"/", metadata.Page{}, metadata.ReadOptions{})
	if err != nil || len(res.KVs) != 0 {
		t.Fatalf("cursors left after the delete: %v %v", res.KVs, err)
	}
}
