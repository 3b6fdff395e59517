package region_test

import (
	"context"
	"encoding/binary"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
)

// TestGeoReplicationLagLong measures, between two in-process regions with
// an injected one-way latency, the end-to-end replication lag (send in a
// to receive in b) at a steady rate, the catch-up rate after a cut, and the
// time from the heal to the first entry delivered. It only runs with
// GEO_BENCH=1 (a long variant, `make test-long`-style): numbers on a
// loaded 2-core machine are indicative, and nothing is asserted about them.
// GEO_BENCH_RATE (msg/s, default 1000), GEO_BENCH_LATENCY (default 40ms),
// GEO_BENCH_SECONDS (default 10), GEO_BENCH_CUT (default 20s).
func TestGeoReplicationLagLong(t *testing.T) {
	if os.Getenv("GEO_BENCH") == "" {
		t.Skip("GEO_BENCH not set")
	}
	rate := envInt("GEO_BENCH_RATE", 1000)
	secs := envInt("GEO_BENCH_SECONDS", 10)
	lat := envDur("GEO_BENCH_LATENCY", 40*time.Millisecond)
	cut := envDur("GEO_BENCH_CUT", 20*time.Second)
	m := regiontest.StartRegions(t, regiontest.MultiOptions{Regions: []string{"a", "b"}, Brokers: 1, Latency: lat})
	g := &geoCluster{t: t, m: m, net: m.Network, names: []string{"a", "b"}, killed: map[string]map[int]bool{}}
	g.createNamespace("public/geo", "a", "b")
	topic := "public/geo/bench"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var acked, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	var mu sync.Mutex
	var lags []time.Duration
	// trace holds (send time, lag) for GEO_BENCH_TRACE=1: the lag over time.
	type sample struct {
		sent time.Time
		lag  time.Duration
	}
	var trace []sample
	// Lags count from the second second on: the first includes the topic's
	// creation in b and the replication stream's opening.
	var warmEnd time.Time
	var lastRecv time.Time
	received := 0
	cl, err := client.New(ctx, client.Options{URL: g.url("b")})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(context.Background())
	co, err := cl.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "bench", InitialPosition: client.Earliest, ReceiverQueueSize: 5000})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			msg, err := co.Receive(ctx)
			if err != nil {
				return
			}
			now := time.Now()
			if len(msg.Payload) >= 8 {
				sent := time.Unix(0, int64(binary.BigEndian.Uint64(msg.Payload)))
				mu.Lock()
				if !warmEnd.IsZero() && sent.After(warmEnd) {
					lags = append(lags, now.Sub(sent))
					trace = append(trace, sample{sent, now.Sub(sent)})
				}
				received++
				lastRecv = now
				mu.Unlock()
			}
			_ = co.Ack(ctx, msg.ID)
		}
	}()
	pcl, err := client.New(ctx, client.Options{URL: g.url("a")})
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close(context.Background())
	p, err := pcl.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	produceUntil := func(d time.Duration, stop <-chan struct{}) int {
		n := 0
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			select {
			case <-tick.C:
			case <-stop:
				return n
			}
			for range rate / 100 {
				payload := make([]byte, 1024)
				binary.BigEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
				p.SendAsync(ctx, &client.Message{Payload: payload}, func(_ client.MessageID, _ *client.Message, err error) {
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, &err)
						return
					}
					acked.Add(1)
				})
				n++
			}
		}
		return n
	}
	// settled waits until every send so far has its answer and returns the
	// acknowledged count: the test expects exactly those in b (a send that
	// failed may be stored or not; none failed in the recorded runs).
	settled := func(n int) int {
		waitFor(t, 5*time.Minute, "answers to every send", func() bool { return int(acked.Load()+failed.Load()) >= n })
		if f := failed.Load(); f > 0 {
			t.Logf("%d sends failed (first: %v); they are not counted", f, *firstErr.Load())
		}
		return int(acked.Load())
	}
	produce := func(d time.Duration) int { return produceUntil(d, nil) }
	waitReceived := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			got := received
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				st, _ := g.stats("a", topic)
				t.Fatalf("b received %d messages, %d acknowledged in a (%d failed sends); a's replicators: %v", got, n, failed.Load(), st.GetReplicators())
			}
		}
	}
	// Steady state.
	mu.Lock()
	warmEnd = time.Now().Add(time.Second)
	mu.Unlock()
	sent := settled(produce(time.Duration(secs) * time.Second))
	waitReceived(sent)
	mu.Lock()
	sorted := slices.Clone(lags)
	mu.Unlock()
	slices.Sort(sorted)
	pct := func(q float64) time.Duration { return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))] }
	if os.Getenv("GEO_BENCH_TRACE") != "" {
		mu.Lock()
		tr := slices.Clone(trace)
		mu.Unlock()
		slices.SortFunc(tr, func(a, b sample) int { return a.sent.Compare(b.sent) })
		for i := 0; i < len(tr); {
			j, worst := i, time.Duration(0)
			for j < len(tr) && tr[j].sent.Sub(tr[i].sent) < 250*time.Millisecond {
				worst = max(worst, tr[j].lag)
				j++
			}
			t.Logf("sent +%v: %d messages, max lag %v", tr[i].sent.Sub(warmEnd).Round(time.Millisecond), j-i, worst.Round(time.Millisecond))
			i = j
		}
	}
	t.Logf("steady %d msg/s x 1 KiB, one-way latency %v: %d messages (after the first second), end-to-end lag p50 %v p99 %v max %v",
		rate, lat, len(sorted), pct(0.5), pct(0.99), sorted[len(sorted)-1])

	// Cut, produce, heal: reconnect time and catch-up rate.
	g.net.Cut("a", "b", false)
	issued := sent + produce(cut)
	mu.Lock()
	before := received
	mu.Unlock()
	healed := time.Now()
	g.net.Heal("a", "b")
	// Production goes on at the same rate while the backlog drains.
	stopAfter := make(chan struct{})
	afterDone := make(chan int, 1)
	go func() { afterDone <- produceUntil(time.Hour, stopAfter) }()
	waitFor(t, time.Minute, "first entry after the heal", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return received > before
	})
	mu.Lock()
	firstAfter := lastRecv.Sub(healed)
	mu.Unlock()
	during := settled(issued) - sent
	waitReceived(sent + during)
	mu.Lock()
	catchUp := lastRecv.Sub(healed)
	mu.Unlock()
	close(stopAfter)
	total := settled(issued + <-afterDone)
	waitReceived(total)
	backlog := sent + during - before
	t.Logf("cut %v while producing %d msg/s: %d messages backlog; first delivered %v after the heal; backlog drained in %v while production went on (%.0f msg/s, %.1fx the produce rate)",
		cut, rate, backlog, firstAfter.Round(time.Millisecond), catchUp.Round(time.Millisecond),
		float64(backlog)/catchUp.Seconds(), float64(backlog)/catchUp.Seconds()/float64(rate))
	st, err := g.stats("a", topic)
	if err == nil {
		for _, r := range st.GetReplicators() {
			t.Logf("replicator to %s: window %d bytes, rtt %.1f ms, reconnects %d", r.GetRemoteRegion(), r.GetWindowBytes(), r.GetRttMs(), r.GetReconnects())
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDur(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}
