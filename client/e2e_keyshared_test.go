package client_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/internal/wire"
)

// ksChecker watches what the application sees of a Key_Shared
// subscription and records every ordering violation:
//   - at any time, the messages of one key received and not yet finished
//     (acknowledged or nacked) are all on one consumer (the draining rule);
//   - per key, first deliveries (redelivery count 0) arrive in publish
//     order across all consumers (set-aside entries never overtaken).
type ksChecker struct {
	mu          sync.Mutex
	outstanding map[string]map[int]string // key -> seq -> consumer
	lastFresh   map[string]int            // key -> highest seq first-delivered
	acked       map[string]map[int]bool
	received    int
	dups        int
	violations  []string
}

func newKSChecker() *ksChecker {
	return &ksChecker{outstanding: map[string]map[int]string{}, lastFresh: map[string]int{}, acked: map[string]map[int]bool{}}
}

func (k *ksChecker) violate(f string, a ...any) {
	if len(k.violations) < 20 {
		k.violations = append(k.violations, fmt.Sprintf(f, a...))
	}
}

// receive records that consumer got m.
func (k *ksChecker) receive(consumer string, m *client.ReceivedMessage) (key string, seq int) {
	key = m.Key
	seq, _ = strconv.Atoi(m.Properties["seq"])
	k.mu.Lock()
	defer k.mu.Unlock()
	k.received++
	for s, c := range k.outstanding[key] {
		if c != consumer {
			k.violate("key %s: seq %d delivered to %s while seq %d is unacknowledged on %s", key, seq, consumer, s, c)
		}
	}
	if m.RedeliveryCount == 0 {
		if last, ok := k.lastFresh[key]; ok && seq <= last {
			k.violate("key %s: seq %d first delivered to %s after seq %d", key, seq, consumer, last)
		}
		k.lastFresh[key] = max(k.lastFresh[key], seq)
	}
	if k.outstanding[key] == nil {
		k.outstanding[key] = map[int]string{}
	}
	k.outstanding[key][seq] = consumer
	return key, seq
}

// finish records that the application is done with (key, seq): acked or
// nacked. Called before the Ack/Nack is sent.
func (k *ksChecker) finish(key string, seq int, ack bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.outstanding[key], seq)
	if ack {
		if k.acked[key] == nil {
			k.acked[key] = map[int]bool{}
		}
		if k.acked[key][seq] {
			k.dups++
		}
		k.acked[key][seq] = true
	}
}

func (k *ksChecker) ackedCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, m := range k.acked {
		n += len(m)
	}
	return n
}

// ksConsumer runs one consumer's receive loop until stopped.
type ksConsumer struct {
	name   string
	co     *client.Consumer
	cancel context.CancelFunc
	done   chan struct{}
}

// startKSConsumer subscribes and processes messages: each is held a
// moment (so that several are in flight), then every nackEvery-th one is
// nacked, the others acknowledged.
func startKSConsumer(t *testing.T, c *client.Client, k *ksChecker, topic, sub, name string, nackEvery int, opts *client.KeySharedOptions) *ksConsumer {
	t.Helper()
	ctx := tctx(t, 30*time.Second)
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.KeyShared, Name: name,
		InitialPosition: client.Earliest, ReceiverQueueSize: 50, KeyShared: opts,
		NackRedeliveryDelay: 10 * time.Millisecond}) // nacks redeliver at once (Pulsar default: 1 min)
	if err != nil {
		t.Fatalf("subscribe %s: %v", name, err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	kc := &ksConsumer{name: name, co: co, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(kc.done)
		n := 0
		for {
			m, err := co.Receive(rctx)
			if err != nil {
				return
			}
			key, seq := k.receive(name, m)
			n++
			if n%3 == 0 {
				time.Sleep(time.Millisecond) // processing: keeps messages in flight
			}
			nack := nackEvery > 0 && n%nackEvery == 0
			k.finish(key, seq, !nack)
			if nack {
				_ = co.Nack(context.Background(), m.ID)
			} else {
				_ = co.Ack(context.Background(), m.ID)
			}
		}
	}()
	return kc
}

// stop ends the receive loop (the message in hand is finished first) and
// closes the consumer: what it holds unacknowledged is redelivered.
func (kc *ksConsumer) stop(t *testing.T) {
	kc.cancel()
	<-kc.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kc.co.Close(ctx); err != nil {
		t.Logf("close %s: %v", kc.name, err)
	}
}

// TestKeySharedJoinLeaveUnderLoadWithNacks: consumers join and leave a
// Key_Shared subscription while messages of 30 keys are produced and some
// are nacked. Per key, no two consumers ever hold unacknowledged messages
// at once, first deliveries follow publish order, and every message is
// acknowledged in the end (no key stuck, none lost).
func TestKeySharedJoinLeaveUnderLoadWithNacks(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	const topic, sub, keys, total = "public/default/ks-load", "ks", 30, 3000
	k := newKSChecker()
	cons := map[string]*ksConsumer{}
	for _, n := range []string{"c0", "c1"} {
		cons[n] = startKSConsumer(t, c, k, topic, sub, n, 7, nil)
	}
	ctx := tctx(t, 120*time.Second)
	// One message per entry: a nack then redelivers exactly one message.
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 1, MaxPendingMessages: 200, BlockIfQueueFull: true})
	if err != nil {
		t.Fatal(err)
	}
	var sendErr error
	var sendMu sync.Mutex
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		seq := map[string]int{}
		for i := range total {
			key := fmt.Sprintf("key-%d", i%keys)
			m := &client.Message{Key: key, Payload: fmt.Appendf(nil, "%s/%d", key, seq[key]), Properties: map[string]string{"seq": strconv.Itoa(seq[key])}}
			seq[key]++
			p.SendAsync(ctx, m, func(_ client.MessageID, _ *client.Message, err error) {
				if err != nil {
					sendMu.Lock()
					sendErr = errors.Join(sendErr, err)
					sendMu.Unlock()
				}
			})
			if i%100 == 99 {
				_ = p.Flush(ctx)
			}
		}
		_ = p.Flush(ctx)
	}()
	waitAcked := func(n int, what string) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for k.ackedCount() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: only %d of %d acknowledged", what, k.ackedCount(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Joins and leaves while the load runs.
	waitAcked(total/6, "before c2 joins")
	cons["c2"] = startKSConsumer(t, c, k, topic, sub, "c2", 7, nil)
	waitAcked(2*total/6, "before c0 leaves")
	cons["c0"].stop(t)
	delete(cons, "c0")
	waitAcked(3*total/6, "before c3 joins")
	cons["c3"] = startKSConsumer(t, c, k, topic, sub, "c3", 5, nil)
	waitAcked(4*total/6, "before c1 leaves")
	cons["c1"].stop(t)
	delete(cons, "c1")
	<-prodDone
	sendMu.Lock()
	if sendErr != nil {
		t.Fatalf("send: %v", sendErr)
	}
	sendMu.Unlock()
	waitAcked(total, "at the end (a key is stuck or a message lost)")
	for _, kc := range cons {
		kc.stop(t)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, m := range k.acked {
		if len(m) != total/keys {
			t.Errorf("key %s: %d of %d messages acknowledged", key, len(m), total/keys)
		}
	}
	t.Logf("key_shared under load: %d deliveries for %d messages, %d acknowledged twice (duplicates)", k.received, total, k.dups)
	for _, v := range k.violations {
		t.Error(v)
	}
}

// keysIn returns n keys whose slots are in [lo, hi].
func keysIn(n int, lo, hi int32) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		key := fmt.Sprintf("key-%d", i)
		if s := wire.KeySlot(key); s >= lo && s <= hi {
			out = append(out, key)
		}
	}
	return out
}

// TestKeySharedStickyValidationAndUncoveredSlots: overlapping sticky
// ranges are refused with an error naming both consumers and ranges; bad
// ranges and mixed modes are refused; entries whose slot no consumer
// covers wait (the stats show them) and go out when a consumer covers it.
func TestKeySharedStickyValidationAndUncoveredSlots(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	const topic, sub = "public/default/ks-sticky", "st"
	ctx := tctx(t, 90*time.Second)
	subscribe := func(name string, o *client.KeySharedOptions) (*client.Consumer, error) {
		return c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.KeyShared, Name: name,
			InitialPosition: client.Earliest, KeyShared: o})
	}
	low, err := subscribe("low", &client.KeySharedOptions{Sticky: []client.HashRange{{Start: 0, End: 32767}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = subscribe("overlap", &client.KeySharedOptions{Sticky: []client.HashRange{{Start: 40000, End: 50000}, {Start: 32000, End: 32999}}})
	if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "overlap") || !strings.Contains(err.Error(), "[32000, 32999]") ||
		!strings.Contains(err.Error(), "[0, 32767]") || !strings.Contains(err.Error(), "low") {
		t.Fatalf("overlapping sticky range: %v", err)
	}
	for _, bad := range [][]client.HashRange{{{Start: 40000, End: 70000}}, {{Start: 50000, End: 40000}}, {{Start: -1, End: 5}}} {
		if _, err := subscribe("bad", &client.KeySharedOptions{Sticky: bad}); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "key_shared.ranges[0]") {
			t.Fatalf("sticky range %v: %v", bad, err)
		}
	}
	if _, err := subscribe("auto", nil); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "key_shared.mode") {
		t.Fatalf("auto-split consumer on a sticky subscription: %v", err)
	}
	// Keys of both halves; only the low half is covered.
	lowKeys, highKeys := keysIn(5, 0, 32767), keysIn(5, 32768, 65535)
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		for _, key := range append(append([]string(nil), lowKeys...), highKeys...) {
			p.SendAsync(ctx, &client.Message{Key: key, Payload: fmt.Appendf(nil, "%s/%d", key, i), Properties: map[string]string{"seq": strconv.Itoa(i)}}, nil)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := receiveN(t, low, 50, 30*time.Second, true)
	for _, m := range got {
		if s := wire.KeySlot(m.Key); s > 32767 {
			t.Fatalf("consumer low [0, 32767] got key %s of slot %d", m.Key, s)
		}
	}
	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the stats show 50 uncovered entries", func() bool {
		st, err := adm.TopicStats(ctx, topic)
		if err != nil || len(st.GetSubscriptions()) != 1 {
			return false
		}
		s := st.GetSubscriptions()[0]
		return s.GetUncoveredEntries() == 50 && s.GetSetAsideEntries() == 50 && len(s.GetConsumers()) == 1 &&
			len(s.GetConsumers()[0].GetKeyHashRanges()) == 1
	})
	high, err := subscribe("high", &client.KeySharedOptions{Sticky: []client.HashRange{{Start: 32768, End: 65535}}})
	if err != nil {
		t.Fatal(err)
	}
	got = receiveN(t, high, 50, 30*time.Second, true)
	next := map[string]int{}
	for _, m := range got {
		seq, _ := strconv.Atoi(m.Properties["seq"])
		if wire.KeySlot(m.Key) < 32768 || seq != next[m.Key] {
			t.Fatalf("consumer high got %s seq %d (want seq %d, a high key)", m.Key, seq, next[m.Key])
		}
		next[m.Key]++
	}
}

// TestKeySharedStuckKeyDoesNotBlockOthers: a consumer that stops taking
// messages (no permits, nothing acknowledged) holds up only its own keys:
// the other consumer receives all of its keys' messages, in order, and the
// stuck keys' entries wait in the set-aside set.
func TestKeySharedStuckKeyDoesNotBlockOthers(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	const topic, sub = "public/default/ks-stuck", "st"
	ctx := tctx(t, 90*time.Second)
	stuck, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.KeyShared, Name: "stuck",
		InitialPosition: client.Earliest, ReceiverQueueSize: 5, KeyShared: &client.KeySharedOptions{Sticky: []client.HashRange{{Start: 0, End: 32767}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close(context.Background())
	live, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: sub, Type: client.KeyShared, Name: "live",
		InitialPosition: client.Earliest, KeyShared: &client.KeySharedOptions{Sticky: []client.HashRange{{Start: 32768, End: 65535}}}})
	if err != nil {
		t.Fatal(err)
	}
	stuckKeys, liveKeys := keysIn(10, 0, 32767), keysIn(10, 32768, 65535)
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 30
	for i := range rounds {
		// The stuck keys' messages come first in every round.
		for _, key := range append(append([]string(nil), stuckKeys...), liveKeys...) {
			p.SendAsync(ctx, &client.Message{Key: key, Payload: fmt.Appendf(nil, "%s/%d", key, i), Properties: map[string]string{"seq": strconv.Itoa(i)}}, nil)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got := receiveN(t, live, rounds*len(liveKeys), 60*time.Second, true)
	next := map[string]int{}
	for _, m := range got {
		seq, _ := strconv.Atoi(m.Properties["seq"])
		if seq != next[m.Key] {
			t.Fatalf("live consumer: key %s seq %d, want %d", m.Key, seq, next[m.Key])
		}
		next[m.Key]++
	}
	adm, err := c.Admin()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the stuck keys' entries are set aside", func() bool {
		st, err := adm.TopicStats(ctx, topic)
		if err != nil || len(st.GetSubscriptions()) != 1 {
			return false
		}
		s := st.GetSubscriptions()[0]
		t.Logf("set aside %d, backlog %d", s.GetSetAsideEntries(), s.GetBacklogEntries())
		return s.GetSetAsideEntries() > 0 && s.GetBacklogEntries() == int64(rounds*len(stuckKeys))
	})
	// The stuck consumer resumes: its keys come in order.
	got = receiveN(t, stuck, rounds*len(stuckKeys), 60*time.Second, true)
	next = map[string]int{}
	for _, m := range got {
		seq, _ := strconv.Atoi(m.Properties["seq"])
		if seq != next[m.Key] {
			t.Fatalf("stuck consumer: key %s seq %d, want %d", m.Key, seq, next[m.Key])
		}
		next[m.Key]++
	}
}

// TestKeySharedJoinWaitsForDrainUnlessOutOfOrder: a consumer that joins
// gets no message of a key while earlier messages of that key are
// unacknowledged on another consumer; with AllowOutOfOrder it gets them at
// once.
func TestKeySharedJoinWaitsForDrainUnlessOutOfOrder(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 120*time.Second)
	for _, outOfOrder := range []bool{false, true} {
		topic := fmt.Sprintf("public/default/ks-join-%v", outOfOrder)
		first, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.KeyShared, Name: "first", InitialPosition: client.Earliest})
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		const keys = 20
		send := func(round int) {
			for i := range keys {
				key := fmt.Sprintf("key-%d", i)
				p.SendAsync(ctx, &client.Message{Key: key, Payload: fmt.Appendf(nil, "%s/%d", key, round), Properties: map[string]string{"seq": strconv.Itoa(round)}}, nil)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		send(0)
		held := receiveN(t, first, keys, 30*time.Second, false) // every key unacknowledged on first
		second, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.KeyShared, Name: "second",
			KeyShared: &client.KeySharedOptions{AllowOutOfOrder: outOfOrder}})
		if err != nil {
			t.Fatal(err)
		}
		send(1)
		// first gets round 1 of its own keys; second (in order) nothing yet.
		if outOfOrder {
			got := receiveN(t, second, 1, 30*time.Second, true)
			if got[0].Properties["seq"] != "1" {
				t.Fatalf("out-of-order consumer got %s", got[0].Payload)
			}
		} else {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			m, err := second.Receive(rctx)
			cancel()
			if err == nil {
				t.Fatalf("joining consumer got %s while round 0 of every key is unacknowledged on first", m.Payload)
			}
			// first acknowledges round 0: second's keys flow, in order.
			for _, m := range held {
				if err := first.Ack(ctx, m.ID); err != nil {
					t.Fatal(err)
				}
			}
			got := receiveN(t, second, 1, 30*time.Second, true)
			if got[0].Properties["seq"] != "1" {
				t.Fatalf("joining consumer got %s first, want round 1", got[0].Payload)
			}
		}
		_ = first.Close(ctx)
		_ = second.Close(ctx)
	}
}

// TestKeySharedRefusesCumulativeAck: as on Shared, a cumulative ack would
// acknowledge other consumers' messages.
func TestKeySharedRefusesCumulativeAck(t *testing.T) {
	sa := startStandalone(t)
	c := newClient(t, sa.GRPCAddr())
	ctx := tctx(t, 60*time.Second)
	const topic = "public/default/ks-cumulative"
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.KeyShared, InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	produceN(t, p, 0, 3)
	got := receiveN(t, co, 3, 30*time.Second, false)
	if err := co.AckCumulative(ctx, got[2].ID); !errors.Is(err, client.ErrNotAllowed) {
		t.Fatalf("cumulative ack on key_shared: %v", err)
	}
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
