package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

// putRetry writes a fresh key (MustNotExist) through node i, retrying while
// the cluster has no leader; a retried create that finds the key with our
// value counts as written. It returns false if the write never succeeded.
func putRetry(t *testing.T, c *metadatatest.Cluster, i int, key, val string) bool {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		nd := c.Node(i)
		if nd == nil {
			i = (i + 1) % c.Size()
			continue
		}
		st, err := nd.Store(metadata.GlobalShard)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = st.Put(ctx, key, []byte(val), metadata.MustNotExist, 0)
		cancel()
		switch {
		case err == nil:
			return true
		case errors.Is(err, metadata.ErrVersionMismatch):
			// An earlier attempt with an unknown outcome applied.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			kv, gerr := st.Get(ctx, key, metadata.ReadOptions{})
			cancel()
			if gerr == nil && string(kv.Value) == val {
				return true
			}
			t.Fatalf("%s holds %q (err %v), want %q", key, kv.Value, gerr, val)
		case errors.Is(err, metadata.ErrUnknownOutcome), errors.Is(err, metadata.ErrUnavailable):
			i = (i + 1) % c.Size()
		default:
			t.Fatalf("put %s: %v", key, err)
		}
	}
	return false
}

// checkAll asserts every acknowledged key is on node i (linearizable read
// through that node) and reports keys that are there but were not acked.
func checkAll(t *testing.T, c *metadatatest.Cluster, i int, prefix string, acked map[string]string) {
	t.Helper()
	st := c.Store(i, metadata.GlobalShard)
	ctx := ctxT(t)
	res := must[metadata.ListResult](t)(st.List(ctx, prefix, metadata.Page{Limit: metadata.MaxPageLimit}, metadata.ReadOptions{}))
	got := map[string]string{}
	for _, kv := range res.KVs {
		got[kv.Key] = string(kv.Value)
	}
	for k, v := range acked {
		if got[k] != v {
			t.Errorf("node %d: acknowledged %s=%s lost (have %q)", i+1, k, v, got[k])
		}
	}
	if extra := len(got) - len(acked); extra > 0 {
		t.Logf("node %d: %d keys applied without acknowledgement (unknown outcomes)", i+1, extra)
	}
}

// waitCaughtUp polls node i's local replica until it holds every acked key.
func waitCaughtUp(t *testing.T, c *metadatatest.Cluster, i int, prefix string, acked map[string]string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := c.Store(i, metadata.GlobalShard)
		res, err := st.List(context.Background(), prefix, metadata.Page{Limit: metadata.MaxPageLimit}, metadata.ReadOptions{Stale: true})
		if err == nil {
			n := 0
			for _, kv := range res.KVs {
				if acked[kv.Key] == string(kv.Value) {
					n++
				}
			}
			if n == len(acked) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d did not catch up: %v", i+1, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestClusterLeaderFailover(t *testing.T) {
	c := metadatatest.StartCluster(t, 3)
	acked := map[string]string{}
	for i := range 20 {
		k := fmt.Sprintf("f/%03d", i)
		if putRetry(t, c, i%3, k, "v"+k) {
			acked[k] = "v" + k
		}
	}
	old := c.Leader(metadata.GlobalShard)
	c.StopNode(old)
	start := time.Now()
	for i := 20; i < 40; i++ {
		k := fmt.Sprintf("f/%03d", i)
		if !putRetry(t, c, (old+1+i%2)%3, k, "v"+k) {
			t.Fatalf("write %s never succeeded after the leader stopped", k)
		}
		acked[k] = "v" + k
	}
	t.Logf("20 writes after stopping leader node %d took %v", old+1, time.Since(start))
	if nl := c.Leader(metadata.GlobalShard); nl == old {
		t.Fatalf("leader is still the stopped node %d", old+1)
	}
	c.StartNode(old)
	waitCaughtUp(t, c, old, "f/", acked)
	for i := range 3 {
		checkAll(t, c, i, "f/", acked)
	}
}

func TestClusterFollowerDown(t *testing.T) {
	c := metadatatest.StartCluster(t, 3)
	leader := c.Leader(metadata.GlobalShard)
	follower := (leader + 1) % 3
	other := (leader + 2) % 3
	c.StopNode(follower)
	ctx := ctxT(t)
	acked := map[string]string{}
	for i := range 30 {
		k := fmt.Sprintf("d/%03d", i)
		st := c.Store([]int{leader, other}[i%2], metadata.GlobalShard)
		must[metadata.KV](t)(st.Put(ctx, k, []byte(k), metadata.MustNotExist, 0))
		acked[k] = k
		got := must[metadata.KV](t)(c.Store(other, metadata.GlobalShard).Get(ctx, k, metadata.ReadOptions{}))
		if string(got.Value) != k {
			t.Fatalf("linearizable read on the other follower: %+v", got)
		}
	}
	c.StartNode(follower)
	waitCaughtUp(t, c, follower, "d/", acked)
	checkAll(t, c, follower, "d/", acked)
}

func TestClusterSnapshotRestart(t *testing.T) {
	var dirs []string
	c := metadatatest.StartClusterWith(t, 3, metadatatest.Options{Configure: func(_ int, cfg *metadata.NodeConfig) {
		cfg.SnapshotEntries = 25
		cfg.CompactionOverhead = 5
		dirs = append(dirs, cfg.DataDir)
	}})
	ctx := ctxT(t)
	acked := map[string]string{}
	st := c.Store(0, metadata.GlobalShard)
	for i := range 120 {
		k := fmt.Sprintf("s/%03d", i)
		must[metadata.KV](t)(st.Put(ctx, k, []byte(k), metadata.AnyVersion, 0))
		acked[k] = k
	}
	rev := must[metadata.ListResult](t)(st.List(ctx, "s/", metadata.Page{Limit: 1}, metadata.ReadOptions{})).Revision
	for i := range 3 {
		c.StopNode(i)
	}
	for _, d := range dirs {
		if n := countSnapshots(t, d); n == 0 {
			t.Fatalf("no snapshot under %s", d)
		}
	}
	for i := range 3 {
		c.StartNode(i)
	}
	c.WaitReady()
	for i := range 3 {
		checkAll(t, c, i, "s/", acked)
	}
	// The watch history survived the restart: resume from before it.
	evs := collect(t, func() <-chan metadata.Event {
		ch, _ := c.Store(1, metadata.GlobalShard).Watch(ctx, "s/", rev-10)
		return ch
	}(), 10)
	if evs[0].Revision != rev-9 || evs[9].Revision != rev || evs[9].KV.Key != "s/119" {
		t.Fatalf("history after restart: %+v .. %+v", evs[0], evs[9])
	}
}

func countSnapshots(t *testing.T, dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), "snapshot-") {
			n++
		}
		return nil
	})
	return n
}

func TestClientFailoverAndWatchResume(t *testing.T) {
	c := metadatatest.StartClusterWith(t, 3, metadatatest.Options{GRPC: true})
	cl := newClient(t, c.Endpoints(), metadata.GlobalShard)
	ctx := ctxT(t)
	evc, errc := cl.Watch(ctx, "c/", 0)
	acked := map[string]string{}
	write := func(i int) {
		k := fmt.Sprintf("c/%03d", i)
		// A guarded create is retried by the client across endpoints.
		_, err := cl.Put(ctx, k, []byte(k), metadata.MustNotExist, 0)
		if errors.Is(err, metadata.ErrUnknownOutcome) {
			// Re-read to learn whether it applied, as the contract says.
			kv, gerr := cl.Get(ctx, k, metadata.ReadOptions{})
			if gerr == nil && string(kv.Value) == k {
				t.Logf("put %s: unknown outcome, found applied", k)
				err = nil
			}
		}
		if err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		acked[k] = k
	}
	for i := range 10 {
		write(i)
	}
	// Node 1 is the client's first endpoint: it serves the watch stream.
	// Stop it (and whichever node leads) in turn.
	c.StopNode(0)
	for i := 10; i < 20; i++ {
		write(i)
	}
	c.StartNode(0)
	leader := c.Leader(metadata.GlobalShard)
	c.StopNode(leader)
	for i := 20; i < 30; i++ {
		write(i)
	}
	c.StartNode(leader)
	evs := collect(t, evc, 30)
	seen := map[int64]bool{}
	for i, ev := range evs {
		if seen[ev.Revision] {
			t.Fatalf("revision %d delivered twice", ev.Revision)
		}
		seen[ev.Revision] = true
		if want := fmt.Sprintf("c/%03d", i); ev.KV.Key != want {
			t.Fatalf("event %d is %s, want %s", i, ev.KV.Key, want)
		}
	}
	select {
	case ev := <-evc:
		t.Fatalf("extra event %+v", ev)
	case err := <-errc:
		t.Fatalf("watch ended: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	for i := range 3 {
		waitCaughtUp(t, c, i, "c/", acked)
	}
}

func TestClientWatchAcrossServerRestart(t *testing.T) {
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{GRPC: true})
	cl := newClient(t, c.Endpoints(), metadata.GlobalShard)
	ctx := ctxT(t)
	evc, _ := cl.Watch(ctx, "", 0)
	for i := range 5 {
		must[metadata.KV](t)(cl.Put(ctx, fmt.Sprint(i), nil, 0, 0))
	}
	first := collect(t, evc, 3)
	c.StopNode(0)
	c.StartNode(0)
	c.WaitReady()
	for i := 5; i < 10; i++ {
		must[metadata.KV](t)(cl.Put(ctx, fmt.Sprint(i), nil, metadata.MustNotExist, 0))
	}
	evs := append(first, collect(t, evc, 7)...)
	for i, ev := range evs {
		if ev.Revision != int64(i+1) || ev.KV.Key != fmt.Sprint(i) {
			t.Fatalf("event %d: %+v", i, ev)
		}
	}
}

// TestClientSkipsDeadEndpoint: a refused connection means nothing was sent,
// so even an unguarded write or a new session moves on to the next endpoint.
func TestClientSkipsDeadEndpoint(t *testing.T) {
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{GRPC: true})
	dead := deadAddr(t)
	cl := newClient(t, append([]string{dead}, c.Endpoints()...), metadata.GlobalShard)
	ctx := ctxT(t)
	if _, err := cl.Put(ctx, "k", []byte("v"), metadata.AnyVersion, 0); err != nil {
		t.Fatalf("unguarded put past a dead endpoint: %v", err)
	}
	if _, err := cl.CreateSession(ctx, time.Second); err != nil {
		t.Fatalf("create session past a dead endpoint: %v", err)
	}
	// With every endpoint dead a read reports unavailable, not a hang.
	c.StopNode(0)
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := cl.Get(short, "k", metadata.ReadOptions{}); !errors.Is(err, metadata.ErrUnavailable) {
		t.Fatalf("get with no live endpoint: %v", err)
	}
	short2, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	if _, err := cl.Put(short2, "k", nil, metadata.AnyVersion, 0); !errors.Is(err, metadata.ErrUnavailable) {
		t.Fatalf("unguarded put with no live endpoint (nothing sent): %v", err)
	}
}

// TestShardsWithOwnReplicaSets hosts the global shard on three nodes, "eu"
// on node 1 alone and "us" on nodes 2 and 3: each shard lives or stalls
// with its own replicas.
func TestShardsWithOwnReplicaSets(t *testing.T) {
	c := metadatatest.StartClusterWith(t, 3, metadatatest.Options{Configure: func(i int, cfg *metadata.NodeConfig) {
		all := cfg.Shards[0].Members
		if i == 0 {
			cfg.Shards = append(cfg.Shards, metadata.ShardConfig{Name: "eu", ShardID: 10, Members: map[uint64]string{1: all[1]}})
		} else {
			cfg.Shards = append(cfg.Shards, metadata.ShardConfig{Name: "us", ShardID: 20, Members: map[uint64]string{2: all[2], 3: all[3]}})
		}
	}})
	ctx := ctxT(t)
	must[metadata.KV](t)(c.Store(0, "eu").Put(ctx, "k", []byte("eu"), 0, 0))
	must[metadata.KV](t)(c.Store(1, "us").Put(ctx, "k", []byte("us"), 0, 0))
	must[metadata.KV](t)(c.Store(2, metadata.GlobalShard).Put(ctx, "k", []byte("global"), 0, 0))
	if got := must[metadata.KV](t)(c.Store(2, "us").Get(ctx, "k", metadata.ReadOptions{})); string(got.Value) != "us" {
		t.Fatalf("us on node 3: %q", got.Value)
	}
	if _, err := c.Node(0).Store("us"); !errors.Is(err, metadata.ErrInvalidArgument) {
		t.Fatalf("node 1 hosts us: %v", err)
	}
	// Node 3 down: "us" has 1 of 2 replicas and stalls; global (2 of 3) and
	// eu (1 of 1) go on.
	c.StopNode(2)
	must[metadata.KV](t)(c.Store(0, metadata.GlobalShard).Put(ctx, "k2", nil, metadata.MustNotExist, 0))
	must[metadata.KV](t)(c.Store(0, "eu").Put(ctx, "k2", nil, metadata.MustNotExist, 0))
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := c.Store(1, "us").Put(short, "k2", nil, metadata.MustNotExist, 0)
	if !errors.Is(err, metadata.ErrUnavailable) && !errors.Is(err, metadata.ErrUnknownOutcome) {
		t.Fatalf("us without quorum: %v", err)
	}
	c.StartNode(2)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.Store(1, "us").Put(ctx, "k3", nil, metadata.AnyVersion, 0)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("us did not recover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
