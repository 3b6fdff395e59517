package region_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/region/regiontest"
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
	// The cut lasts longer than the replicators' keepalive (about 2 s), so
	// the a↔b streams break and must reconnect after the heal.
	cutAt := time.Now()
	prods[2].send(50)
	g.converge(geoConverge, readers[2:], prods)
	time.Sleep(max(0, 4*time.Second-time.Since(cutAt)))
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

// TestGeoPartialMeshMidStream: b↔c is cut while everyone produces and
// stays cut: the relay through a takes over, including the entries b and
// c had not delivered to each other when the link went (a held them
// until the remote's applied position passed them).
func TestGeoPartialMeshMidStream(t *testing.T) {
	names := []string{"a", "b", "c"}
	// Brokers notice a dead replication stream from another region within
	// about 2 s (server keepalive), so that they stop listing its origin
	// as direct.
	g, topic := geoSetup(t, names, geoOptions{broker: func(_ string, _ int, cfg *broker.Config) {
		cfg.KeepaliveTime, cfg.KeepaliveTimeout = time.Second, time.Second
	}})
	var readers []*geoReader
	var prods []*geoProducer
	for _, n := range names {
		readers = append(readers, g.reader(n, topic))
		prods = append(prods, g.producer(n, topic))
	}
	for _, p := range prods {
		p.send(30)
	}
	g.converge(geoConverge, readers, prods)
	stop := make(chan struct{})
	done := make(chan struct{}, len(prods))
	for _, p := range prods {
		go func() {
			defer func() { done <- struct{}{} }()
			p.produceFor(stop, 10)
		}()
	}
	time.Sleep(300 * time.Millisecond)
	g.net.Cut("b", "c", false)
	time.Sleep(3 * time.Second)
	close(stop)
	for range prods {
		<-done
	}
	for _, p := range prods {
		p.send(20)
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
// link makes sends fail at once with QUOTA_REFUSED naming the region;
// after the heal sends succeed again.
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
	t.Logf("client send refused: %v", lastErr)
	e := g.rawSend("a", topic)
	if e.GetCode() != clientv1.ErrorCode_ERROR_CODE_QUOTA_REFUSED || !strings.Contains(e.GetMessage(), "replication lag to region b") {
		t.Fatalf("send over the lag bound: %v, want QUOTA_REFUSED (final: producer_error) naming region b", e)
	}
	t.Logf("receipt: %s", e.GetMessage())
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

// TestGeoLagBoundHold: with producer_hold a send past the bound waits
// until the lag is back within it (the link heals) and is then stored.
func TestGeoLagBoundHold(t *testing.T) {
	names := []string{"a", "b"}
	g, topic := geoSetup(t, names, geoOptions{broker: func(_ string, _ int, cfg *broker.Config) {
		cfg.Replication.LagHoldTimeout = time.Minute
	}})
	g.setPolicies("a", "public/geo", func(p *clientv1.NamespacePolicies) {
		p.MaxReplicationLagMs = 1000
		p.MaxReplicationLagAction = clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_HOLD
	})
	pa := g.producer("a", topic)
	rb := g.reader("b", topic)
	pa.send(10)
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
	g.net.Cut("a", "b", false)
	pa.send(5) // stored at once (the lag is still small), then not replicated
	waitFor(t, 30*time.Second, "lag bound exceeded", func() bool {
		return replicatorTo(t, g, "a", topic, "b").GetLagBoundExceeded()
	})
	owner := regiontest.LookupOwner(t, strings.Split(g.url("a"), ",")[0], topic, func(string) bool { return true })
	type result struct {
		e   *clientv1.Error
		err error
	}
	held := make(chan result, 1)
	go func() {
		e, err := rawSendTo(owner, topic)
		held <- result{e, err}
	}()
	select {
	case r := <-held:
		t.Fatalf("send past the bound answered at once (%v %v), want it held", r.e, r.err)
	case <-time.After(1500 * time.Millisecond):
	}
	g.net.Heal("a", "b")
	select {
	case r := <-held:
		if r.e != nil || r.err != nil {
			t.Fatalf("held send failed after the heal: %v %v", r.e, r.err)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("held send not answered 45 s after the heal")
	}
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
}

// TestGeoRemoteRejects: the target region's backlog quota rejects
// replicated entries for a while; nothing is counted replicated that the
// target did not persist, and replication resumes by itself once the
// quota clears.
func TestGeoRemoteRejects(t *testing.T) {
	names := []string{"a", "b"}
	g, topic := geoSetup(t, names, geoOptions{})
	ra, rb := g.reader("a", topic), g.reader("b", topic)
	pa := g.producer("a", topic)
	pa.timeout = 3 * time.Second
	pa.send(40)
	g.converge(geoConverge, []*geoReader{ra, rb}, []*geoProducer{pa})
	sentBefore := replicatorTo(t, g, "a", topic, "b").GetSentEntries()

	// A subscription in b that nobody reads, and a quota it soon exceeds.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admB, err := client.NewAdmin(ctx, g.url("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer admB.Close(ctx)
	if err := admB.CreateSubscription(ctx, topic, "hold", client.Latest); err != nil {
		t.Fatal(err)
	}
	g.setPolicies("a", "public/geo", func(p *clientv1.NamespacePolicies) {
		q := int64(4000)
		p.BacklogQuotaBytes = &q
		p.BacklogQuotaAction = clientv1.QuotaAction_QUOTA_ACTION_PRODUCER_ERROR
	})
	stop := make(chan struct{})
	go pa.produceFor(stop, 20)
	rejStart := time.Now()
	var rs *clientv1.ReplicatorStats
	waitFor(t, 30*time.Second, "a's replicator to b rejected", func() bool {
		rs = replicatorTo(t, g, "a", topic, "b")
		if os.Getenv("GEO_DEBUG") != "" {
			stB, _ := g.stats("b", topic)
			t.Logf("a->b %v; b: %v", rs, stB.GetSubscriptions())
		}
		return rs.GetBacklogEntries() > 0 && strings.Contains(rs.GetLastError(), "reject")
	})
	t.Logf("rejection seen after %v", time.Since(rejStart).Round(time.Millisecond))
	// Stop producing; sends refused by a's own quota may take the client's
	// retries to end: the last batch is not waited for (it ends when the
	// client closes), and only acknowledged messages are checked.
	close(stop)
	// Only persisted entries count: b stored at most what a counts sent.
	stB, err := g.stats("b", topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("while rejected: a's replicator sent %d entries (before the quota %d), backlog %d, last error %q; b holds %d entries",
		rs.GetSentEntries(), sentBefore, rs.GetBacklogEntries(), rs.GetLastError(), stB.GetEntries())
	// b's copy holds only a's entries: a never counts more as replicated
	// than b persisted.
	if rs.GetSentEntries() > stB.GetEntries() {
		t.Fatalf("a counts %d entries replicated, b holds only %d", rs.GetSentEntries(), stB.GetEntries())
	}
	// The quota clears (the subscription goes): replication resumes alone.
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer dcancel()
	delStart := time.Now()
	if err := admB.DeleteSubscription(dctx, topic, "hold", true); err != nil {
		t.Fatalf("delete subscription hold: %v", err)
	}
	t.Logf("subscription hold deleted in %v", time.Since(delStart).Round(time.Millisecond))
	g.converge(geoConverge, []*geoReader{ra, rb}, []*geoProducer{pa})
}

// replicatorTo returns the owner's stats of the replicator of topic in
// region to remote.
func replicatorTo(t *testing.T, g *geoCluster, region, topic, remote string) *clientv1.ReplicatorStats {
	t.Helper()
	var out *clientv1.ReplicatorStats
	waitFor(t, 30*time.Second, "replicator stats", func() bool {
		st, err := g.stats(region, topic)
		if err != nil {
			return false
		}
		for _, r := range st.GetReplicators() {
			if r.GetRemoteRegion() == remote {
				out = r
				return true
			}
		}
		return false
	})
	return out
}

// TestGeoKeeperResumesWithoutClients: entries produced in a while a↔b is
// cut; the broker of a restarts with no client touching the topic. The
// keeper loads the topic while the link is still cut (nothing else can:
// b's lookups do not get through), and after the heal its replicator
// delivers the entries.
func TestGeoKeeperResumesWithoutClients(t *testing.T) {
	names := []string{"a", "b"}
	g, topic := geoSetup(t, names, geoOptions{})
	rb := g.reader("b", topic)
	pa := g.producer("a", topic)
	pa.send(20)
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
	g.net.Cut("a", "b", false)
	pa.send(100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = pa.cl.Close(ctx)
	cancel()
	g.kill("a", 0)
	g.restart("a", 0)
	waitFor(t, 30*time.Second, "topic loaded in a by the keeper", func() bool { return g.ownerIndex("a", topic) >= 0 })
	g.net.Heal("a", "b")
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
}

// TestGeoRemoveRegion: removing b from the namespace stops a's replicator
// to b and keeps its cursor (b's data is untouched); the cursor goes only
// with an explicit, confirmed DeleteReplicationCursors.
func TestGeoRemoveRegion(t *testing.T) {
	names := []string{"a", "b"}
	g, topic := geoSetup(t, names, geoOptions{})
	ra, rb := g.reader("a", topic), g.reader("b", topic)
	pa := g.producer("a", topic)
	pa.send(30)
	g.converge(geoConverge, []*geoReader{ra, rb}, []*geoProducer{pa})
	g.setPolicies("a", "public/geo", func(p *clientv1.NamespacePolicies) { p.ReplicationRegions = []string{"a"} })
	waitFor(t, 30*time.Second, "replicator to b stopped", func() bool {
		st, err := g.stats("a", topic)
		return err == nil && len(st.GetReplicators()) == 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, err := client.NewAdmin(ctx, g.url("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close(ctx)
	// Consumers may not attach to a replicator's cursor.
	cl, err := client.New(ctx, client.Options{URL: g.url("a")})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(ctx)
	if co, err := cl.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "meridian.repl.b"}); err == nil {
		_ = co.Close(ctx)
		t.Fatal("a consumer attached to the replicator cursor meridian.repl.b")
	}
	subs, err := adm.ListSubscriptions(ctx, topic)
	if err != nil || !slices.Contains(subs, "meridian.repl.b") {
		t.Fatalf("subscriptions after removing b: %v %v (the cursor must stay)", subs, err)
	}
	srv := g.broker("a", 0)
	dry, err := srv.DeleteReplicatorCursors(ctx, "public/geo", "b", false)
	if err != nil || !slices.Contains(dry, topic) {
		t.Fatalf("dry run: %v %v", dry, err)
	}
	if subs, _ := adm.ListSubscriptions(ctx, topic); !slices.Contains(subs, "meridian.repl.b") {
		t.Fatal("the dry run deleted the cursor")
	}
	if _, err := srv.DeleteReplicatorCursors(ctx, "public/geo", "a", true); err == nil {
		t.Fatal("deleting the cursors of a current replication region was accepted")
	}
	if _, err := srv.DeleteReplicatorCursors(ctx, "public/geo", "b", true); err != nil {
		t.Fatal(err)
	}
	if subs, _ := adm.ListSubscriptions(ctx, topic); slices.Contains(subs, "meridian.repl.b") {
		t.Fatalf("cursor still there after the confirmed delete: %v", subs)
	}
	// b keeps its data.
	stB, err := g.stats("b", topic)
	if err != nil || stB.GetEntries() == 0 {
		t.Fatalf("b's copy: %v %v", stB, err)
	}
}

// TestGeoReplicatorRateLimit: replicator_rate_msgs paces a replicator.
// Only a lower bound on the time is checked (a loaded machine is slower,
// never faster).
func TestGeoReplicatorRateLimit(t *testing.T) {
	names := []string{"a", "b"}
	g, topic := geoSetup(t, names, geoOptions{})
	const rateMsgs, n = 100, 400
	g.setPolicies("a", "public/geo", func(p *clientv1.NamespacePolicies) { p.ReplicatorRateMsgs = rateMsgs })
	rb := g.reader("b", topic)
	pa := g.producer("a", topic)
	pa.send(1)
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
	// Let the replicator pick the limit up (polled once a second).
	time.Sleep(1500 * time.Millisecond)
	start := time.Now()
	pa.send(n)
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
	took := time.Since(start)
	// The bucket starts full (one second's worth): the rest takes at least
	// (n - rate) / rate seconds.
	minTook := time.Duration(float64(n-rateMsgs)/rateMsgs*float64(time.Second)) - 200*time.Millisecond
	t.Logf("%d messages at %d msg/s replicated in %v (lower bound %v)", n, rateMsgs, took.Round(time.Millisecond), minTook)
	if took < minTook {
		t.Fatalf("replicated %d messages in %v, faster than the %d msg/s limit allows (%v)", n, took, rateMsgs, minTook)
	}
}

// TestGeoStallReported: a replicator with backlog and no progress for the
// stall timeout (2 s here) is reported in stats and metrics and restarts
// itself; after the heal it catches up and is no longer stalled.
func TestGeoStallReported(t *testing.T) {
	names := []string{"a", "b"}
	g, topic := geoSetup(t, names, geoOptions{broker: func(_ string, _ int, cfg *broker.Config) {
		cfg.Replication.StallTimeout = 2 * time.Second
	}})
	rb := g.reader("b", topic)
	pa := g.producer("a", topic)
	pa.send(10)
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
	g.net.Cut("a", "b", false)
	pa.send(10)
	waitFor(t, 30*time.Second, "stalled in stats", func() bool {
		rs := replicatorTo(t, g, "a", topic, "b")
		return rs.GetStalled() && rs.GetBacklogEntries() > 0 && !rs.GetConnected()
	})
	owner := g.ownerIndex("a", topic)
	body := httpGet(t, "http://"+g.broker("a", owner).HTTPAddr()+"/metrics")
	for _, want := range []string{`meridian_replication_stalled{remote="b"} 1`, `meridian_replication_stalls_total{remote="b"}`,
		`meridian_replication_backlog_messages{remote="b"}`, `meridian_replication_lag_seconds{remote="b"}`,
		`meridian_replication_reconnects_total{remote="b"}`, `meridian_replication_sent_entries_total{remote="b"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	g.net.Heal("a", "b")
	g.converge(geoConverge, []*geoReader{rb}, []*geoProducer{pa})
	waitFor(t, 30*time.Second, "not stalled after the heal", func() bool {
		rs := replicatorTo(t, g, "a", topic, "b")
		return !rs.GetStalled() && rs.GetBacklogEntries() == 0
	})
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
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
