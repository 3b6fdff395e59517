package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
)

// TestE2EReconnectAcrossTopicUnloads unloads the topic repeatedly while a
// producer and a consumer run: both must look the topic up again and
// reconnect, the producer resending what was unacknowledged. Every
// acknowledged message must be received; duplicates are counted.
func TestE2EReconnectAcrossTopicUnloads(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	const topic = "public/default/moving"
	ctx := tctx(t, 120*time.Second)
	admin, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest, ReceiverQueueSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 10, BatchingMaxDelay: 2 * time.Millisecond,
		MaxPendingMessages: 200, BlockIfQueueFull: true, SendTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	acked := map[string]client.MessageID{}
	var sendErrs []error
	const total = 3000
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for i := range total {
			payload := fmt.Sprintf("m%d", i)
			p.SendAsync(ctx, &client.Message{Payload: []byte(payload)}, func(id client.MessageID, _ *client.Message, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					sendErrs = append(sendErrs, err)
					return
				}
				acked[payload] = id
			})
			if i%10 == 0 { // spread the sends over the unloads (>= 300 ms)
				time.Sleep(time.Millisecond)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Errorf("flush: %v", err)
		}
	}()

	// Unload three times while traffic flows.
	for range 3 {
		time.Sleep(150 * time.Millisecond)
		if err := admin.UnloadTopic(ctx, topic); err != nil {
			t.Logf("unload: %v", err)
		}
	}
	<-prodDone
	mu.Lock()
	if len(sendErrs) > 0 {
		t.Errorf("%d sends failed, first: %v", len(sendErrs), sendErrs[0])
	}
	nAcked := len(acked)
	mu.Unlock()

	received := map[string]int{}
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		missing := 0
		for pl := range acked {
			if received[pl] == 0 {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d acknowledged messages never received (of %d acked)", missing, nAcked)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := co.Receive(rctx)
		cancel()
		if err != nil {
			continue
		}
		received[string(m.Payload)]++
		if err := co.Ack(ctx, m.ID); err != nil {
			t.Logf("ack %v: %v", m.ID, err)
		}
	}
	dups := 0
	for _, n := range received {
		dups += n - 1
	}
	st := p.Stats()
	t.Logf("acked %d/%d, received %d distinct, %d duplicate deliveries; producer: %d reconnects, %d batches resent, %d reported duplicate",
		nAcked, total, len(received), dups, st.Reconnects, st.Resent, st.Duplicates)
	if nAcked != total {
		t.Fatalf("only %d of %d sends acknowledged", nAcked, total)
	}
	if st.Reconnects == 0 {
		t.Fatalf("producer never reconnected: unloads had no effect?")
	}
}
