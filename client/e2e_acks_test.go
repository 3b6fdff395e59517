package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// produceBatch sends n messages "<prefix><i>" as one batch (one entry).
func produceBatch(t *testing.T, c *client.Client, topic, prefix string, n int) {
	t.Helper()
	ctx := tctx(t, 60*time.Second)
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: n, BatchingMaxDelay: 5 * time.Second, BatchingHoldOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	ids := make(chan client.MessageID, n)
	for i := range n {
		p.SendAsync(ctx, &client.Message{Payload: fmt.Appendf(nil, "%s%d", prefix, i)}, func(id client.MessageID, _ *client.Message, err error) {
			if err != nil {
				t.Errorf("send: %v", err)
			}
			ids <- id
		})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	first := <-ids
	for range n - 1 {
		if id := <-ids; id.LedgerID != first.LedgerID || id.EntryID != first.EntryID {
			t.Fatalf("messages in two entries (%v, %v): want one batch", first, id)
		}
	}
}

// subStats polls the topic's stats until pred holds for subscription sub.
func subStats(t *testing.T, a *client.Admin, topic, sub string, what string, pred func(*clientv1.SubscriptionStats) bool) *clientv1.SubscriptionStats {
	t.Helper()
	ctx := tctx(t, 60*time.Second)
	var last *clientv1.SubscriptionStats
	for {
		st, err := a.TopicStats(ctx, topic)
		if err == nil {
			for _, ss := range st.GetSubscriptions() {
				if ss.GetName() == sub {
					last = ss
					if pred(ss) {
						return ss
					}
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("stats of %s/%s: want %s; last %v (err %v)", topic, sub, what, last, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBatchIndexAcks: 5 of the 20 messages of one batch acknowledged
// count as a message backlog of 15 (1 entry); the batch redelivered to
// another consumer — and after the topic is unloaded, from the persisted
// cursor — holds only the 15 others; acknowledging them empties the
// backlog.
func TestBatchIndexAcks(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	a, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	const topic = "public/default/batch-index-acks"
	ctx := tctx(t, 120*time.Second)
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.Shared, InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	produceBatch(t, c, topic, "m", 20)
	ms := receiveN(t, co, 20, 60*time.Second, false)
	for _, m := range ms[:5] {
		if err := co.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	ss := subStats(t, a, topic, "s", "msg_backlog 15", func(ss *clientv1.SubscriptionStats) bool { return ss.GetMsgBacklog() == 15 })
	if ss.GetBacklogEntries() != 1 || ss.GetPartiallyAckedEntries() != 1 || ss.GetMsgBacklogEstimated() || ss.GetUnackedMessages() != 15 {
		t.Fatalf("stats %v: want 1 backlog entry, 1 partially acked, exact, 15 unacked messages", ss)
	}
	if st, err := a.TopicStats(ctx, topic); err != nil || st.GetMsgBacklog() != 15 {
		t.Fatalf("topic msg_backlog %d (%v), want 15", st.GetMsgBacklog(), err)
	}
	is, err := a.TopicInternalStats(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	wantPartial := fmt.Sprintf("%d:%d:[0,1,2,3,4]", ms[0].ID.LedgerID, ms[0].ID.EntryID)
	if cs := is.GetCursors(); len(cs) != 1 || cs[0].GetPartiallyAckedCount() != 1 || len(cs[0].GetPartiallyAcked()) != 1 || cs[0].GetPartiallyAcked()[0] != wantPartial {
		t.Fatalf("internal stats cursors %v: want partially acked %s", cs, wantPartial)
	}
	want := map[string]bool{}
	for _, m := range ms[5:] {
		want[string(m.Payload)] = true
	}
	// Redelivery counts live in the owner's memory: an unload resets them.
	check := func(got []*client.ReceivedMessage, when string, redelivered bool) {
		t.Helper()
		for _, m := range got {
			if !want[string(m.Payload)] {
				t.Fatalf("%s: redelivered %q (%v), acknowledged by batch index before", when, m.Payload, m.ID)
			}
			if redelivered && m.RedeliveryCount < 1 {
				t.Fatalf("%s: redelivered %v with redelivery count %d", when, m.ID, m.RedeliveryCount)
			}
		}
	}
	// Another consumer gets the entry less the 5 acknowledged messages.
	if err := co.Close(ctx); err != nil {
		t.Fatal(err)
	}
	co2, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.Shared})
	if err != nil {
		t.Fatal(err)
	}
	check(receiveN(t, co2, 15, 60*time.Second, false), "after the consumer change", true)
	expectNothing(t, co2, 300*time.Millisecond)
	if err := co2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// The partial acks are persisted with the cursor.
	if err := a.UnloadTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	subStats(t, a, topic, "s", "an exact msg_backlog 15 after the unload", func(ss *clientv1.SubscriptionStats) bool {
		return ss.GetMsgBacklog() == 15 && ss.GetPartiallyAckedEntries() == 1 && !ss.GetMsgBacklogEstimated()
	})
	co3, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.Shared})
	if err != nil {
		t.Fatal(err)
	}
	got := receiveN(t, co3, 15, 60*time.Second, true)
	check(got, "after the unload", false)
	expectNothing(t, co3, 300*time.Millisecond)
	subStats(t, a, topic, "s", "an empty backlog", func(ss *clientv1.SubscriptionStats) bool {
		return ss.GetMsgBacklog() == 0 && ss.GetBacklogEntries() == 0 && ss.GetPartiallyAckedEntries() == 0
	})
}

// TestNackDelayAndBackoff: a nacked message comes back no earlier than its
// delay; with NackBackoff the delay grows with the redelivery count.
func TestNackDelayAndBackoff(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 120*time.Second)

	// A fixed delay.
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: "public/default/nack-delay", Subscription: "s", InitialPosition: client.Earliest,
		NackRedeliveryDelay: 700 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: "public/default/nack-delay"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(ctx, &client.Message{Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	m := receiveN(t, co, 1, 60*time.Second, false)[0]
	nackAt := time.Now()
	if err := co.Nack(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	m2 := receiveN(t, co, 1, 60*time.Second, false)[0]
	if d := time.Since(nackAt); d < 700*time.Millisecond {
		t.Fatalf("redelivered %v after the nack, before the 700ms delay", d)
	}
	if m2.ID != m.ID || m2.RedeliveryCount != 1 {
		t.Fatalf("redelivered %v count %d, want %v count 1", m2.ID, m2.RedeliveryCount, m.ID)
	}
	if err := co.Ack(ctx, m2.ID); err != nil {
		t.Fatal(err)
	}

	// Backoff 200ms × 2^count, at most 1s.
	bo := &client.NackBackoff{Min: 200 * time.Millisecond, Max: time.Second, Multiplier: 2}
	co2, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: "public/default/nack-backoff", Subscription: "s", InitialPosition: client.Earliest,
		NackBackoff: bo})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c.NewProducer(ctx, client.ProducerOptions{Topic: "public/default/nack-backoff"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Send(ctx, &client.Message{Payload: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	m = receiveN(t, co2, 1, 60*time.Second, false)[0]
	for round := range int32(4) {
		if m.RedeliveryCount != round {
			t.Fatalf("round %d: redelivery count %d", round, m.RedeliveryCount)
		}
		want := bo.Delay(round)
		nackAt := time.Now()
		if err := co2.Nack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
		m = receiveN(t, co2, 1, 60*time.Second, false)[0]
		d := time.Since(nackAt)
		if d < want {
			t.Fatalf("round %d: redelivered after %v, before the backoff delay %v", round, d, want)
		}
		t.Logf("round %d: backoff %v, redelivered after %v", round, want, d.Round(time.Millisecond))
	}
	if err := co2.Ack(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	a, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	subStats(t, a, "public/default/nack-backoff", "s", "a redelivery rate", func(ss *clientv1.SubscriptionStats) bool {
		return ss.GetMsgRateRedeliver() > 0 && ss.GetMsgBacklog() == 0
	})
	if bo.Delay(0) != 200*time.Millisecond || bo.Delay(1) != 400*time.Millisecond || bo.Delay(2) != 800*time.Millisecond || bo.Delay(3) != time.Second || bo.Delay(40) != time.Second {
		t.Fatalf("backoff delays %v %v %v %v %v", bo.Delay(0), bo.Delay(1), bo.Delay(2), bo.Delay(3), bo.Delay(40))
	}
}

// TestAckTimeout: a received message not acknowledged within AckTimeout
// is redelivered with its count raised; once acknowledged it is not.
func TestAckTimeout(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 120*time.Second)
	const topic = "public/default/ack-timeout"
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", InitialPosition: client.Earliest, AckTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	produceN(t, p, 0, 3)
	first := receiveN(t, co, 3, 60*time.Second, false)
	at := time.Now()
	if err := co.Ack(ctx, first[1].ID); err != nil {
		t.Fatal(err)
	}
	again := receiveN(t, co, 2, 60*time.Second, false)
	if d := time.Since(at); d < 900*time.Millisecond {
		t.Fatalf("redelivered %v after receipt, before the 1s ack timeout", d)
	}
	for _, m := range again {
		if m.RedeliveryCount != 1 || m.ID == first[1].ID {
			t.Fatalf("redelivered %v (%q) count %d: want messages 0 and 2 with count 1", m.ID, m.Payload, m.RedeliveryCount)
		}
		if err := co.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	expectNothing(t, co, 2500*time.Millisecond)

	// Off by default; bad values are refused naming the option.
	if _, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "bad", AckTimeout: 10 * time.Millisecond}); err == nil {
		t.Fatal("AckTimeout 10ms accepted")
	}
	if _, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "bad", DeadLetter: &client.DeadLetterPolicy{}}); err == nil {
		t.Fatal("DeadLetter.MaxRedeliveries 0 accepted")
	}
}

// collectDLQ receives from a dead-letter consumer into seen, acking.
func collectDLQ(ctx context.Context, co *client.Consumer, mu *sync.Mutex, seen map[string]int, props map[string]map[string]string) {
	for {
		m, err := co.Receive(ctx)
		if err != nil {
			return
		}
		mu.Lock()
		seen[string(m.Payload)]++
		props[string(m.Payload)] = m.Properties
		mu.Unlock()
		_ = co.Ack(ctx, m.ID)
	}
}

// ownerIndex returns the index in rc of the broker owning topic.
func ownerIndex(t *testing.T, a *client.Admin, ids []string, topic string) int {
	t.Helper()
	st, err := a.TopicStats(tctx(t, 30*time.Second), topic)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if id == st.GetOwnerBroker() {
			return i
		}
	}
	t.Fatalf("owner %q of %s is none of %v", st.GetOwnerBroker(), topic, ids)
	return -1
}

// nackAll receives from co and nacks everything until ctx ends, counting
// the messages handed out with a redelivery count of max or more (the
// dead-letter policy must have taken them).
func nackAll(ctx context.Context, co *client.Consumer, max int32, tooMany *int, mu *sync.Mutex) {
	for {
		m, err := co.Receive(ctx)
		if err != nil {
			return
		}
		if m.RedeliveryCount >= max {
			mu.Lock()
			*tooMany++
			mu.Unlock()
		}
		_ = co.Nack(ctx, m.ID)
	}
}

// waitDLQ waits until every payload in want was seen in the dead-letter
// topic; it fails naming the missing ones, and logs the duplicates.
func waitDLQ(t *testing.T, mu *sync.Mutex, seen map[string]int, want []string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		mu.Lock()
		var missing []string
		dups := 0
		for _, w := range want {
			if seen[w] == 0 {
				missing = append(missing, w)
			} else {
				dups += seen[w] - 1
			}
		}
		mu.Unlock()
		if len(missing) == 0 {
			t.Logf("all %d messages dead-lettered; %d duplicates in the dead-letter topic", len(want), dups)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged messages never reached the dead-letter topic, e.g. %v", len(missing), len(want), missing[:min(10, len(missing))])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDeadLetterAcrossBrokerKill: a consumer that never acknowledges
// (it nacks everything) sends every message to the dead-letter topic after
// MaxRedeliveries deliveries; the owner broker is killed in the middle;
// no acknowledged message is lost, none is handed to the application
// with a redelivery count of MaxRedeliveries or more, and the original
// subscription ends with an empty backlog. With MERIDIAN_LONG=1 (make
// test-long): 3000 messages and three kills, the killed broker restarted
// after each.
func TestDeadLetterAcrossBrokerKill(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 2, Bookies: 3})
	addrs := rc.Addrs()
	c := newClient(t, addrs[0])
	a, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	const topic, maxRd = "public/default/dlq-kill", 3
	n, kills := 300, 1
	if os.Getenv("MERIDIAN_LONG") != "" {
		n, kills = 3000, 3
	}
	dlqTopic := topic + "-s-DLQ"
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Second)
	defer cancel()

	dlq, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: dlqTopic, Subscription: "check", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen, props := map[string]int{}, map[string]map[string]string{}
	go collectDLQ(ctx, dlq, &mu, seen, props)

	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.Shared, InitialPosition: client.Earliest,
		NackRedeliveryDelay: 20 * time.Millisecond, DeadLetter: &client.DeadLetterPolicy{MaxRedeliveries: maxRd}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 10, BatchingMaxDelay: 5 * time.Millisecond, SendTimeout: 60 * time.Second,
		BlockIfQueueFull: true})
	if err != nil {
		t.Fatal(err)
	}
	produceN(t, p, 0, n)
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("m%d", i)
	}
	tooMany := 0
	go nackAll(ctx, co, maxRd, &tooMany, &mu)

	ids := []string{rc.Broker(0).ID(), rc.Broker(1).ID()}
	owner := -1
	for k := 1; k <= kills; k++ {
		if owner >= 0 {
			rc.Restart(owner) // the previous kill's broker comes back
		}
		adm := a
		if owner >= 0 {
			// A restarted broker listens on a new address.
			if adm, err = newClient(t, rc.Addrs()[owner]).Admin(); err != nil {
				t.Fatal(err)
			}
		}
		owner = ownerIndex(t, adm, ids, topic)
		deadline := time.Now().Add(120 * time.Second)
		for {
			mu.Lock()
			got := len(seen)
			mu.Unlock()
			if got >= n*k/(kills+3) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("only %d messages dead-lettered before kill %d", got, k)
			}
			time.Sleep(10 * time.Millisecond)
		}
		rc.Kill(owner)
		mu.Lock()
		t.Logf("kill %d: the owner broker %d, with %d of %d messages dead-lettered", k, owner, len(seen), n)
		mu.Unlock()
	}

	waitDLQ(t, &mu, seen, want, time.Duration(kills)*120*time.Second)
	mu.Lock()
	if tooMany > 0 {
		t.Errorf("%d messages handed to the application with redelivery count >= %d", tooMany, maxRd)
	}
	for pl, pr := range props {
		if pr[client.PropertyRealTopic] != topic || pr[client.PropertySubscription] != "s" || pr[client.PropertyOriginMessageID] == "" {
			t.Fatalf("dead-lettered %q has properties %v", pl, pr)
		}
	}
	mu.Unlock()
	a2, err := newClient(t, rc.Addrs()[1-owner]).Admin()
	if err != nil {
		t.Fatal(err)
	}
	subStats(t, a2, topic, "s", "an empty backlog", func(ss *clientv1.SubscriptionStats) bool {
		return ss.GetMsgBacklog() == 0 && ss.GetBacklogEntries() == 0
	})
}

// TestDeadLetterReplicatedTopic: on a topic replicated between two
// regions, the dead-letter topic (in the same namespace) replicates too:
// a consumer in region b receives every message region a's consumer
// dead-lettered; a's subscription counts them and its backlog empties,
// and the replicated subscription's backlog empties in b as well (the
// dead-letter acknowledgements replicate like any ack).
func TestDeadLetterReplicatedTopic(t *testing.T) {
	m := regiontest.StartRegions(t, regiontest.MultiOptions{Regions: []string{"a", "b"}, Brokers: 1})
	urlA, urlB := m.Region("a").Addrs()[0], m.Region("b").Addrs()[0]
	ca, cb := newClient(t, urlA), newClient(t, urlB)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	aa, err := ca.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ab, err := cb.Admin()
	if err != nil {
		t.Fatal(err)
	}
	if err := aa.CreateNamespace(ctx, "public/acks", &clientv1.NamespacePolicies{RetentionTimeSeconds: -1, RetentionSizeBytes: -1,
		ReplicationRegions: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	const topic, n, maxRd = "public/acks/dlq-repl", 40, 2
	dlqTopic := topic + "-s-DLQ"

	dlqB, err := cb.Subscribe(ctx, client.ConsumerOptions{Topic: dlqTopic, Subscription: "check", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen, props := map[string]int{}, map[string]map[string]string{}
	go collectDLQ(ctx, dlqB, &mu, seen, props)

	co, err := ca.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.Shared, InitialPosition: client.Earliest,
		Replicated: true, NackRedeliveryDelay: 20 * time.Millisecond, DeadLetter: &client.DeadLetterPolicy{MaxRedeliveries: maxRd}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 4, BatchingMaxDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	produceN(t, p, 0, n)
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("m%d", i)
	}
	tooMany := 0
	go nackAll(ctx, co, maxRd, &tooMany, &mu)
	waitDLQ(t, &mu, seen, want, 120*time.Second)
	mu.Lock()
	if tooMany > 0 {
		t.Errorf("%d messages handed to the application with redelivery count >= %d", tooMany, maxRd)
	}
	for pl, pr := range props {
		if pr[client.PropertyRealTopic] != topic {
			t.Fatalf("dead-lettered %q in region b has properties %v", pl, pr)
		}
	}
	mu.Unlock()
	subStats(t, aa, topic, "s", "every message dead-lettered and an empty backlog in region a", func(ss *clientv1.SubscriptionStats) bool {
		return ss.GetMsgBacklog() == 0 && ss.GetDeadLetteredMessages() >= n
	})
	subStats(t, ab, topic, "s", "an empty backlog in region b (replicated acknowledgements)", func(ss *clientv1.SubscriptionStats) bool {
		return ss.GetMsgBacklog() == 0 && ss.GetBacklogEntries() == 0
	})
}

// TestReconsumeLater: with EnableRetry, ReconsumeLater sends a message
// through the retry topic (RECONSUMETIMES raised, received again by the
// same consumer) and, past MaxRedeliveries reconsumes, to the dead-letter
// topic; nothing is lost on the way.
func TestReconsumeLater(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 120*time.Second)
	const topic, n = "public/default/reconsume", 6
	dlq, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic + "-s-DLQ", Subscription: "check", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen, props := map[string]int{}, map[string]map[string]string{}
	go collectDLQ(ctx, dlq, &mu, seen, props)
	delay := 300 * time.Millisecond
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.Shared, InitialPosition: client.Earliest,
		DeadLetter: &client.DeadLetterPolicy{MaxRedeliveries: 2, EnableRetry: true, RetryDelays: []time.Duration{delay}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 3})
	if err != nil {
		t.Fatal(err)
	}
	produceN(t, p, 0, n)
	times := map[string][]string{}
	reconsumedAt := map[string]time.Time{}
	for range 3 * n {
		m := receiveN(t, co, 1, 60*time.Second, false)[0]
		pl := string(m.Payload)
		times[pl] = append(times[pl], m.Properties[client.PropertyReconsumeTimes])
		// The retry copy is held back by delayed delivery for the delay level.
		if at, ok := reconsumedAt[pl]; ok && time.Since(at) < delay {
			t.Fatalf("message %q back %v after ReconsumeLater, before its %v delay", pl, time.Since(at), delay)
		}
		reconsumedAt[pl] = time.Now()
		if err := co.ReconsumeLater(ctx, m, 0); err != nil {
			t.Fatal(err)
		}
	}
	for pl, ts := range times {
		if len(ts) != 3 || ts[0] != "" || ts[1] != "1" || ts[2] != "2" {
			t.Fatalf("message %q received with RECONSUMETIMES %q, want [\"\" 1 2]", pl, ts)
		}
	}
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("m%d", i)
	}
	waitDLQ(t, &mu, seen, want, 60*time.Second)
	mu.Lock()
	for pl, pr := range props {
		if pr[client.PropertyRealTopic] != topic || pr[client.PropertyReconsumeTimes] != "2" {
			t.Fatalf("dead-lettered %q has properties %v", pl, pr)
		}
	}
	mu.Unlock()
	expectNothing(t, co, 500*time.Millisecond)
	// Without EnableRetry it is refused.
	plain, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "plain", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	m := receiveN(t, plain, 1, 60*time.Second, false)[0]
	if err := plain.ReconsumeLater(ctx, m, time.Second); !errors.Is(err, client.ErrNotAllowed) {
		t.Fatalf("ReconsumeLater without EnableRetry: %v, want ErrNotAllowed", err)
	}
}

// produceKeylessN is produceN without keys (the producer closes a batch
// when the key changes, so keyed messages do not batch together).
func produceKeylessN(t *testing.T, p *client.Producer, first, n int) []client.MessageID {
	t.Helper()
	ctx := tctx(t, 60*time.Second)
	ids := make([]client.MessageID, n)
	var mu sync.Mutex
	var firstErr error
	for i := range n {
		p.SendAsync(ctx, &client.Message{Payload: fmt.Appendf(nil, "m%d", first+i)},
			func(id client.MessageID, _ *client.Message, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				ids[i] = id
			})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		t.Fatalf("send: %v", firstErr)
	}
	return ids
}

// TestBatchIndexAcksReplicatedTopic: on a topic replicated between two
// regions, a replicated subscription acknowledging 5 of the 20 messages
// of one batch in region a shows msg_backlog 15 there; batch-index acks
// are per region, so region b's copy of the subscription still counts the
// whole entry (20) until the entry is acknowledged as a whole, which
// replicates: then both backlogs are empty.
func TestBatchIndexAcksReplicatedTopic(t *testing.T) {
	m := regiontest.StartRegions(t, regiontest.MultiOptions{Regions: []string{"a", "b"}, Brokers: 1})
	ca, cb := newClient(t, m.Region("a").Addrs()[0]), newClient(t, m.Region("b").Addrs()[0])
	ctx := tctx(t, 180*time.Second)
	aa, err := ca.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ab, err := cb.Admin()
	if err != nil {
		t.Fatal(err)
	}
	if err := aa.CreateNamespace(ctx, "public/acks", &clientv1.NamespacePolicies{RetentionTimeSeconds: -1, RetentionSizeBytes: -1,
		ReplicationRegions: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	const topic = "public/acks/batch-repl"
	co, err := ca.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.Shared, InitialPosition: client.Earliest, Replicated: true})
	if err != nil {
		t.Fatal(err)
	}
	produceBatch(t, ca, topic, "m", 20)
	ms := receiveN(t, co, 20, 60*time.Second, false)
	for _, m := range ms[:5] {
		if err := co.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	subStats(t, aa, topic, "s", "msg_backlog 15 in region a", func(ss *clientv1.SubscriptionStats) bool {
		return ss.GetMsgBacklog() == 15 && ss.GetBacklogEntries() == 1 && !ss.GetMsgBacklogEstimated()
	})
	subStats(t, ab, topic, "s", "the whole entry in region b's backlog", func(ss *clientv1.SubscriptionStats) bool {
		return ss.GetBacklogEntries() == 1 && ss.GetMsgBacklog() == 20
	})
	for _, m := range ms[5:] {
		if err := co.Ack(ctx, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	subStats(t, aa, topic, "s", "an empty backlog in region a", func(ss *clientv1.SubscriptionStats) bool {
		return ss.GetMsgBacklog() == 0 && ss.GetBacklogEntries() == 0
	})
	subStats(t, ab, topic, "s", "an empty backlog in region b", func(ss *clientv1.SubscriptionStats) bool {
		return ss.GetMsgBacklog() == 0 && ss.GetBacklogEntries() == 0
	})
}

// TestBatchIndexAckBadIndexChangesNothing: on the wire, a batch-index ack
// with an index past the entry's message count is refused with an error
// naming the index and the range, and none of the request (not even its
// valid part) is applied.
func TestBatchIndexAckBadIndexChangesNothing(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	a, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	const topic = "public/default/bad-index"
	ctx := tctx(t, 60*time.Second)
	produceBatch(t, c, topic, "m", 4)
	if err := a.CreateSubscription(ctx, topic, "s", client.Earliest); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(sa.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := clientv1.NewMeridianClient(conn).Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Subscribe{Subscribe: &clientv1.Subscribe{
		Topic: topic, Subscription: "s", Type: clientv1.SubscriptionType_SUBSCRIPTION_TYPE_SHARED}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // Subscribed
		t.Fatal(err)
	}
	if err := stream.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Flow{Flow: &clientv1.Flow{Permits: 1}}}); err != nil {
		t.Fatal(err)
	}
	var id *clientv1.MessageId
	for id == nil {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		id = r.GetMessage().GetMessageId()
	}
	if err := stream.Send(&clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Ack{Ack: &clientv1.Ack{RequestId: 7, BatchIndexAcks: []*clientv1.BatchIndexAck{
		{LedgerId: id.GetLedgerId(), EntryId: id.GetEntryId(), BatchIndexes: []int32{0, 1}},
		{LedgerId: id.GetLedgerId(), EntryId: id.GetEntryId(), BatchIndexes: []int32{4}},
	}}}}); err != nil {
		t.Fatal(err)
	}
	var ar *clientv1.AckResponse
	for ar == nil {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		ar = r.GetAckResponse()
	}
	if e := ar.GetError(); e.GetCode() != clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT || !strings.Contains(e.GetMessage(), "index 4") || !strings.Contains(e.GetMessage(), "[0, 4)") {
		t.Fatalf("ack answer %v: want INVALID_ARGUMENT naming index 4 and the range [0, 4)", ar)
	}
	ss := subStats(t, a, topic, "s", "4 messages in the backlog", func(ss *clientv1.SubscriptionStats) bool { return ss.GetMsgBacklog() == 4 })
	if ss.GetPartiallyAckedEntries() != 0 {
		t.Fatalf("stats %v: the valid part of the refused ack was applied", ss)
	}
}
