package regiontest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/region/regiontest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// openStream opens a replication stream to addr for topic as region from
// would, and returns the error that ended the open.
func openStream(t *testing.T, addr, topic, from, to string, timeout time.Duration) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := clientv1.NewReplicationClient(cc).Replicate(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&clientv1.ReplicateRequest{Kind: &clientv1.ReplicateRequest_Open{Open: &clientv1.ReplicateOpen{
		Topic: topic, SourceRegion: from, TargetRegion: to}}}); err != nil {
		return err
	}
	_, err = st.Recv()
	return err
}

// TestStartRegions: two regions share the global shard (each registered
// with its brokers, public/default created once), each broker reaches the
// other region through its link proxy, a cut stalls that link until the
// heal, and a killed broker restarts on its address behind the same proxy.
func TestStartRegions(t *testing.T) {
	m := regiontest.StartRegions(t, regiontest.MultiOptions{Regions: []string{"a", "b"}, Brokers: 1, Bookies: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := m.Region("a"), m.Region("b")
	if a.Name() != "a" || b.Name() != "b" || !slices.Equal(m.Regions(), []string{"a", "b"}) {
		t.Fatalf("regions %v", m.Regions())
	}
	for _, r := range []*regiontest.Cluster{a, b} {
		rec, err := a.Broker(0).RegionInfo(ctx, r.Name())
		if err != nil || len(rec.Endpoints()) != 1 || rec.Endpoints()[0] != r.Addrs()[0] {
			t.Fatalf("region %s record: %v %v", r.Name(), rec, err)
		}
	}
	bAddr := b.Addrs()[0]
	via := m.DialAddr("a", bAddr)
	if via == bAddr || m.DialAddr("a", a.Addrs()[0]) != a.Addrs()[0] {
		t.Fatalf("a dials b's broker %s at %s: want a proxy; its own at %s", bAddr, via, m.DialAddr("a", a.Addrs()[0]))
	}
	topic := "public/default/multi"
	if err := openStream(t, via, topic, "a", "b", 30*time.Second); err != nil {
		t.Fatalf("a→b through the proxy: %v", err)
	}
	// A cut stalls the link: an open through it cannot finish.
	m.Network.Cut("a", "b", false)
	if err := openStream(t, via, topic, "a", "b", 500*time.Millisecond); err == nil {
		t.Fatal("a→b opened across a cut link")
	}
	m.Network.Heal("a", "b")
	if err := openStream(t, via, topic, "a", "b", 30*time.Second); err != nil {
		t.Fatalf("a→b after heal: %v", err)
	}
	// Kill and restart b's broker: same address, same proxy.
	b.Kill(0)
	b.Restart(0)
	if b.Addrs()[0] != bAddr {
		t.Fatalf("restarted on %s, want %s", b.Addrs()[0], bAddr)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := openStream(t, via, topic, "a", "b", 10*time.Second)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a→b after b's broker restarted: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := b.Unload(0, topic); err != nil {
		t.Fatalf("unload: %v", err)
	}
}

// TestReplicateAcrossCutLink: a replication stream from region a to the
// owner of a topic in region b, through a's link proxy with latency, with
// requests in flight while the link is cut for a while: after the heal
// every request is answered in order and each entry is stored once.
func TestReplicateAcrossCutLink(t *testing.T) {
	m := regiontest.StartRegions(t, regiontest.MultiOptions{Regions: []string{"a", "b"}, Brokers: 1, Bookies: 1, Latency: 10 * time.Millisecond})
	b := m.Region("b")
	topic := "public/default/cut"
	cc, err := grpc.NewClient(m.DialAddr("a", b.Addrs()[0]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := clientv1.NewReplicationClient(cc).Replicate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&clientv1.ReplicateRequest{Kind: &clientv1.ReplicateRequest_Open{Open: &clientv1.ReplicateOpen{Topic: topic, SourceRegion: "a", TargetRegion: "b"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("open: %v", err)
	}
	const reqs = 40
	sendErr := make(chan error, 1)
	go func() {
		for k := int64(1); k <= reqs; k++ {
			if k == reqs/2 {
				m.Network.Cut("a", "b", false)
				time.Sleep(300 * time.Millisecond) // the cut lasts a while (not an assertion)
				m.Network.Heal("a", "b")
			}
			if err := st.Send(&clientv1.ReplicateRequest{Kind: &clientv1.ReplicateRequest_Entries{Entries: &clientv1.ReplicateEntries{
				RequestId: k, Entries: [][]byte{entry(t, "a", 2*k-1), entry(t, "a", 2*k)}}}}); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	for k := int64(1); k <= reqs; k++ {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("ack %d: %v", k, err)
		}
		a := r.GetAck()
		if a.GetRequestId() != k || len(a.GetResults()) != 2 {
			t.Fatalf("ack %v, want request %d", a, k)
		}
		for _, res := range a.GetResults() {
			if res != clientv1.ReplicateResult_REPLICATE_RESULT_PERSISTED {
				t.Fatalf("request %d: %v (%v)", k, a.GetResults(), a.GetError())
			}
		}
		if k == reqs && a.GetApplied()["a"] != 2*reqs {
			t.Fatalf("applied %v, want a=%d", a.GetApplied(), 2*reqs)
		}
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	// Stored once each: the stats of b's copy count exactly the entries.
	adm := clientv1.NewAdminClient(cc)
	stats, err := adm.GetTopicStats(ctx, &clientv1.GetTopicStatsRequest{Topic: topic})
	if err != nil || stats.Entries != 2*reqs {
		t.Fatalf("b stores %d entries (%v), want %d", stats.GetEntries(), err, 2*reqs)
	}
	t.Logf("acknowledged %d entries persisted, stored %d, 0 duplicates", 2*reqs, stats.Entries)
}

// entry is a replicated entry of origin with origin_seq seq.
func entry(t *testing.T, origin string, seq int64) []byte {
	t.Helper()
	body, size, err := wire.EncodeBatch(&clientv1.Batch{Messages: []*clientv1.SingleMessage{{Payload: []byte("m")}}}, clientv1.CompressionType_COMPRESSION_TYPE_NONE)
	if err != nil {
		t.Fatal(err)
	}
	data, err := wire.EncodeEntry(&clientv1.EntryMetadata{ProducerName: "p", SequenceId: seq, NumMessages: 1, UncompressedSize: size,
		OriginRegion: origin, OriginLedgerId: 1, OriginEntryId: seq - 1, OriginSeq: seq}, body)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
