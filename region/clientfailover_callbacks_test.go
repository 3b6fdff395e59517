package region_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
)

// Send callbacks across client failover: Producer.SendAsync promises one
// callback per accepted message. A switch drops the old region's stream
// while batches are in flight on it, and the producer resends them in the
// new region; the paths that could resolve a batch twice or never are a
// receipt of the old stream racing a resend's receipt, a send timeout
// racing a late receipt, and a switch during a connection attempt. The
// test below drives all three, round after round, and counts the
// callbacks of every message.

// cbProducer is one producer of the callback test with its messages.
type cbProducer struct {
	name string
	p    *client.Producer
	// calls[n] counts the callbacks of message n (appended before the
	// SendAsync that sends it; read under cbWorkload.mu).
	calls []*atomic.Int32
}

// cbAck is a message's receipt as its callback saw it.
type cbAck struct {
	region string // the producer's region at the callback
	id     client.MessageID
	dup    bool // the broker had stored the batch already
	at     time.Time
}

// cbWorkload produces numbered messages on several producers of one
// multi-region client and consumes them on a consumer of the same client.
type cbWorkload struct {
	cl    *client.Client
	prods []*cbProducer
	co    *client.Consumer

	mu       sync.Mutex
	acked    map[string]cbAck // "producer/n" -> its receipt
	failed   map[string]int   // error (first line) -> messages failed with it
	doubles  []string         // "producer/n: callback k (err)" of every extra callback
	received map[string]int   // "producer/n" -> deliveries

	stop     chan struct{} // ends producing
	stopOnce sync.Once
	prodWG   sync.WaitGroup
	consStop context.CancelFunc
	consWG   sync.WaitGroup
}

func (w *cbWorkload) produce(cp *cbProducer) {
	defer w.prodWG.Done()
	for n := 0; ; n++ {
		// Two messages every 3 ms: batches of one to a few messages, and
		// enough in flight at a cut to have something to resend.
		if n%2 == 0 {
			select {
			case <-w.stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
		}
		id := fmt.Sprintf("%s/%d", cp.name, n)
		calls := new(atomic.Int32)
		w.mu.Lock()
		cp.calls = append(cp.calls, calls)
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cp.p.SendAsync(ctx, &client.Message{Payload: []byte("cb-" + id), Properties: map[string]string{"id": id}},
			func(mid client.MessageID, m *client.Message, err error) {
				cancel()
				k := calls.Add(1)
				region := cp.p.Region()
				w.mu.Lock()
				defer w.mu.Unlock()
				if k > 1 {
					w.doubles = append(w.doubles, fmt.Sprintf("%s: callback %d (err %v)", id, k, err))
					return
				}
				if err != nil {
					w.failed[errKind(err)]++
					return
				}
				w.acked[id] = cbAck{region: region, id: mid, dup: m.Duplicate, at: time.Now()}
			})
	}
}

// errKind names an error by the client sentinel it wraps, for the log.
func errKind(err error) string {
	for _, s := range []error{client.ErrSendTimeout, client.ErrProducerClosed, client.ErrUnavailable, context.DeadlineExceeded} {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return err.Error()
}

func (w *cbWorkload) consume(ctx context.Context) {
	defer w.consWG.Done()
	sem := make(chan struct{}, 64)
	var acks sync.WaitGroup
	defer acks.Wait()
	for {
		m, err := w.co.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if id := m.Properties["id"]; id != "" {
			w.mu.Lock()
			w.received[id]++
			w.mu.Unlock()
		}
		select { // acknowledgements run concurrently, at most 64 at a time
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		acks.Add(1)
		go func(id client.MessageID) {
			defer acks.Done()
			defer func() { <-sem }()
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = w.co.Ack(actx, id)
			cancel()
		}(m.ID)
	}
}

// ackedCount is how many messages were acknowledged so far.
func (w *cbWorkload) ackedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// waitAcks waits until n more messages are acknowledged than at the call.
func (w *cbWorkload) waitAcks(t *testing.T, n int, what string) {
	t.Helper()
	a0 := w.ackedCount()
	waitFor(t, 30*time.Second, fmt.Sprintf("%d more messages acknowledged (%s)", n, what), func() bool {
		return w.ackedCount() >= a0+n
	})
}

// checkCallbacks asserts that no message got more than one callback and,
// with all, that every message sent got one; it returns how many were
// sent.
func (w *cbWorkload) checkCallbacks(t *testing.T, when string, all bool) int {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var none []string
	sent := 0
	for _, cp := range w.prods {
		for n, c := range cp.calls {
			sent++
			if c.Load() == 0 {
				none = append(none, fmt.Sprintf("%s/%d", cp.name, n))
			}
		}
	}
	if len(w.doubles) > 0 {
		t.Errorf("%s: %d extra send callbacks (each SendAsync must call back once): %v", when, len(w.doubles), w.doubles[:min(10, len(w.doubles))])
	}
	if all && len(none) > 0 {
		t.Errorf("%s: %d of %d messages never called back (first: %v)", when, len(none), sent, none[:min(10, len(none))])
	}
	w.doubles = nil // reported once
	return sent
}

// within runs f and reports whether it returned within d (f keeps
// running otherwise).
func within(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// TestClientFailoverSendCallbacksOnce: producers of a multi-region client
// send while the client moves between regions a and b, round after round:
// a move away from a region whose path is cut (the batches in flight stall
// there and reach it at the heal, after their resends were acknowledged
// in the other region), two switches in quick succession (connection
// attempts cut short), and a cut longer than the send timeout without a
// move (timeouts, then late receipts; one producer keeps its stream, the
// other drops it after StallTimeouts). Every SendAsync must be called
// back exactly once, and every acknowledged message must be delivered.
func TestClientFailoverSendCallbacksOnce(t *testing.T) {
	g, topic := foSetup(t)
	rwA, rwB := proxyClientPath(t, g, "a"), proxyClientPath(t, g, "b")
	fo := foTimings
	// A group target that is never set: the client moves only on SwitchTo,
	// so the test decides when (and switches back at once, without waiting
	// for SwitchBackDelay).
	fo.Mode, fo.Group = client.FailoverControlled, "cbonce"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Options{
		Regions:     []client.RegionURL{{Name: "a", URL: g.url("a")}, {Name: "b", URL: g.url("b")}},
		Failover:    fo,
		DialRewrite: func(addr string) string { return rwB(rwA(addr)) },
		MaxBackoff:  200 * time.Millisecond,
		Logger:      foLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &cbWorkload{cl: cl, acked: map[string]cbAck{}, failed: map[string]int{}, received: map[string]int{}, stop: make(chan struct{})}
	t.Cleanup(func() {
		w.stopOnce.Do(func() { close(w.stop) })
		w.prodWG.Wait()
		if w.consStop != nil {
			w.consStop()
		}
		w.consWG.Wait()
		// Bounded: a batch resolved twice releases its pending slots twice,
		// which can leave the producer's callback goroutine blocked and
		// Close waiting for it forever; the test must fail, not hang.
		if !within(20*time.Second, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_ = cl.Close(ctx)
		}) {
			t.Errorf("client Close did not return within 20s (a producer's callback goroutine blocked?)")
		}
	})
	const sendTimeout = 1500 * time.Millisecond
	for _, po := range []struct {
		name  string
		stall int
	}{
		{"keep", -1}, // never drops its stream for timeouts: late receipts arrive on it
		{"drop", 3},  // drops its stream after 3 timeouts in a row
	} {
		p, err := cl.NewProducer(ctx, client.ProducerOptions{Topic: topic, Name: "cb-" + po.name, BatchingMaxMessages: 10,
			BatchingMaxDelay: 2 * time.Millisecond, SendTimeout: sendTimeout, StallTimeouts: po.stall, BlockIfQueueFull: true})
		if err != nil {
			t.Fatal(err)
		}
		w.prods = append(w.prods, &cbProducer{name: po.name, p: p})
	}
	w.co, err = cl.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "s", Type: client.Shared})
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	w.consStop = ccancel
	w.consWG.Add(1)
	go w.consume(cctx)
	for _, cp := range w.prods {
		w.prodWG.Add(1)
		go w.produce(cp)
	}
	w.waitAcks(t, 100, "start in a")

	switchTo := func(r string) {
		t.Helper()
		if err := cl.SwitchTo(r); err != nil {
			t.Fatal(err)
		}
	}
	// moveAway cuts the client's path to from, lets batches stall in it,
	// moves to to, and heals from once to acknowledged more: the stalled
	// batches then reach from, already resent and acknowledged in to.
	step := func(what string) {
		t.Logf("%s %s (%d acknowledged)", time.Now().Format("15:04:05.000"), what, w.ackedCount())
	}
	moveAway := func(from, to string) {
		t.Helper()
		step("cut client-" + from + ", then move to " + to)
		g.net.Cut("client", from, false)
		time.Sleep(150 * time.Millisecond)
		switchTo(to)
		w.waitAcks(t, 50, "moved "+from+" -> "+to)
		g.net.Heal("client", from)
	}
	const rounds = 3
	for round := range rounds {
		step(fmt.Sprintf("round %d", round))
		moveAway("a", "b")
		moveAway("b", "a")
		// Two switches in quick succession: the second cuts short the
		// reconnects the first started.
		step("switch to b and back to a")
		switchTo("b")
		time.Sleep(time.Duration(5+10*round) * time.Millisecond)
		switchTo("a")
		w.waitAcks(t, 50, "b and back to a")
		// A cut longer than the send timeout, healed in place: the sends in
		// flight time out, and their receipts come after the heal.
		step("cut client-a past the send timeout")
		g.net.Cut("client", "a", false)
		time.Sleep(sendTimeout + 500*time.Millisecond)
		g.net.Heal("client", "a")
		w.waitAcks(t, 50, "healed in a")
	}
	w.stopOnce.Do(func() { close(w.stop) })
	w.prodWG.Wait()
	step("stopped producing")
	w.checkCallbacks(t, "before the flush", false)
	for _, cp := range w.prods {
		fctx, fcancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := cp.p.Flush(fctx)
		fcancel()
		if err != nil {
			w.checkCallbacks(t, "at the failed flush", true)
			t.Fatalf("flush %s: %v (callbacks stuck, or a batch never resolved)", cp.name, err)
		}
		if st := cp.p.Stats(); st.Pending != 0 {
			t.Errorf("producer %s: %d messages pending after the flush, want 0", cp.name, st.Pending)
		}
	}
	sent := w.checkCallbacks(t, "after the flush", true)

	// Every acknowledged message is delivered (the consumer is in a; what b
	// acknowledged reaches a by replication).
	deadline := time.Now().Add(geoConverge)
	for {
		w.mu.Lock()
		var missing []string
		for id := range w.acked {
			if w.received[id] == 0 {
				missing = append(missing, id)
			}
		}
		acked, dups, inB := len(w.acked), 0, 0
		for _, c := range w.received {
			dups += c - 1
		}
		for _, r := range w.acked {
			if r.region == "b" {
				inB++
			}
		}
		failed := fmt.Sprint(w.failed)
		w.mu.Unlock()
		if len(missing) == 0 {
			t.Logf("%d sent, %d acknowledged (%d by b), failed %s; no acknowledged loss, %d duplicate deliveries", sent, acked, inB, failed, dups)
			break
		}
		if time.Now().After(deadline) {
			sort.Strings(missing)
			w.mu.Lock()
			var desc []string
			for _, id := range missing[:min(10, len(missing))] {
				a := w.acked[id]
				desc = append(desc, fmt.Sprintf("%s (acknowledged by %s at %s, id %v, duplicate %v)", id, a.region, a.at.Format("15:04:05.000"), a.id, a.dup))
			}
			w.mu.Unlock()
			t.Errorf("%d of %d acknowledged messages never received: %v", len(missing), acked, desc)
			for _, r := range []string{"a", "b"} {
				t.Logf("region %s stores them: %v", r, storedIn(t, g.url(r), topic, missing))
			}
			t.FailNow()
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, cp := range w.prods {
		t.Logf("producer %s: %+v", cp.name, cp.p.Stats())
		if !within(15*time.Second, func() {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := cp.p.Close(cctx); err != nil {
				t.Errorf("close %s: %v", cp.name, err)
			}
		}) {
			t.Fatalf("close %s did not return within 15s", cp.name)
		}
	}
	// Closing resolves nothing a second time.
	w.checkCallbacks(t, "after close", true)
}

// storedIn reads topic from the start in the region at url (until 2 s
// pass without a message) and returns how many copies of each of ids it
// stores: it tells a message never stored from one stored but not
// delivered to the subscription.
func storedIn(t *testing.T, url, topic string, ids []string) map[string]int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]int{}
	for _, id := range ids {
		out[id] = 0
	}
	cl, err := client.New(ctx, client.Options{URL: url, Logger: foLogger(t)})
	if err != nil {
		t.Logf("scan %s: %v", url, err)
		return out
	}
	defer cl.Close(ctx)
	rd, err := cl.NewReader(ctx, client.ReaderOptions{Topic: topic, Start: client.StartEarliest()})
	if err != nil {
		t.Logf("scan %s: %v", url, err)
		return out
	}
	defer rd.Close(ctx)
	for {
		nctx, ncancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := rd.Next(nctx)
		ncancel()
		if err != nil {
			return out
		}
		if _, ok := out[m.Properties["id"]]; ok {
			out[m.Properties["id"]]++
		}
	}
}
