package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/prometheus/client_golang/prometheus"
)

func TestE2EExclusiveProduceConsumeInOrder(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	const topic = "public/default/excl"
	ctx := tctx(t, 60*time.Second)
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 7})
	if err != nil {
		t.Fatal(err)
	}
	ids := produceN(t, p, 0, 100)
	for i := 1; i < len(ids); i++ {
		if ids[i].Compare(ids[i-1]) <= 0 {
			t.Fatalf("acked IDs not increasing: %v then %v", ids[i-1], ids[i])
		}
	}
	// A sync Send resolves with its ID and sequence ID.
	m := &client.Message{Payload: []byte("m100")}
	id, err := p.Send(ctx, m)
	if err != nil || id.Compare(ids[99]) <= 0 || m.SequenceID != 100 {
		t.Fatalf("Send: id %v seq %d err %v", id, m.SequenceID, err)
	}
	ids = append(ids, id)
	got := receiveN(t, co, 101, 60*time.Second, true)
	for i, m := range got {
		if string(m.Payload) != fmt.Sprintf("m%d", i) || m.ID != ids[i] {
			t.Fatalf("message %d: %v %q, want %v m%d", i, m.ID, m.Payload, ids[i], i)
		}
		if m.SequenceID != int64(i) || m.ProducerName != p.Name() || m.PublishTime.IsZero() {
			t.Fatalf("message %d: seq %d producer %q publish %v", i, m.SequenceID, m.ProducerName, m.PublishTime)
		}
	}
	if got[1].Key != "k1" {
		t.Fatalf("key %q", got[1].Key)
	}
	// A second consumer on an Exclusive subscription is refused.
	if _, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s"}); !errors.Is(err, client.ErrConsumerBusy) {
		t.Fatalf("second exclusive consumer: %v", err)
	}
}

func TestE2ESharedSpreadsAndRejectsCumulativeAck(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	const topic = "public/default/shared"
	ctx := tctx(t, 90*time.Second)
	var cons []*client.Consumer
	for i := range 2 {
		co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "sh", Type: client.Shared,
			Name: fmt.Sprintf("c%d", i), ReceiverQueueSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		cons = append(cons, co)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	produceN(t, p, 0, 40)
	var mu sync.Mutex
	seen := map[string]int{}
	per := make([]int, 2)
	var wg sync.WaitGroup
	for i, co := range cons {
		wg.Go(func() {
			for {
				m, err := co.Receive(tctx(t, 3*time.Second))
				if err != nil {
					return
				}
				if err := co.Ack(ctx, m.ID); err != nil {
					t.Errorf("ack: %v", err)
				}
				mu.Lock()
				seen[string(m.Payload)]++
				per[i]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != 40 {
		t.Fatalf("saw %d distinct messages of 40", len(seen))
	}
	if per[0] == 0 || per[1] == 0 {
		t.Fatalf("shared subscription did not spread: %v", per)
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("shared: per consumer %v, duplicates %d", per, dups)
	if err := cons[0].AckCumulative(ctx, client.MessageID{}); !errors.Is(err, client.ErrNotAllowed) {
		t.Fatalf("cumulative ack on shared: %v", err)
	}
}

func TestE2EFailoverSwitchesOnClose(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	const topic = "public/default/failover"
	ctx := tctx(t, 90*time.Second)
	primary, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "fo", Type: client.Failover, Name: "a", Priority: 0, InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	standby, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "fo", Type: client.Failover, Name: "b", Priority: 1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	produceN(t, p, 0, 20)
	got := receiveN(t, primary, 10, 30*time.Second, true)
	expectNothing(t, standby, 300*time.Millisecond)
	// Take 5 more without acking, then close: the standby gets them.
	receiveN(t, primary, 5, 30*time.Second, false)
	if err := primary.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rest := receiveN(t, standby, 10, 30*time.Second, true)
	all := append(payloads(got), payloads(rest)...)
	for i, s := range all {
		if s != fmt.Sprintf("m%d", i) {
			t.Fatalf("failover order: %v", all)
		}
	}
}

func TestE2ERedeliveryOfUnackedAfterClose(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	const topic = "public/default/redeliver"
	ctx := tctx(t, 90*time.Second)
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "r", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	produceN(t, p, 0, 10)
	got := receiveN(t, co, 10, 30*time.Second, false)
	for i, m := range got {
		if i%2 == 0 {
			if err := co.Ack(ctx, m.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := co.Close(ctx); err != nil {
		t.Fatal(err)
	}
	co2, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "r"})
	if err != nil {
		t.Fatal(err)
	}
	again := receiveN(t, co2, 5, 30*time.Second, true)
	want := []string{"m1", "m3", "m5", "m7", "m9"}
	if !slices.Equal(payloads(again), want) {
		t.Fatalf("redelivered %v, want %v", payloads(again), want)
	}
	for _, m := range again {
		if m.RedeliveryCount < 1 {
			t.Logf("redelivered %v with count %d (broker may reset counts on a new consumer)", m.ID, m.RedeliveryCount)
		}
	}
	expectNothing(t, co2, 300*time.Millisecond)
}

func TestE2EAckCumulativeInsideBatches(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	const topic = "public/default/cumulative"
	ctx := tctx(t, 90*time.Second)
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 4, BatchingMaxDelay: time.Second, BatchingHoldOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "cum", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	ids := produceKeylessN(t, p, 0, 12) // 3 batches of 4 (keyless: a key change closes a batch)
	if ids[4].BatchIndex != 0 || ids[5].BatchIndex != 1 || ids[4].EntryID == ids[3].EntryID {
		t.Fatalf("unexpected batching: %v", ids)
	}
	got := receiveN(t, co, 12, 30*time.Second, false)
	// Cumulative ack up to m5 (inside the 2nd batch): the 1st batch is
	// acknowledged, the 2nd is not yet fully covered.
	if err := co.AckCumulative(ctx, got[5].ID); err != nil {
		t.Fatal(err)
	}
	if err := co.Close(ctx); err != nil {
		t.Fatal(err)
	}
	co2, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "cum"})
	if err != nil {
		t.Fatal(err)
	}
	again := receiveN(t, co2, 8, 30*time.Second, false)
	if again[0].ID != ids[4] || again[7].ID != ids[11] {
		t.Fatalf("after cumulative ack got %v..%v, want %v..%v", again[0].ID, again[7].ID, ids[4], ids[11])
	}
	// Acking everything cumulatively at the last message clears the backlog.
	if err := co2.AckCumulative(ctx, again[7].ID); err != nil {
		t.Fatal(err)
	}
	if err := co2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	co3, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "cum"})
	if err != nil {
		t.Fatal(err)
	}
	expectNothing(t, co3, 500*time.Millisecond)
}

func TestE2ECompressionRoundTrip(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 90*time.Second)
	for _, comp := range []client.Compression{client.CompressionZstd, client.CompressionS2, client.CompressionNone} {
		topic := "public/default/comp-" + comp.String()
		co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, Compression: comp, BatchingMaxMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		big := bytes.Repeat([]byte("compressible "), 10_000)
		ev := time.UnixMilli(1_700_000_000_000)
		for i := range 20 {
			p.SendAsync(ctx, &client.Message{Key: "k", Payload: append([]byte(fmt.Sprintf("%02d", i)), big...),
				Properties: map[string]string{"i": fmt.Sprint(i)}, EventTime: ev}, nil)
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got := receiveN(t, co, 20, 30*time.Second, true)
		for i, m := range got {
			if !bytes.Equal(m.Payload[2:], big) || string(m.Payload[:2]) != fmt.Sprintf("%02d", i) ||
				m.Properties["i"] != fmt.Sprint(i) || !m.EventTime.Equal(ev) {
				t.Fatalf("%v: message %d corrupted (len %d, props %v, event %v)", comp, i, len(m.Payload), m.Properties, m.EventTime)
			}
		}
		_ = p.Close(ctx)
		_ = co.Close(ctx)
	}
}

func TestE2EBadInputGetsClearErrors(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 60*time.Second)
	// Oversize: past the client check, the broker refuses it and names its limit.
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: "public/default/big", MaxMessageSize: 12 << 20, BatchingMaxMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Send(ctx, &client.Message{Payload: make([]byte, 6<<20)})
	if !errors.Is(err, client.ErrMessageTooLarge) {
		t.Fatalf("6 MiB message: %v", err)
	}
	t.Logf("oversize error: %v", err)
	// The producer keeps working after a refused message.
	if _, err := p.Send(ctx, &client.Message{Payload: []byte("small")}); err != nil {
		t.Fatalf("send after oversize: %v", err)
	}
	// The default client limit refuses it before sending.
	p2, err := c.NewProducer(ctx, client.ProducerOptions{Topic: "public/default/big"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Send(ctx, &client.Message{Payload: make([]byte, 5<<20+1)}); !errors.Is(err, client.ErrMessageTooLarge) {
		t.Fatalf("client-side limit: %v", err)
	}
	// Invalid names are refused by the broker with ErrInvalidName.
	if _, err := c.NewProducer(ctx, client.ProducerOptions{Topic: "public/default/bad$name"}); !errors.Is(err, client.ErrInvalidName) {
		t.Fatalf("invalid topic: %v", err)
	}
	// A missing namespace is a clear, non-retried error.
	start := time.Now()
	if _, err := c.NewProducer(ctx, client.ProducerOptions{Topic: "nope/nope/t"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("missing namespace: %v", err)
	} else {
		t.Logf("missing namespace: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("missing namespace took %v (retried?)", time.Since(start))
	}
	if _, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: "public/default/t", Subscription: ""}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("empty subscription: %v", err)
	}
}

func TestE2EAdmin(t *testing.T) {
	sa := startStandalone(t)
	ctx := tctx(t, 60*time.Second)
	a, err := client.NewAdmin(ctx, sa.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(ctx) })
	if err := a.CreateTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateTenant(ctx, "acme"); !errors.Is(err, client.ErrAlreadyExists) {
		t.Fatalf("duplicate tenant: %v", err)
	}
	if err := a.CreateNamespace(ctx, "acme/orders", nil); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateTopic(ctx, "acme/orders/t1"); err != nil {
		t.Fatal(err)
	}
	ts, err := a.ListTopics(ctx, "acme/orders")
	if err != nil || !slices.Contains(ts, "acme/orders/t1") {
		t.Fatalf("topics %v %v", ts, err)
	}
	tenants, _ := a.ListTenants(ctx)
	sort.Strings(tenants)
	if !slices.Contains(tenants, "acme") || !slices.Contains(tenants, "public") {
		t.Fatalf("tenants %v", tenants)
	}
	if err := a.DeleteNamespace(ctx, "acme/orders"); !errors.Is(err, client.ErrNotAllowed) {
		t.Fatalf("delete non-empty namespace: %v", err)
	}
	if err := a.CreateSubscription(ctx, "acme/orders/t1", "sub", client.Earliest); err != nil {
		t.Fatal(err)
	}
	subs, err := a.ListSubscriptions(ctx, "acme/orders/t1")
	if err != nil || !slices.Equal(subs, []string{"sub"}) {
		t.Fatalf("subs %v %v", subs, err)
	}
	st, err := a.TopicStats(ctx, "acme/orders/t1")
	if err != nil || st.GetTopic() != "acme/orders/t1" {
		t.Fatalf("stats %v %v", st, err)
	}
	pol, err := a.GetNamespacePolicies(ctx, "acme/orders")
	if err != nil {
		t.Fatal(err)
	}
	pol.EnsembleSize, pol.WriteQuorum, pol.AckQuorum = 1, 2, 1 // Qw > E
	if err := a.SetNamespacePolicies(ctx, "acme/orders", pol); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("bad policies: %v", err)
	}
	if err := a.DeleteSubscription(ctx, "acme/orders/t1", "sub", false); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteTopic(ctx, "acme/orders/t1", false); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteNamespace(ctx, "acme/orders"); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
}

// TestE2EPartialBatchAckRedeliversOnlyUnacked: a batch whose messages are
// all acknowledged but one comes back, to another consumer, with only that
// one (batch-index acknowledgements; the broker still acknowledges entries
// as a whole once every message is).
func TestE2EPartialBatchAckRedeliversOnlyUnacked(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	const topic = "public/default/partial"
	ctx := tctx(t, 60*time.Second)
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 4, BatchingMaxDelay: time.Second, BatchingHoldOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	ids := produceKeylessN(t, p, 0, 8) // two entries of 4
	if ids[4].EntryID == ids[3].EntryID || ids[6].BatchIndex != 2 {
		t.Fatalf("unexpected batching: %v", ids)
	}
	got := receiveN(t, co, 8, 30*time.Second, false)
	for i, m := range got {
		if i == 6 {
			continue // one message of the second batch stays unacked
		}
		if err := co.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := co.Close(ctx); err != nil {
		t.Fatal(err)
	}
	co2, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s"})
	if err != nil {
		t.Fatal(err)
	}
	again := receiveN(t, co2, 1, 30*time.Second, true)
	if again[0].ID != ids[6] {
		t.Fatalf("redelivered %v, want only %v", again[0].ID, ids[6])
	}
	expectNothing(t, co2, 300*time.Millisecond)
}

func TestE2ESendTimeoutWhenRegionDies(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 60*time.Second)
	// The timeout must also cover the first send on a freshly started region
	// (ledger creation, first fsync): under CPU load 500 ms did not.
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: "public/default/dies", SendTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, &client.Message{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	sa.Kill()
	start := time.Now()
	_, err = p.Send(ctx, &client.Message{Payload: []byte("after")})
	if !errors.Is(err, client.ErrSendTimeout) {
		t.Fatalf("send to a dead region: %v", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("send timeout took %v", el)
	}
	// The slot is freed right after the callback: poll.
	for deadline := time.Now().Add(5 * time.Second); p.Stats().Pending != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pending %d after timeout", p.Stats().Pending)
		}
	}
}

func TestE2EUnsubscribeDeletesSubscription(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	const topic = "public/default/unsub"
	ctx := tctx(t, 60*time.Second)
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	if err := co.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := co.Receive(ctx); !errors.Is(err, client.ErrConsumerClosed) {
		t.Fatalf("receive after unsubscribe: %v", err)
	}
	a, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	// The subscription must be gone and stay gone (no resubscribe).
	time.Sleep(300 * time.Millisecond)
	subs, err := a.ListSubscriptions(ctx, topic)
	if err != nil || slices.Contains(subs, "gone") {
		t.Fatalf("subscriptions after unsubscribe: %v %v", subs, err)
	}
}

func TestE2EClientMetrics(t *testing.T) {
	sa := startStandalone(t)
	reg := prometheus.NewRegistry()
	ctx := tctx(t, 60*time.Second)
	c, err := client.New(ctx, client.Options{URL: sa.GRPCAddr(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	// A second client on the same registry shares the counters.
	c2, err := client.New(ctx, client.Options{URL: sa.GRPCAddr(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c2.Close(context.Background()) })
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: "public/default/metrics"})
	if err != nil {
		t.Fatal(err)
	}
	co, err := c2.Subscribe(ctx, client.ConsumerOptions{Topic: "public/default/metrics", Subscription: "s", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	produceN(t, p, 0, 10)
	receiveN(t, co, 10, 30*time.Second, true)
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				got[mf.GetName()] += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				got[mf.GetName()] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	if got["meridian_client_messages_sent_total"] != 10 || got["meridian_client_messages_received_total"] != 10 ||
		got["meridian_client_send_latency_seconds"] != 10 || got["meridian_client_bytes_sent_total"] != 20 {
		t.Fatalf("metrics %v", got)
	}
}

// TestE2ESendsWhatGatheredWhenTheReceiptComes: with a batch delay of an
// hour, a burst is still acknowledged: the first message goes at once,
// the rest gather behind it and go when its receipt comes back, in fewer
// entries than messages, in order.
func TestE2ESendsWhatGatheredWhenTheReceiptComes(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	const topic = "public/default/eager"
	ctx := tctx(t, 60*time.Second)
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	ids := make([]client.MessageID, n)
	errs := make(chan error, n)
	for i := range n {
		p.SendAsync(ctx, &client.Message{Payload: fmt.Appendf(nil, "m%d", i)}, func(id client.MessageID, _ *client.Message, err error) {
			ids[i] = id
			errs <- err
		})
	}
	for range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("sends not acknowledged: a gathered batch waited for the batch delay")
		}
	}
	entries := map[[2]int64]bool{}
	for i, id := range ids {
		if i > 0 && id.Compare(ids[i-1]) <= 0 {
			t.Fatalf("IDs out of order: %v then %v", ids[i-1], id)
		}
		entries[[2]int64{id.LedgerID, id.EntryID}] = true
	}
	if len(entries) >= n {
		t.Fatalf("%d messages in %d entries: nothing gathered while a send was in flight", n, len(entries))
	}
	t.Logf("%d messages in %d entries", n, len(entries))
}
