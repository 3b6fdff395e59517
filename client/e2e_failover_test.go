package client_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
)

// TestRegionKillOwningBrokerWhileProducing runs a region of 2 brokers and 3
// bookies, kills (crash, no cleanup) the broker that owns the topic while a
// producer and a consumer run through the client, and checks that both
// carry on with the other broker: every acknowledged message is received,
// duplicates are counted and reported.
func TestRegionKillOwningBrokerWhileProducing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 2-broker, 3-bookie region (-short)")
	}
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 3})
	addrs := rc.Addrs()
	c := newClient(t, addrs[0]) // one address: the other broker is discovered
	const topic = "public/default/failover-kill"
	ctx := tctx(t, 180*time.Second)

	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 20, BatchingMaxDelay: 2 * time.Millisecond,
		MaxPendingMessages: 500, BlockIfQueueFull: true, SendTimeout: 120 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.TopicStats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	owner := -1
	for i := range addrs {
		if rc.Broker(i).ID() == st.GetOwnerBroker() {
			owner = i
		}
	}
	if owner < 0 {
		t.Fatalf("owner %q is none of the brokers", st.GetOwnerBroker())
	}

	var mu sync.Mutex
	acked := map[string]bool{}
	failed := 0
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	stop := make(chan struct{})
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			pl := fmt.Sprintf("m%06d", i)
			p.SendAsync(ctx, &client.Message{Payload: []byte(pl)}, func(_ client.MessageID, _ *client.Message, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					return
				}
				acked[pl] = true
			})
			if i%50 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	received := map[string]int{}
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			m, err := co.Receive(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			received[string(m.Payload)]++
			mu.Unlock()
			_ = co.Ack(ctx, m.ID)
		}
	}()
	waitAcked := func(n int) {
		deadline := time.Now().Add(120 * time.Second)
		for ackedCount() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d acknowledged (waiting for %d)", ackedCount(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitAcked(1000)
	rc.Kill(owner)
	atKill := ackedCount()
	start := time.Now()
	waitAcked(atKill + 1000)
	t.Logf("killed owner broker %d with %d acknowledged; production resumed, +1000 acked after %v", owner, atKill, time.Since(start).Round(time.Millisecond))
	close(stop)
	<-prodDone
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(120 * time.Second)
	for {
		mu.Lock()
		var missing []string
		for pl := range acked {
			if received[pl] == 0 {
				missing = append(missing, pl)
			}
		}
		n := len(acked)
		mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			slices.Sort(missing)
			t.Fatalf("%d of %d acknowledged messages never received, e.g. %v", len(missing), n, missing[:min(10, len(missing))])
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = co.Close(context.Background())
	<-recvDone
	mu.Lock()
	dups := 0
	for _, n := range received {
		dups += n - 1
	}
	t.Logf("acknowledged %d (failed %d), received %d distinct, %d duplicate deliveries; producer: %+v",
		len(acked), failed, len(received), dups, p.Stats())
	mu.Unlock()
}
