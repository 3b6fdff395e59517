package region_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/metadata"
)

// Origin incarnations (broker/originstream.go): a region whose per-topic
// origin_seq counter starts again (topic deleted and written again, the
// region's metadata wiped and rebuilt under the same name) must keep
// replicating: its new entries are a new origin stream, never answered
// DUPLICATE of the old one's.

// closeProducer closes gp's client (its producer goes away).
func closeProducer(gp *geoProducer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = gp.cl.Close(ctx)
}

// TestGeoDeleteRecreateReplicates: 100 produced in a reach b; the topic is
// deleted in a (--force) and 50 more are produced in a: all 150 reach b,
// none twice, and a holds the 50.
func TestGeoDeleteRecreateReplicates(t *testing.T) {
	g, topic := geoSetup(t, []string{"a", "b"}, geoOptions{})
	rb := g.reader("b", topic)
	pa := g.producer("a", topic)
	pa.send(100)
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
	closeProducer(pa)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, g.url("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close(ctx)
	if err := adm.DeleteTopic(ctx, topic, true); err != nil {
		t.Fatalf("delete %s in a: %v", topic, err)
	}

	pa2 := g.producer("a", topic)
	pa2.next = 100 // message keys go on after the first 100
	pa2.send(50)
	if n := len(pa2.ackedKeys()); n != 50 {
		t.Fatalf("%d of 50 sends acknowledged after the re-creation", n)
	}
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa, pa2})
	ra := g.reader("a", topic)
	g.converge(geoConverge, []*geoReader{ra}, []*geoProducer{pa2})
	// A reader in b from the earliest message returns both streams' entries:
	// the new stream's origin_seq values repeat the old one's.
	readAll(t, g.url("b"), topic, 150)
}

// readAll reads topic at url with a reader from the earliest message and
// fails unless it returns want messages, each once, and no more within a
// short wait after the last.
func readAll(t *testing.T, url, topic string, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(context.Background())
	rd, err := cl.NewReader(ctx, client.ReaderOptions{Topic: topic, Start: client.StartEarliest()})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close(context.Background())
	seen := map[string]int{}
	n := 0
	for {
		wait := 20 * time.Second
		if n >= want {
			wait = time.Second // anything more than want is a failure
		}
		nctx, ncancel := context.WithTimeout(ctx, wait)
		m, err := rd.Next(nctx)
		ncancel()
		if err != nil {
			break
		}
		n++
		seen[string(m.Payload)]++
	}
	if n != want || len(seen) != want {
		t.Fatalf("reader from earliest returned %d messages (%d distinct), want %d", n, len(seen), want)
	}
}

// TestGeoRegionMetadataWipeReplicates: region a's broker crashes and its
// regional metadata of topics (ledger lists, cursors, ownership) is wiped,
// as a region rebuilt from nothing under the same name; the broker starts
// again and 50 more are produced in a: b gets all 150, none twice.
// (In process: the bookies' old ledgers stay, unreferenced.)
func TestGeoRegionMetadataWipeReplicates(t *testing.T) {
	g, topic := geoSetup(t, []string{"a", "b"}, geoOptions{})
	rb := g.reader("b", topic)
	pa := g.producer("a", topic)
	pa.send(100)
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
	closeProducer(pa)

	g.kill("a", 0)
	wipeRegionalTopics(t, g.m.Region("a").Regional)
	g.restart("a", 0)

	pa2 := g.producer("a", topic)
	pa2.next = 100
	pa2.send(50)
	if n := len(pa2.ackedKeys()); n != 50 {
		t.Fatalf("%d of 50 sends acknowledged after the rebuild", n)
	}
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa, pa2})
}

// wipeRegionalTopics deletes every topic's state from a regional shard:
// ledger lists, cursors and ownership claims.
func wipeRegionalTopics(t *testing.T, st metadata.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	for _, prefix := range []string{"managed-ledgers/", "cursors/", "owners/"} {
		for {
			res, err := st.List(ctx, prefix, metadata.Page{}, metadata.ReadOptions{})
			if err != nil {
				t.Fatalf("list %s: %v", prefix, err)
			}
			for _, kv := range res.KVs {
				if err := st.Delete(ctx, kv.Key, metadata.AnyVersion); err != nil && !strings.Contains(err.Error(), "not found") {
					t.Fatalf("delete %s: %v", kv.Key, err)
				}
				n++
			}
			if !res.More {
				break
			}
		}
	}
	if n == 0 {
		t.Fatal("nothing to wipe: the topic left no regional metadata")
	}
	t.Logf("wiped %d regional keys", n)
}

// TestGeoDeleteRecreateUnderLoadReplicates: a producer in a keeps producing
// while the topic is deleted in a (--force) and created again, as the chaos
// scenario operator-actions does; b's replication stream and the producer
// reconnect to the new topic at once (b produces too, so b's replicator
// streams into a's topic through the delete). Every message whose send started
// after the delete returned is in the new topic: all of the acknowledged
// ones must reach b (0 lost); duplicates are counted. (It does not
// reproduce the loss the chaos scenario finds, see
// docs/chaos/operator-actions.md; it guards the path.)
func TestGeoDeleteRecreateUnderLoadReplicates(t *testing.T) {
	g, topic := geoSetup(t, []string{"a", "b"}, geoOptions{brokers: 2, broker: func(_ string, _ int, cfg *broker.Config) {
		cfg.Replication = broker.ReplicationConfig{} // the defaults, as meridian dev's
	}})
	rb := g.reader("b", topic)
	pa := multiRegionProducer(t, g, "a", topic) // as the chaos workload's
	pa.timeout = 20 * time.Second
	pb := g.producer("b", topic) // b's replicator streams into a's topic
	pb.timeout = 20 * time.Second
	// Replicated subscriptions with consumers in both regions, as the
	// chaos workload's (their acknowledgements replicate too).
	for _, r := range g.names {
		repConsume(t, g, r, topic)
	}
	pa.send(100)
	pb.send(100)
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa, pb})

	stop := make(chan struct{})
	done := make(chan struct{}, 2)
	for _, p := range []*geoProducer{pa, pb} {
		go func() {
			defer func() { done <- struct{}{} }()
			p.produceFor(stop, 20)
		}()
	}
	stopped := false
	stopAll := func() {
		if !stopped {
			stopped = true
			close(stop)
			<-done
			<-done
		}
	}
	defer stopAll()
	time.Sleep(300 * time.Millisecond) // in flight through the delete

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, g.url("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close(ctx)
	for {
		err := adm.DeleteTopic(ctx, topic, true)
		if err == nil || errors.Is(err, client.ErrNotFound) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("delete %s in a: %v", topic, err)
		}
		t.Logf("delete %s in a: %v (retrying)", topic, err)
		time.Sleep(50 * time.Millisecond)
	}
	pa.mu.Lock()
	after := pa.next // sends from here on start after the delete
	pa.mu.Unlock()
	if err := adm.CreateTopic(ctx, topic); err != nil && !errors.Is(err, client.ErrAlreadyExists) {
		t.Fatalf("create %s in a: %v", topic, err)
	}
	// Produce on until well past what the deleted topic held.
	deadline := time.Now().Add(60 * time.Second)
	for {
		pa.mu.Lock()
		n := 0
		for k := range pa.acked {
			if k >= after {
				n++
			}
		}
		pa.mu.Unlock()
		if n >= 1000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d sends acknowledged after the re-creation", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopAll()

	var want []msgKey
	for _, k := range pa.ackedKeys() {
		if k.n >= after {
			want = append(want, k)
		}
	}
	cdeadline := time.Now().Add(geoConverge)
	for {
		miss := rb.missing(want)
		if len(miss) == 0 {
			break
		}
		if time.Now().After(cdeadline) {
			sort.Slice(miss, func(i, j int) bool { return miss[i].n < miss[j].n })
			st, _ := g.stats("a", topic)
			t.Fatalf("b misses %d of %d messages acknowledged after the re-creation (first %v, last %v); a's stats: %v",
				len(miss), len(want), miss[0], miss[len(miss)-1], st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	seen, dups, _, _ := rb.counts()
	t.Logf("b: %d acknowledged after the re-creation (from #%d), all delivered; %d distinct delivered in all, %d duplicates",
		len(want), after, seen, dups)
}

// multiRegionProducer is g.producer through a client of every region
// (home first, automatic failover), as the chaos workload's producers: it
// gives its producer a failover identity.
func multiRegionProducer(t *testing.T, g *geoCluster, home, topic string) *geoProducer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	regs := []client.RegionURL{{Name: home, URL: g.url(home)}}
	for _, r := range g.names {
		if r != home {
			regs = append(regs, client.RegionURL{Name: r, URL: g.url(r)})
		}
	}
	cl, err := client.New(ctx, client.Options{Regions: regs, MaxBackoff: 500 * time.Millisecond,
		Failover: client.FailoverOptions{Mode: client.FailoverAuto, ProbeInterval: 500 * time.Millisecond, FailedProbes: 4, SwitchBackDelay: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cl.Close(ctx)
	})
	p, err := cl.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 20, BatchingMaxDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return &geoProducer{region: home, cl: cl, p: p, acked: map[int]bool{}}
}

// repConsume consumes topic in region through a replicated subscription
// "rep" (from the earliest entry), acknowledging everything, until the
// test ends.
func repConsume(t *testing.T, g *geoCluster, region, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New(ctx, client.Options{URL: g.url(region), MaxBackoff: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	co, err := cl.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "rep", InitialPosition: client.Earliest, Replicated: true})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for rctx.Err() == nil {
			m, err := co.Receive(rctx)
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			_ = co.Ack(rctx, m.ID)
		}
	}()
	t.Cleanup(func() {
		rcancel()
		<-done
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cl.Close(ctx)
	})
}
