package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/meridianmq/meridian/chaos"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/prometheus/client_golang/prometheus"
)

// proxiedCluster is a metadata cluster whose nodes reach each other only
// through chaos link proxies: node i dials node j's Raft address through a
// proxy of the link ("n<i+1>" → "n<j+1>").
type proxiedCluster struct {
	*metadatatest.Cluster
	net  *chaos.Network
	regs []*prometheus.Registry
}

func nodeName(i int) string { return fmt.Sprintf("n%d", i+1) }

func startProxiedCluster(t *testing.T, n int, configure func(cfg *metadata.NodeConfig)) *proxiedCluster {
	t.Helper()
	pc := &proxiedCluster{net: chaos.NewNetwork(nil), regs: make([]*prometheus.Registry, n)}
	t.Cleanup(pc.net.Close)
	pc.Cluster = metadatatest.StartClusterWith(t, n, metadatatest.Options{Configure: func(i int, cfg *metadata.NodeConfig) {
		cfg.RaftDialRewrite = map[string]string{}
		for id, addr := range cfg.Shards[0].Members {
			j := int(id) - 1
			if j == i {
				continue
			}
			p, err := pc.net.Proxy(nodeName(i), nodeName(j), "127.0.0.1:0", addr)
			if err != nil {
				t.Fatal(err)
			}
			cfg.RaftDialRewrite[addr] = p.Addr()
		}
		pc.regs[i] = prometheus.NewRegistry()
		cfg.Registerer = replacingRegisterer{pc.regs[i]}
		if configure != nil {
			configure(cfg)
		}
	}})
	return pc
}

// replacingRegisterer lets a restarted node register its metrics again in
// the same registry: the new collectors replace the old ones.
type replacingRegisterer struct{ *prometheus.Registry }

func (r replacingRegisterer) Register(c prometheus.Collector) error {
	r.Unregister(c)
	return r.Registry.Register(c)
}

func (r replacingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Unregister(c)
		r.Registry.MustRegister(c)
	}
}

// isolate cuts every link of node i, both ways; heal restores them.
func (pc *proxiedCluster) isolate(i int) {
	for j := range pc.Size() {
		if j != i {
			pc.net.Cut(nodeName(i), nodeName(j), false)
		}
	}
}

func (pc *proxiedCluster) heal(i int) {
	for j := range pc.Size() {
		if j != i {
			pc.net.Heal(nodeName(i), nodeName(j))
		}
	}
}

// counter sums a counter of node i's registry over the series whose labels
// include want.
func (pc *proxiedCluster) counter(t *testing.T, i int, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := pc.regs[i].Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// putVia writes key=val (MustNotExist) through one of the nodes in via,
// retrying until the deadline. An unknown outcome followed by a version
// mismatch holding our value counts as written.
func putVia(t *testing.T, c *metadatatest.Cluster, via []int, key, val string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for k := 0; time.Now().Before(deadline); k++ {
		st := c.Store(via[k%len(via)], metadata.GlobalShard)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := st.Put(ctx, key, []byte(val), metadata.MustNotExist, 0)
		if errors.Is(err, metadata.ErrVersionMismatch) {
			kv, gerr := st.Get(ctx, key, metadata.ReadOptions{})
			if gerr == nil && string(kv.Value) == val {
				err = nil
			}
		}
		cancel()
		if err == nil {
			return
		}
		last = err
	}
	t.Fatalf("put %s through nodes %v never succeeded: %v", key, via, last)
}

// localState lists node i's local replica of the global shard under prefix.
func localState(c *metadatatest.Cluster, i int, prefix string) (map[string]string, error) {
	st, err := c.Node(i).Store(metadata.GlobalShard)
	if err != nil {
		return nil, err
	}
	res, err := st.List(context.Background(), prefix, metadata.Page{Limit: metadata.MaxPageLimit}, metadata.ReadOptions{Stale: true})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, kv := range res.KVs {
		out[kv.Key] = string(kv.Value)
	}
	return out, nil
}

// waitState polls until every node's local replica equals want.
func waitState(t *testing.T, c *metadatatest.Cluster, prefix string, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := range c.Size() {
		for {
			got, err := localState(c, i, prefix)
			if err == nil && maps.Equal(got, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: state under %q is %d keys (err %v), want %d", i+1, prefix, len(got), err, len(want))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestRaftTransportCutAndHeal runs a 3-node metadata cluster whose Raft
// traffic goes through link proxies by dial rewrite, with WAN-like latency:
// proposals work; with one node's links cut the other two keep quorum and
// proposals succeed; after the heal the cut node catches up to the same
// state.
func TestRaftTransportCutAndHeal(t *testing.T) {
	pc := startProxiedCluster(t, 3, func(cfg *metadata.NodeConfig) {
		// 15 ms one-way (30 ms RTT): the Raft tick must be well above the
		// RTT, as for a global shard across regions.
		cfg.RTT = 50 * time.Millisecond
	})
	for i := range 3 {
		for j := i + 1; j < 3; j++ {
			if err := pc.net.SetLatency(nodeName(i), nodeName(j), 15*time.Millisecond, 3*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]string{}
	for i := range 10 {
		k := fmt.Sprintf("cut/a%02d", i)
		putVia(t, pc.Cluster, []int{i % 3}, k, "v"+k)
		want[k] = "v" + k
	}
	waitState(t, pc.Cluster, "cut/", want)
	for i := range 3 {
		if got := pc.counter(t, i, "meridian_metadata_raft_transport_frames_total", map[string]string{"direction": "sent"}); got == 0 {
			t.Fatalf("node %d sent no frame through the rewriting transport", i+1)
		}
	}

	// Cut the leader, the hardest case: the other two must elect a new one.
	cut := pc.Leader(metadata.GlobalShard)
	others := []int{(cut + 1) % 3, (cut + 2) % 3}
	pc.isolate(cut)
	t.Logf("cut node %d off", cut+1)
	start := time.Now()
	for i := range 20 {
		k := fmt.Sprintf("cut/b%02d", i)
		putVia(t, pc.Cluster, others, k, "v"+k)
		want[k] = "v" + k
	}
	t.Logf("20 writes with node %d cut took %v", cut+1, time.Since(start))
	if got, _ := localState(pc.Cluster, cut, "cut/"); len(got) >= len(want) {
		t.Fatalf("cut node %d has %d keys, want fewer than %d: the cut did not hold", cut+1, len(got), len(want))
	}

	pc.heal(cut)
	waitState(t, pc.Cluster, "cut/", want)
	// And the healed node serves linearizable reads again.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		st := pc.Store(cut, metadata.GlobalShard)
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		kv, err := st.Get(rctx, "cut/b19", metadata.ReadOptions{})
		rcancel()
		if err == nil && string(kv.Value) == "vcut/b19" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("healed node %d: linearizable read: %v", cut+1, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRaftTransportSnapshot makes a stopped node fall behind a compacted
// log, so that after its restart it can only catch up from a snapshot sent
// in chunks through the rewriting transport and the proxies. (A cut does
// not do it: the proxy stalls bytes, so the appends the leader sent during
// the cut arrive after the heal.)
func TestRaftTransportSnapshot(t *testing.T) {
	pc := startProxiedCluster(t, 3, func(cfg *metadata.NodeConfig) {
		cfg.SnapshotEntries = 10
		cfg.CompactionOverhead = 2
	})
	cut := 2
	pc.StopNode(cut)
	want := map[string]string{}
	for i := range 60 {
		k := fmt.Sprintf("snap/%03d", i)
		// A large value makes the snapshot span more than one frame's worth
		// of bytes without slowing the test.
		v := fmt.Sprintf("%s-%0512d", k, i)
		putVia(t, pc.Cluster, []int{0, 1}, k, v)
		want[k] = v
	}
	pc.StartNode(cut)
	waitState(t, pc.Cluster, "snap/", want)
	chunks := pc.counter(t, cut, "meridian_metadata_raft_transport_frames_total", map[string]string{"direction": "received", "kind": "chunk"})
	if chunks == 0 {
		t.Fatalf("node %d caught up without receiving a snapshot chunk; the test did not exercise snapshots", cut+1)
	}
	t.Logf("node %d received %v snapshot chunks", cut+1, chunks)
}
