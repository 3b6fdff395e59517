package region_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
)

// Key_Shared and delayed delivery on replicated topics (docs/semantics/dispatch.md).

// TestReplicatedKeySharedSubscriptionMove: a replicated Key_Shared
// subscription consumed in part in region a resumes in region b with
// everything a did not acknowledge (none lost; duplicates bounded by the
// acknowledgements not yet replicated), like the other types.
func TestReplicatedKeySharedSubscriptionMove(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{})
	g.createNamespace(repSubNamespace, "a", "b")
	repSubMove(t, g, repSubNamespace+"/move-key_shared", client.KeyShared, 100)
}

// TestReplicatedKeySharedPerKeyOrder: keyed messages produced in region a
// reach a Key_Shared subscription of region b with two consumers: each key
// stays on one consumer, in publish order.
func TestReplicatedKeySharedPerKeyOrder(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{})
	g.createNamespace(repSubNamespace, "a", "b")
	const topic, keys, perKey = repSubNamespace + "/ks-order", 12, 20
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cb := repSubClient(t, g, "b")
	var cons []*client.Consumer
	for i := range 2 {
		co, err := cb.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "ks", Type: client.KeyShared,
			Name: fmt.Sprintf("b%d", i), InitialPosition: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		cons = append(cons, co)
	}
	p, err := repSubClient(t, g, "a").NewProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for i := range perKey {
		for k := range keys {
			p.SendAsync(ctx, &client.Message{Key: fmt.Sprintf("key-%d", k), Payload: []byte("x"), Properties: map[string]string{"seq": strconv.Itoa(i)}}, nil)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	type rec struct {
		consumer int
		key      string
		seq      int
	}
	recs := make(chan rec, keys*perKey*2)
	for i, co := range cons {
		go func() {
			for {
				m, err := co.Receive(ctx)
				if err != nil {
					return
				}
				seq, _ := strconv.Atoi(m.Properties["seq"])
				recs <- rec{i, m.Key, seq}
				_ = co.Ack(ctx, m.ID)
			}
		}()
	}
	owner := map[string]int{}
	next := map[string]int{}
	for got := 0; got < keys*perKey; got++ {
		select {
		case r := <-recs:
			if o, ok := owner[r.key]; ok && o != r.consumer {
				t.Fatalf("key %s on consumers %d and %d", r.key, o, r.consumer)
			}
			owner[r.key] = r.consumer
			if r.seq != next[r.key] {
				t.Fatalf("key %s: seq %d, want %d", r.key, r.seq, next[r.key])
			}
			next[r.key]++
		case <-ctx.Done():
			t.Fatalf("only %d of %d messages arrived in b", got, keys*perKey)
		}
	}
	per := map[int]int{}
	for _, c := range owner {
		per[c]++
	}
	t.Logf("keys per consumer in b: %v", per)
}

// TestReplicatedDelayedDelivery: a delayed message produced in a is held
// in every region until its time: a consumer in a and one in b receive it
// no earlier, and receive the undelayed messages first.
func TestReplicatedDelayedDelivery(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{})
	g.createNamespace(repSubNamespace, "a", "b")
	const topic = repSubNamespace + "/delayed"
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var cons []*client.Consumer
	for _, r := range []string{"a", "b"} {
		co, err := repSubClient(t, g, r).Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s-" + r, Type: client.Shared, InitialPosition: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		cons = append(cons, co)
	}
	p, err := repSubClient(t, g, "a").NewProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	due := map[string]time.Time{}
	for i := range 20 {
		pl := fmt.Sprintf("m%d", i)
		m := &client.Message{Payload: []byte(pl)}
		due[pl] = time.Now()
		if i%2 == 1 {
			m.DeliverAfter = 3 * time.Second
			due[pl] = time.Now().Add(m.DeliverAfter).Truncate(time.Millisecond)
		}
		p.SendAsync(ctx, m, nil)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i, co := range cons {
		seen := map[string]bool{}
		for len(seen) < 20 {
			m, err := co.Receive(ctx)
			if err != nil {
				t.Fatalf("region %d: %d of 20 received: %v", i, len(seen), err)
			}
			pl := string(m.Payload)
			if now := time.Now(); now.Before(due[pl]) {
				t.Errorf("region %d: %s delivered %v early", i, pl, due[pl].Sub(now))
			}
			seen[pl] = true
			_ = co.Ack(ctx, m.ID)
		}
	}
}
