package region_test

import (
	"context"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/client"
)

// The geo tests run regions in the test process (real gRPC, bookies and
// metadata on loopback), region-to-region traffic through chaos link
// proxies. Each checks that every acknowledged message reaches every
// region, with no duplicate and in per-origin order, and logs the counts.

const geoConverge = 60 * time.Second

func geoSetup(t *testing.T, names []string, opts geoOptions, regions ...string) (*geoCluster, string) {
	t.Helper()
	g := startGeo(t, names, opts)
	if len(regions) == 0 {
		regions = names
	}
	g.createNamespace("public/geo", regions...)
	return g, "public/geo/t1"
}

// TestGeoThreeRegionsActiveActive: three regions produce concurrently to
// one topic; every region converges to the union.
func TestGeoThreeRegionsActiveActive(t *testing.T) {
	names := []string{"a", "b", "c"}
	g, topic := geoSetup(t, names, geoOptions{})
	var readers []*geoReader
	var prods []*geoProducer
	for _, n := range names {
		readers = append(readers, g.reader(n, topic))
		prods = append(prods, g.producer(n, topic))
	}
	done := make(chan struct{})
	for _, p := range prods {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 10 {
				p.send(30)
			}
		}()
	}
	for range prods {
		<-done
	}
	g.converge(geoConverge, readers, prods)
	// Stats: each region's owner reports one replicator per remote, caught up.
	for _, n := range names {
		waitFor(t, 20*time.Second, "replicators caught up in "+n, func() bool {
			st, err := g.stats(n, topic)
			if err != nil || len(st.GetReplicators()) != 2 {
				return false
			}
			for _, r := range st.GetReplicators() {
				if r.GetBacklogEntries() != 0 || !r.GetConnected() || r.GetBackfillProgress() != 1 {
					return false
				}
			}
			return true
		})
	}
}

// TestGeoCutAndHeal: a↔b is cut while both produce, c keeps replicating
// with both; after the heal everything converges.
func TestGeoCutAndHeal(t *testing.T) {
	names := []string{"a", "b", "c"}
	g, topic := geoSetup(t, names, geoOptions{})
	var readers []*geoReader
	var prods []*geoProducer
	for _, n := range names {
		readers = append(readers, g.reader(n, topic))
		prods = append(prods, g.producer(n, topic))
	}
	prods[0].send(50)
	prods[1].send(50)
	g.converge(geoConverge, readers, prods)

	g.net.Cut("a", "b", false)
	stop := make(chan struct{})
	done := make(chan struct{}, 2)
	for _, p := range prods[:2] {
		go func() {
			defer func() { done <- struct{}{} }()
			p.produceFor(stop, 20)
		}()
	}
	// Meanwhile c keeps receiving from both sides and replicating its own.
	prods[2].send(50)
	g.converge(geoConverge, readers[2:], prods)
	close(stop)
	<-done
	<-done
	g.net.Heal("a", "b")
	healed := time.Now()
	g.converge(geoConverge, readers, prods)
	t.Logf("converged %v after the heal", time.Since(healed).Round(time.Millisecond))
}

// TestGeoPartialMesh: b↔c is cut for the whole test; a relays, and every
// region converges.
func TestGeoPartialMesh(t *testing.T) {
	names := []string{"a", "b", "c"}
	g := startGeo(t, names, geoOptions{})
	g.net.Cut("b", "c", false)
	g.createNamespace("public/geo", names...)
	topic := "public/geo/t1"
	var readers []*geoReader
	var prods []*geoProducer
	for _, n := range names {
		readers = append(readers, g.reader(n, topic))
		prods = append(prods, g.producer(n, topic))
	}
	done := make(chan struct{})
	for _, p := range prods {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 5 {
				p.send(40)
			}
		}()
	}
	for range prods {
		<-done
	}
	g.converge(geoConverge, readers, prods)
}

// TestGeoKillSendingOwner crashes the broker that owns the topic in the
// sending region mid-stream: the topic moves to the other broker with its
// replicator cursor; nothing is lost or duplicated.
func TestGeoKillSendingOwner(t *testing.T) {
	names := []string{"a", "b"}
	g, topic := geoSetup(t, names, geoOptions{brokers: 2})
	ra, rb := g.reader("a", topic), g.reader("b", topic)
	pa := g.producer("a", topic)
	pa.send(100)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		pa.produceFor(stop, 20)
	}()
	time.Sleep(300 * time.Millisecond)
	owner := g.ownerIndex("a", topic)
	if owner < 0 {
		t.Fatal("no owner of the topic in region a")
	}
	g.kill("a", owner)
	t.Logf("killed a/%d", owner)
	time.Sleep(time.Second)
	close(stop)
	<-done
	pa.send(50)
	g.converge(geoConverge, []*geoReader{ra, rb}, []*geoProducer{pa})
}

// TestGeoKillReceivingOwner crashes the owner of the topic in the
// receiving region mid-stream, then unloads the target topic mid-stream.
func TestGeoKillReceivingOwner(t *testing.T) {
	names := []string{"a", "b"}
	g, topic := geoSetup(t, names, geoOptions{brokers: 2})
	ra, rb := g.reader("a", topic), g.reader("b", topic)
	pa := g.producer("a", topic)
	pa.send(100)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		pa.produceFor(stop, 20)
	}()
	time.Sleep(300 * time.Millisecond)
	owner := g.ownerIndex("b", topic)
	if owner < 0 {
		t.Fatal("no owner of the topic in region b")
	}
	g.kill("b", owner)
	t.Logf("killed b/%d", owner)
	time.Sleep(time.Second)
	// Unload the target topic mid-stream (on whichever broker has it now).
	waitFor(t, 30*time.Second, "topic reloaded in b", func() bool { return g.ownerIndex("b", topic) >= 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	adm, err := client.NewAdmin(ctx, g.url("b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := adm.UnloadTopic(ctx, topic); err != nil {
		t.Logf("unload: %v", err)
	}
	_ = adm.Close(ctx)
	cancel()
	time.Sleep(500 * time.Millisecond)
	close(stop)
	<-done
	pa.send(50)
	g.converge(geoConverge, []*geoReader{ra, rb}, []*geoProducer{pa})
}

// TestGeoAddRegionBackfills: a namespace with history in a and b gets
// region c: c receives everything retained.
func TestGeoAddRegionBackfills(t *testing.T) {
	names := []string{"a", "b", "c"}
	g, topic := geoSetup(t, names, geoOptions{}, "a", "b")
	pa, pb := g.producer("a", topic), g.producer("b", topic)
	ra, rb := g.reader("a", topic), g.reader("b", topic)
	pa.send(150)
	pb.send(150)
	g.converge(geoConverge, []*geoReader{ra, rb}, []*geoProducer{pa, pb})
	g.setPolicies("a", "public/geo", func(p *clientv1.NamespacePolicies) { p.ReplicationRegions = []string{"a", "b", "c"} })
	rc := g.reader("c", topic)
	pc := g.producer("c", topic)
	pc.send(20)
	g.converge(geoConverge, []*geoReader{ra, rb, rc}, []*geoProducer{pa, pb, pc})
}

// TestGeoLagBound: with max_replication_lag and producer_error, a cut
// link makes sends fail with QUOTA_EXCEEDED naming the region; after the
// heal sends succeed again.
func TestGeoLagBound(t *testing.T) {
	names := []string{"a", "b"}
	g, topic := geoSetup(t, names, geoOptions{})
	g.setPolicies("a", "public/geo", func(p *clientv1.NamespacePolicies) {
		p.MaxReplicationLagMs = 1000
		p.MaxReplicationLagAction = clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR
	})
	pa := g.producer("a", topic)
	ra, rb := g.reader("a", topic), g.reader("b", topic)
	pa.send(10)
	g.converge(geoConverge, []*geoReader{ra, rb}, []*geoProducer{pa})
	g.net.Cut("a", "b", false)
	var lastErr error
	waitFor(t, 30*time.Second, "sends refused by the lag bound", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, lastErr = pa.p.Send(ctx, &client.Message{Payload: []byte("x"), Properties: map[string]string{"probe": "1"}})
		return lastErr != nil
	})
	t.Logf("send refused: %v", lastErr)
	st, err := g.stats("a", topic)
	if err != nil {
		t.Fatal(err)
	}
	if rs := st.GetReplicators(); len(rs) != 1 || !rs[0].GetLagBoundExceeded() || rs[0].GetMaxLagMs() != 1000 {
		t.Fatalf("stats do not show the exceeded bound: %v", rs)
	}
	g.net.Heal("a", "b")
	waitFor(t, 30*time.Second, "sends accepted after the heal", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := pa.p.Send(ctx, &client.Message{Payload: []byte("x"), Properties: map[string]string{"probe": "1"}})
		return err == nil
	})
	pa.send(10)
	g.converge(geoConverge, []*geoReader{ra, rb}, []*geoProducer{pa})
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
