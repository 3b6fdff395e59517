package region_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/client"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Client failover between regions (client/failover*.go,
// broker/failover*.go): a multi-region client moves its producer and
// consumer to region b when region a fails, and back after the heal.

// foTimings are the failover options of these tests: small, so that the
// tests are short, and the bound a switch must meet.
var foTimings = client.FailoverOptions{
	Mode: client.FailoverAuto, ProbeInterval: 200 * time.Millisecond, ProbeTimeout: time.Second,
	FailedProbes: 3, SwitchBackDelay: 2 * time.Second,
}

// foSwitchBound is the longest a switch may take after the fault:
// FailedProbes probe rounds (each at most ProbeInterval + ProbeTimeout),
// one more round for the decision, and slack for a loaded CI machine.
func foSwitchBound(o client.FailoverOptions) time.Duration {
	return time.Duration(o.FailedProbes+1)*(o.ProbeInterval+o.ProbeTimeout) + 5*time.Second
}

// duplicates counts deliveries of a message received before.
func (w *foWorkload) duplicates() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := 0
	for _, c := range w.received {
		d += c - 1
	}
	return d
}

// redeliveries counts deliveries of a stored copy delivered before (the
// subscription's duplicates, not the producer's).
func (w *foWorkload) redeliveries() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := 0
	for _, c := range w.byOrigin {
		d += c - 1
	}
	return d
}

// foWorkload produces numbered messages and consumes them on one
// multi-region client, recording what was acknowledged and received.
type foWorkload struct {
	t  *testing.T
	cl *client.Client
	p  *client.Producer
	co *client.Consumer

	mu       sync.Mutex
	next     int
	acked    map[int]string // n -> region of the producer when acked
	fails    int
	received map[int]int // n -> deliveries
	// byOrigin counts deliveries per stored copy (origin region and ID): a
	// message stored twice (resent in b while its first copy was in flight
	// to a) has two copies; a copy delivered twice is a redelivery.
	byOrigin map[string]int
	events   []client.FailoverEvent
	reg      *prometheus.Registry // the client's metrics

	stop     chan struct{} // ends consuming (and producing)
	prodStop chan struct{} // ends producing
	prodWG   sync.WaitGroup
	wg       sync.WaitGroup
	stopOnce sync.Once
	prodOnce sync.Once
}

func foLogger(t *testing.T) *slog.Logger {
	if os.Getenv("GEO_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// foSetup starts regions a and b (namespace public/fo replicated to both),
// creates the topic and subscription "s" in both regions, and returns
// the cluster and the topic.
func foSetup(t *testing.T) (*geoCluster, string) {
	return foSetupWith(t, geoOptions{})
}

// foSetupWith is foSetup with the cluster's options.
func foSetupWith(t *testing.T, opts geoOptions) (*geoCluster, string) {
	g := startGeo(t, []string{"a", "b"}, opts)
	g.createNamespace("public/fo", "a", "b")
	topic := "public/fo/t"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, r := range []string{"a", "b"} {
		adm, err := client.NewAdmin(ctx, g.url(r))
		if err != nil {
			t.Fatal(err)
		}
		if err := adm.CreateTopic(ctx, topic); err != nil && !errors.Is(err, client.ErrAlreadyExists) {
			t.Fatalf("create topic in %s: %v", r, err)
		}
		if err := adm.CreateSubscription(ctx, topic, "s", client.Earliest); err != nil && !errors.Is(err, client.ErrAlreadyExists) {
			t.Fatalf("create subscription in %s: %v", r, err)
		}
		_ = adm.Close(ctx)
	}
	return g, topic
}

// startWorkload opens a client on regions a (addresses mapped by rewrite)
// and b, a producer and a consumer, and starts producing and consuming.
func startWorkload(t *testing.T, g *geoCluster, topic string, fo client.FailoverOptions, rewrite func(string) string) *foWorkload {
	t.Helper()
	return startWorkloadSub(t, g, topic, fo, rewrite, client.ConsumerOptions{Subscription: "s", Type: client.Shared})
}

// startWorkloadSub is startWorkload with the consumer's options (Topic is
// set here).
func startWorkloadSub(t *testing.T, g *geoCluster, topic string, fo client.FailoverOptions, rewrite func(string) string, copts client.ConsumerOptions) *foWorkload {
	t.Helper()
	w := &foWorkload{t: t, acked: map[int]string{}, reg: prometheus.NewRegistry(), received: map[int]int{}, byOrigin: map[string]int{}, stop: make(chan struct{}), prodStop: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Options{
		Regions:     []client.RegionURL{{Name: "a", URL: g.url("a")}, {Name: "b", URL: g.url("b")}},
		Failover:    fo,
		DialRewrite: rewrite,
		MaxBackoff:  500 * time.Millisecond,
		Logger:      foLogger(t),
		Registerer:  w.reg,
		OnFailover: func(ev client.FailoverEvent) {
			w.mu.Lock()
			w.events = append(w.events, ev)
			w.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.cl = cl
	if cl.ActiveRegion() != "a" {
		t.Fatalf("client starts in %q, want the primary a", cl.ActiveRegion())
	}
	w.p, err = cl.NewProducer(ctx, client.ProducerOptions{Topic: topic, Name: "fo-producer", BatchingMaxMessages: 10,
		BatchingMaxDelay: 2 * time.Millisecond, SendTimeout: 60 * time.Second, BlockIfQueueFull: true})
	if err != nil {
		t.Fatal(err)
	}
	copts.Topic = topic
	w.co, err = cl.Subscribe(ctx, copts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.halt()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = cl.Close(ctx)
	})
	w.prodWG.Add(1)
	w.wg.Add(1)
	go w.produce()
	go w.consume()
	return w
}

func (w *foWorkload) produce() {
	defer w.prodWG.Done()
	for {
		select {
		case <-w.prodStop:
			return
		case <-time.After(3 * time.Millisecond):
		}
		w.mu.Lock()
		n := w.next
		w.next++
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		w.p.SendAsync(ctx, &client.Message{Payload: fmt.Appendf(nil, "fo-%d", n), Properties: map[string]string{"n": strconv.Itoa(n)}},
			func(_ client.MessageID, _ *client.Message, err error) {
				defer cancel()
				region := w.p.Region()
				w.mu.Lock()
				defer w.mu.Unlock()
				if err != nil {
					w.fails++
					return
				}
				w.acked[n] = region
			})
	}
}

func (w *foWorkload) consume() {
	defer w.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-w.stop; cancel() }()
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
		if n, err := strconv.Atoi(m.Properties["n"]); err == nil {
			w.mu.Lock()
			w.received[n]++
			w.byOrigin[m.OriginRegion+"/"+m.OriginID]++
			w.mu.Unlock()
		}
		// Acks run concurrently (at most 64 in flight): one at a time, a
		// WAN round trip each would cap consumption far below production.
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		acks.Add(1)
		go func(id client.MessageID) {
			defer acks.Done()
			defer func() { <-sem }()
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			_ = w.co.Ack(actx, id)
			acancel()
		}(m.ID)
	}
}

// stopProducing ends the producer loop (idempotent).
func (w *foWorkload) stopProducing() {
	w.prodOnce.Do(func() { close(w.prodStop) })
	w.prodWG.Wait()
}

// halt stops producing and consuming (idempotent).
func (w *foWorkload) halt() {
	w.stopProducing()
	w.stopOnce.Do(func() { close(w.stop) })
	w.wg.Wait()
}

// ackedIn counts the messages acknowledged by region.
func (w *foWorkload) ackedIn(region string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.acked {
		if r == region {
			n++
		}
	}
	return n
}

// receivedCount is how many distinct messages the consumer got.
func (w *foWorkload) receivedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.received)
}

// checkNoLoss stops producing, flushes, waits until every acknowledged
// message was received (more consuming happens meanwhile), and logs the
// counts and duplicates.
func (w *foWorkload) checkNoLoss(timeout time.Duration) {
	t := w.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w.stopProducing()
	if err := w.p.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		var missing []int
		for n := range w.acked {
			if w.received[n] == 0 {
				missing = append(missing, n)
			}
		}
		acked, fails := len(w.acked), w.fails
		dups := 0
		for _, c := range w.received {
			dups += c - 1
		}
		w.mu.Unlock()
		if len(missing) == 0 {
			t.Logf("no acknowledged loss: %d acknowledged (%d sends failed: outcome unknown), %d distinct received, %d duplicate deliveries (%d redeliveries of one stored copy, the rest copies stored twice), producer stats %+v",
				acked, fails, w.receivedCount(), dups, w.redeliveries(), w.p.Stats())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged messages never received (first: %v)", len(missing), acked, missing[:min(10, len(missing))])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitSwitch waits until the client is in region, failing after bound,
// and returns when it saw it.
func (w *foWorkload) waitSwitch(region string, since time.Time, bound time.Duration) time.Time {
	w.t.Helper()
	deadline := since.Add(bound)
	for w.cl.ActiveRegion() != region {
		if time.Now().After(deadline) {
			w.t.Fatalf("client still in %s %v after the fault, want %s (bound %v)", w.cl.ActiveRegion(), time.Since(since), region, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Now()
}

// waitProgress waits until n more messages are acknowledged by region
// and received than at the call.
func (w *foWorkload) waitProgress(region string, n int, timeout time.Duration) {
	w.t.Helper()
	a0, r0 := w.ackedIn(region), w.receivedCount()
	waitFor(w.t, timeout, fmt.Sprintf("%d more messages acknowledged in %s and received", n, region), func() bool {
		return w.ackedIn(region) >= a0+n && w.receivedCount() >= r0+n
	})
}

// checkMetrics asserts the client's failover metrics: one switch a→b and
// one b→a, and two switch times observed.
func (w *foWorkload) checkMetrics() {
	w.t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	switches := map[string]float64{}
	var observed uint64
	for _, mf := range mfs {
		switch mf.GetName() {
		case "meridian_client_failovers_total":
			for _, m := range mf.GetMetric() {
				lbl := map[string]string{}
				for _, l := range m.GetLabel() {
					lbl[l.GetName()] = l.GetValue()
				}
				switches[lbl["from"]+"->"+lbl["to"]] = m.GetCounter().GetValue()
			}
		case "meridian_client_failover_switch_seconds":
			observed = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	if switches["a->b"] != 1 || switches["b->a"] != 1 || observed != 2 {
		w.t.Fatalf("failover metrics: switches %v, %d switch times observed; want a->b 1, b->a 1, 2", switches, observed)
	}
}

func (w *foWorkload) lastEvent() client.FailoverEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.events) == 0 {
		return client.FailoverEvent{}
	}
	return w.events[len(w.events)-1]
}

// proxyClientPath routes the client's traffic to region's brokers through
// link proxies "client"→region and returns the DialRewrite doing it.
func proxyClientPath(t *testing.T, g *geoCluster, region string) func(string) string {
	t.Helper()
	m := map[string]string{}
	for _, addr := range g.m.Region(region).Addrs() {
		p, err := g.net.Proxy("client", region, "127.0.0.1:0", addr)
		if err != nil {
			t.Fatal(err)
		}
		m[addr] = p.Addr()
	}
	return func(addr string) string {
		if to, ok := m[addr]; ok {
			return to
		}
		return addr
	}
}

// TestClientFailoverAutoCut: the client's path to region a is cut while
// it produces and consumes; it switches to b within the bound, keeps
// going, switches back after the heal, and no acknowledged message is lost.
func TestClientFailoverAutoCut(t *testing.T) {
	g, topic := foSetup(t)
	w := startWorkload(t, g, topic, foTimings, proxyClientPath(t, g, "a"))
	w.waitProgress("a", 100, 30*time.Second)

	fault := time.Now()
	g.net.Cut("client", "a", false)
	seen := w.waitSwitch("b", fault, foSwitchBound(foTimings))
	t.Logf("switched to b %v after the cut (bound %v)", seen.Sub(fault), foSwitchBound(foTimings))
	w.waitProgress("b", 100, 30*time.Second)
	ev := w.lastEvent()
	if ev.From != "a" || ev.To != "b" || ev.Took <= 0 {
		t.Fatalf("failover event %+v", ev)
	}
	t.Logf("failover event: %+v", ev)

	heal := time.Now()
	g.net.Heal("client", "a")
	back := w.waitSwitch("a", heal, foTimings.SwitchBackDelay+foSwitchBound(foTimings)+10*time.Second)
	t.Logf("switched back to a %v after the heal", back.Sub(heal))
	w.waitProgress("a", 100, 30*time.Second)
	w.checkNoLoss(geoConverge)
	w.checkMetrics()
}

// TestClientFailoverAutoKill: every broker of region a is killed while
// the client produces and consumes; it switches to b, keeps going, and
// returns to a once a's brokers are restarted. No acknowledged loss.
func TestClientFailoverAutoKill(t *testing.T) {
	g, topic := foSetup(t)
	w := startWorkload(t, g, topic, foTimings, nil)
	w.waitProgress("a", 100, 30*time.Second)

	fault := time.Now()
	brokers := len(g.m.Region("a").Addrs())
	for i := range brokers {
		g.kill("a", i)
	}
	seen := w.waitSwitch("b", fault, foSwitchBound(foTimings))
	t.Logf("switched to b %v after the kill (bound %v)", seen.Sub(fault), foSwitchBound(foTimings))
	w.waitProgress("b", 100, 30*time.Second)
	t.Logf("failover event: %+v", w.lastEvent())

	heal := time.Now()
	for i := range brokers {
		g.restart("a", i)
	}
	back := w.waitSwitch("a", heal, foTimings.SwitchBackDelay+foSwitchBound(foTimings)+30*time.Second)
	t.Logf("switched back to a %v after the restart", back.Sub(heal))
	w.waitProgress("a", 100, 60*time.Second)
	w.checkNoLoss(geoConverge)
}

// TestClientFailoverControlled: clients of a failover group follow the
// target set through the admin call (and Client.SwitchTo), with no loss.
func TestClientFailoverControlled(t *testing.T) {
	g, topic := foSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, g.url("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close(ctx)
	if _, err := adm.GetFailoverTarget(ctx, "grp"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get of an unset group: %v, want ErrNotFound", err)
	}
	if _, err := adm.SetFailoverTarget(ctx, "grp", "zz"); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), `"zz"`) {
		t.Fatalf("set to an unknown region: %v", err)
	}
	if _, err := adm.SetFailoverTarget(ctx, "bad/group", "a"); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "group") {
		t.Fatalf("set of an invalid group: %v", err)
	}
	fo := foTimings
	fo.Mode, fo.Group = client.FailoverControlled, "grp"
	w := startWorkload(t, g, topic, fo, nil)
	w.waitProgress("a", 50, 30*time.Second)

	set := time.Now()
	tgt, err := adm.SetFailoverTarget(ctx, "grp", "b")
	if err != nil {
		t.Fatal(err)
	}
	w.waitSwitch("b", set, 20*time.Second)
	// Every region's brokers answer with the target.
	for _, r := range []string{"a", "b"} {
		a2, err := client.NewAdmin(ctx, g.url(r))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "target visible in "+r, func() bool {
			got, err := a2.GetFailoverTarget(ctx, "grp")
			return err == nil && got.GetRegion() == "b" && got.GetVersion() == tgt.GetVersion()
		})
		_ = a2.Close(ctx)
	}
	w.waitProgress("b", 50, 30*time.Second)
	if ev := w.lastEvent(); ev.To != "b" || !strings.Contains(ev.Reason, "grp") {
		t.Fatalf("event %+v", ev)
	}

	// SwitchTo moves it in-process; the group target applies again when
	// it changes.
	if err := w.cl.SwitchTo("zz"); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("SwitchTo unknown region: %v", err)
	}
	if err := w.cl.SwitchTo("a"); err != nil {
		t.Fatal(err)
	}
	w.waitSwitch("a", time.Now(), 10*time.Second)
	w.waitProgress("a", 50, 30*time.Second)
	if _, err := adm.SetFailoverTarget(ctx, "grp", "b"); err != nil {
		t.Fatal(err)
	}
	w.waitSwitch("b", time.Now(), 20*time.Second)
	w.waitProgress("b", 50, 30*time.Second)
	w.checkNoLoss(geoConverge)
}

// TestFailoverDedupCarryOver: a producer's messages stored in a and
// replicated to b are answered DUPLICATE when the producer resends them in
// b with failover_from = [a], also after b's broker restarts (the dedup
// key is rebuilt from the stored entries by the takeover scan).
func TestFailoverDedupCarryOver(t *testing.T) {
	g := startGeo(t, []string{"a", "b"}, geoOptions{})
	g.createNamespace("public/fo", "a", "b")
	topic := "public/fo/dedup"
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Options{URL: g.url("a")})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	p, err := cl.NewProducer(ctx, client.ProducerOptions{Topic: topic, Name: "carry", BatchingMaxMessages: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := p.Send(ctx, &client.Message{Payload: fmt.Appendf(nil, "c%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until all ten are in b.
	waitFor(t, geoConverge, "10 messages replicated to b", func() bool {
		st, err := g.stats("b", topic)
		return err == nil && st.GetEntries() >= 10
	})

	check := func(when string, fresh bool) {
		t.Helper()
		owner := ""
		waitFor(t, 30*time.Second, "owner of the topic in b", func() bool {
			i := g.ownerIndex("b", topic)
			if i < 0 {
				lookupAny(g.url("b"), topic)
				return false
			}
			owner = g.m.Region("b").Addrs()[i]
			return true
		})
		if fresh {
			// Without failover_from: b knows no producer "carry" of its own.
			if last, _ := rawProduce(t, owner, topic, "carry", nil, -1); last != -1 {
				t.Fatalf("%s: last_sequence_id %d without failover_from, want -1", when, last)
			}
		}
		// With failover_from = [a]: the sequence carries over, and a resend
		// of a replicated message is a duplicate.
		last, rc := rawProduce(t, owner, topic, "carry", []string{"a", "b"}, 5)
		if last != 9 {
			t.Fatalf("%s: last_sequence_id %d with failover_from [a], want 9", when, last)
		}
		if rc.GetError() != nil || !rc.GetDuplicate() {
			t.Fatalf("%s: resend of sequence 5 answered %v, want duplicate", when, rc)
		}
		t.Logf("%s: last_sequence_id %d, resend of 5 answered duplicate", when, last)
	}
	check("before restart", true)
	i := g.ownerIndex("b", topic)
	g.kill("b", i)
	g.restart("b", i)
	check("after restart of b's owner", false)
	// Nothing was stored twice in b.
	st, err := g.stats("b", topic)
	if err != nil {
		t.Fatal(err)
	}
	if st.GetEntries() != 10 {
		t.Fatalf("b stores %d entries, want 10 (a duplicate was stored?)", st.GetEntries())
	}
}

// lookupAny asks addr (first of a list) for topic's owner, loading it.
func lookupAny(url, topic string) {
	cc, err := grpc.NewClient(strings.Split(url, ",")[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = clientv1.NewMeridianClient(cc).Lookup(ctx, &clientv1.LookupRequest{Topic: topic})
}

// rawProduce opens producer name on owner with failover_from and returns
// its last_sequence_id; with seq >= 0 it sends one message with that
// sequence ID and returns the receipt.
func rawProduce(t *testing.T, owner, topic, name string, from []string, seq int64) (int64, *clientv1.SendReceipt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc, err := grpc.NewClient(owner, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var st clientv1.Meridian_ProduceClient
	var opened *clientv1.ProducerOpened
	waitFor(t, 30*time.Second, "producer opened on "+owner, func() bool {
		st, err = clientv1.NewMeridianClient(cc).Produce(ctx)
		if err != nil {
			return false
		}
		if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Open{Open: &clientv1.OpenProducer{
			Topic: topic, ProducerName: name, FailoverFrom: from}}}); err != nil {
			return false
		}
		r, err := st.Recv()
		if err != nil {
			t.Logf("open producer: %v", err)
			time.Sleep(200 * time.Millisecond)
			return false
		}
		opened = r.GetOpened()
		return opened != nil
	})
	if seq < 0 {
		_ = st.CloseSend()
		return opened.GetLastSequenceId(), nil
	}
	if err := st.Send(&clientv1.ProduceRequest{Kind: &clientv1.ProduceRequest_Send{Send: &clientv1.Send{
		SequenceId: seq, NumMessages: 1, Payload: []byte("resend")}}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatalf("receipt: %v", err)
	}
	_ = st.CloseSend()
	return opened.GetLastSequenceId(), r.GetReceipt()
}

// TestClientFailoverLong is the long variant (MERIDIAN_LONG=1, run by
// make test-long with -run TestClientFailoverLong): default probe timings,
// 40 ms between the regions and on the client's path to a, a cut and a
// kill in turn, more traffic on each side of every move.
func TestClientFailoverLong(t *testing.T) {
	if os.Getenv("MERIDIAN_LONG") == "" {
		t.Skip("long variant: set MERIDIAN_LONG=1")
	}
	fo := client.DefaultFailoverOptions()
	fo.SwitchBackDelay = 10 * time.Second
	for _, fault := range []string{"cut", "kill"} {
		t.Run(fault, func(t *testing.T) {
			g, topic := foSetup(t)
			if err := g.net.SetLatency("a", "b", 40*time.Millisecond, 0); err != nil {
				t.Fatal(err)
			}
			if err := g.net.SetLatency("client", "a", 40*time.Millisecond, 0); err != nil {
				t.Fatal(err)
			}
			w := startWorkload(t, g, topic, fo, proxyClientPath(t, g, "a"))
			w.waitProgress("a", 1000, 60*time.Second)
			brokers := len(g.m.Region("a").Addrs())
			fault0 := time.Now()
			if fault == "cut" {
				g.net.Cut("client", "a", false)
			} else {
				for i := range brokers {
					g.kill("a", i)
				}
			}
			seen := w.waitSwitch("b", fault0, foSwitchBound(fo))
			t.Logf("%s: switched to b %v after the fault (bound %v); event %+v", fault, seen.Sub(fault0), foSwitchBound(fo), w.lastEvent())
			w.waitProgress("b", 1000, 60*time.Second)
			heal := time.Now()
			if fault == "cut" {
				g.net.Heal("client", "a")
			} else {
				for i := range brokers {
					g.restart("a", i)
				}
			}
			back := w.waitSwitch("a", heal, fo.SwitchBackDelay+foSwitchBound(fo)+30*time.Second)
			t.Logf("%s: switched back to a %v after the heal", fault, back.Sub(heal))
			w.waitProgress("a", 1000, 60*time.Second)
			w.checkNoLoss(2 * geoConverge)
		})
	}
}

// TestClientFailoverReplicatedSubscription: the consumer of a replicated
// subscription moves with its client (path to a cut, then healed) and
// resumes from the replicated position: no acknowledged loss, and its
// duplicates are bounded by what was delivered and not acknowledged at
// each move (the receive window) plus the acknowledgements not yet
// replicated then, far below the messages consumed before the move.
func TestClientFailoverReplicatedSubscription(t *testing.T) {
	g, topic := foSetup(t)
	const sub = "rs"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, g.url("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close(ctx)
	if err := adm.CreateReplicatedSubscription(ctx, topic, sub, client.Earliest); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "replicated subscription created in b", func() bool {
		s := g.subStats("b", topic, sub)
		return s != nil && s.GetReplicated()
	})
	const window, batch = 20, 10 // receive window (entries) and producer batch (messages)
	w := startWorkloadSub(t, g, topic, foTimings, proxyClientPath(t, g, "a"),
		client.ConsumerOptions{Subscription: sub, Type: client.Exclusive, Replicated: true, ReceiverQueueSize: window})
	w.waitProgress("a", 500, 60*time.Second)

	pendingAt := func(from, to string) int64 {
		s := g.subStats(from, topic, sub)
		if ar := ackRepl(s, to); ar != nil {
			return ar.GetPendingAcks()
		}
		return 0
	}
	fault := time.Now()
	g.net.Cut("client", "a", false)
	pendingA := pendingAt("a", "b")
	w.waitSwitch("b", fault, foSwitchBound(foTimings))
	dupsBefore := w.redeliveries()
	w.waitProgress("b", 300, 60*time.Second)
	dupsB := w.redeliveries() - dupsBefore
	t.Logf("move a -> b: %d redeliveries in b; %d acknowledgements of a not replicated at the cut", dupsB, pendingA)

	heal := time.Now()
	g.net.Heal("client", "a")
	pendingB := pendingAt("b", "a")
	w.waitSwitch("a", heal, foTimings.SwitchBackDelay+foSwitchBound(foTimings)+10*time.Second)
	w.waitProgress("a", 300, 60*time.Second)
	w.checkNoLoss(geoConverge)
	dups := w.redeliveries()
	bound := 2*window*batch + int(pendingA+pendingB)
	t.Logf("replicated subscription: %d redeliveries over both moves (bound %d: 2 windows of %d entries x %d messages + %d + %d acks not replicated); %d duplicate deliveries in all (messages stored twice included)",
		dups, bound, window, batch, pendingA, pendingB, w.duplicates())
	if dups > bound {
		t.Errorf("%d redeliveries over two moves, more than the bound %d", dups, bound)
	}
}
