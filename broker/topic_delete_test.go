package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/internal/wire"
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
	createTopicWithSub(t, ctx, adm, topic, "keep")
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

// TestDeleteTopicRacingProducersNeverOrphans deletes a topic again and
// again while producers keep writing to it (each reconnect may take the
// topic again, or create it anew). A delete either succeeds or fails with
// a retryable error, and no acknowledged message is ever left in a ledger
// that exists but that the topic's ledger list does not name.
func TestDeleteTopicRacingProducersNeverOrphans(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 1})
	ctx := context.Background()
	cli, adm := conn(t, rc.Addrs()[0])
	topic := "public/default/delete-loop"
	if _, err := adm.CreateTopic(ctx, &clientv1.CreateTopicRequest{Topic: topic}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[int64]int{} // ledger → acknowledged messages in it
	total := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 0; ; attempt++ {
				select {
				case <-stop:
					return
				default:
				}
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				st, err := cli.Produce(sctx)
				if err == nil {
					err = st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{Topic: topic, ProducerName: fmt.Sprintf("w%d-%d", w, attempt)}}})
				}
				if err == nil {
					_, err = st.Recv()
				}
				for seq := int64(0); err == nil; seq++ {
					select {
					case <-stop:
						cancel()
						return
					default:
					}
					body, size, _ := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Payload: []byte("x")}}}, clientv1.CompressionType_COMPRESSION_TYPE_NONE)
					if err = st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{SequenceId: seq, NumMessages: 1, UncompressedSize: size, Payload: body}}}); err != nil {
						break
					}
					var r *clientv1.ProduceResponse
					if r, err = st.Recv(); err != nil {
						break
					}
					if rc := r.GetReceipt(); rc.GetError() == nil && rc.GetMessageId() != nil {
						mu.Lock()
						acked[rc.GetMessageId().GetLedgerId()]++
						total++
						mu.Unlock()
					} else {
						break
					}
				}
				cancel()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	deleted, refused := 0, 0
	for range 15 {
		mu.Lock()
		before := total
		mu.Unlock()
		waitFor(t, "more acknowledged sends", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return total >= before+20
		})
		// Subscriptions make the delete longer, and the race more likely.
		for i := range 20 {
			_, _ = adm.CreateSubscription(ctx, &clientv1.CreateSubscriptionRequest{Topic: topic, Subscription: fmt.Sprintf("s%d", i)})
		}
		_, err := adm.DeleteTopic(ctx, &clientv1.DeleteTopicRequest{Topic: topic, Force: true})
		switch {
		case err == nil:
			deleted++
		case code(err) == clientv1.ErrorCode_ERROR_CODE_UNAVAILABLE || code(err) == clientv1.ErrorCode_ERROR_CODE_NOT_FOUND:
			refused++
			t.Logf("delete refused: %v", err)
		default:
			t.Fatalf("delete: %v (code %v)", err, code(err))
		}
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d acknowledged sends in %d ledgers; %d deletes succeeded, %d refused", total, len(acked), deleted, refused)
	listed, _ := storedLedgers(t, rc, topic)
	for l, n := range acked {
		_, err := rc.Regional.Get(ctx, ledger.LedgerKey(l), metadata.ReadOptions{})
		if errors.Is(err, metadata.ErrNotFound) {
			continue // deleted with its topic
		}
		if err != nil {
			t.Fatal(err)
		}
		if !listed[l] {
			t.Errorf("ledger %d holds %d acknowledged messages but no ledger list names it (orphaned)", l, n)
		}
	}
}
