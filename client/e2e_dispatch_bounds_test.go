package client_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
)

// boundedRegion starts a one-broker region with small dispatch bounds.
func boundedRegion(t *testing.T, setAside, delayed int) *client.Client {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 1, Broker: func(_ int, c *broker.Config) {
		c.MaxSetAsideEntries = setAside
		c.MaxDelayedEntries = delayed
	}})
	return newClient(t, rc.Addrs()[0])
}

// TestKeySharedSetAsideIsBounded: with a consumer that takes nothing, its
// keys' entries are set aside only up to max_set_aside_entries; then
// dispatch stops reading (the other consumer's later keys wait too:
// back-pressure, not memory) and resumes, in order, when the stuck
// consumer drains.
func TestKeySharedSetAsideIsBounded(t *testing.T) {
	const bound = 20
	c := boundedRegion(t, bound, 0)
	const topic, sub = "public/default/ks-bound", "s"
	ctx := tctx(t, 90*time.Second)
	stuck, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.KeyShared, Name: "stuck",
		InitialPosition: client.Earliest, ReceiverQueueSize: 1, KeyShared: &client.KeySharedOptions{Sticky: []client.HashRange{{Start: 0, End: 32767}}}})
	if err != nil {
		t.Fatal(err)
	}
	live, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.KeyShared, Name: "live",
		InitialPosition: client.Earliest, KeyShared: &client.KeySharedOptions{Sticky: []client.HashRange{{Start: 32768, End: 65535}}}})
	if err != nil {
		t.Fatal(err)
	}
	stuckKeys, liveKeys := keysIn(4, 0, 32767), keysIn(4, 32768, 65535)
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 25
	for i := range rounds {
		for _, key := range append(append([]string(nil), stuckKeys...), liveKeys...) {
			p.SendAsync(ctx, &client.Message{Key: key, Payload: []byte(key), Properties: map[string]string{"seq": strconv.Itoa(i)}}, nil)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the set-aside set reaches its bound", func() bool {
		st, err := adm.TopicStats(ctx, topic)
		return err == nil && len(st.GetSubscriptions()) == 1 && st.GetSubscriptions()[0].GetSetAsideEntries() == bound
	})
	// The live consumer got what was read before the bound, then nothing.
	var early []*client.ReceivedMessage
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		m, err := live.Receive(rctx)
		cancel()
		if err != nil {
			break
		}
		early = append(early, m)
		_ = live.Ack(ctx, m.ID)
	}
	if len(early) >= rounds*len(liveKeys) {
		t.Fatalf("the live consumer got all %d messages: dispatch read past the set-aside bound", len(early))
	}
	st, err := adm.TopicStats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.GetSubscriptions()[0].GetSetAsideEntries(); n > bound {
		t.Fatalf("set aside %d entries, bound %d", n, bound)
	}
	t.Logf("live consumer got %d of %d before back-pressure; set aside %d (bound %d)", len(early), rounds*len(liveKeys), bound, bound)
	// The stuck consumer drains: everything flows, each key in order.
	var mu sync.Mutex
	next := map[string]int{}
	check := func(who string, m *client.ReceivedMessage) {
		mu.Lock()
		defer mu.Unlock()
		seq, _ := strconv.Atoi(m.Properties["seq"])
		if seq != next[m.Key] {
			t.Errorf("%s: key %s seq %d, want %d", who, m.Key, seq, next[m.Key])
		}
		next[m.Key] = seq + 1
	}
	for _, m := range early {
		check("live", m)
	}
	var wg sync.WaitGroup
	for _, w := range []struct {
		name string
		co   *client.Consumer
		n    int
	}{{"stuck", stuck, rounds * len(stuckKeys)}, {"live", live, rounds*len(liveKeys) - len(early)}} {
		wg.Go(func() {
			for range w.n {
				m, err := w.co.Receive(ctx)
				if err != nil {
					t.Errorf("%s: %v", w.name, err)
					return
				}
				check(w.name, m)
				_ = w.co.Ack(ctx, m.ID)
			}
		})
	}
	wg.Wait()
}

// TestDelayedIndexIsBounded: with more delayed messages than
// max_delayed_entries, the index holds at most the bound (dispatch stops
// reading ahead) and every message is still delivered, none early.
func TestDelayedIndexIsBounded(t *testing.T) {
	const bound = 10
	c := boundedRegion(t, 0, bound)
	const topic = "public/default/delayed-bound"
	ctx := tctx(t, 90*time.Second)
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.Shared, InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	due := map[string]time.Time{}
	var mu sync.Mutex
	const n = 40
	for i := range n {
		delayedSend(ctx, p, due, &mu, fmt.Sprintf("m%d", i), &client.Message{DeliverAfter: 3 * time.Second})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	st, err := adm.TopicStats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if d := st.GetSubscriptions()[0].GetDelayedEntries(); d > bound {
		t.Fatalf("%d delayed entries tracked, bound %d", d, bound)
	}
	seen := receiveDue(t, co, payloadsOf(0, n, 1), due, &mu, 60*time.Second, "bounded index")
	for pl, k := range seen {
		if k > 1 {
			t.Errorf("%s delivered %d times", pl, k)
		}
	}
}
