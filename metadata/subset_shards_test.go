package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
)

// TestNodesHostSubsetsOfShards runs the geo layout: three nodes, one per
// region (a, b, c); the global shard has all three as members and each
// region's shard only its own node. With b and c stopped, region a's shard
// still serves reads and writes on a's node, the global shard has no
// quorum (a proposal fails with ErrUnavailable within its context), and
// stale reads of global keys still answer there.
func TestNodesHostSubsetsOfShards(t *testing.T) {
	regions := []string{"a", "b", "c"}
	c := metadatatest.StartClusterWith(t, 3, metadatatest.Options{Configure: func(i int, cfg *metadata.NodeConfig) {
		// The geo layout of `meridian dev`: Meridian's Raft transport.
		cfg.RaftTransport = metadata.RaftTransportMeridian
		// Options.Shards defaults to the global shard across all nodes;
		// add this node's regional shard with itself as the only member.
		cfg.Shards = append(cfg.Shards, metadata.ShardConfig{
			Name:    regions[i],
			ShardID: uint64(10 + i),
			Members: map[uint64]string{cfg.NodeID: cfg.RaftAddress},
		})
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for i, r := range regions {
		if _, err := c.Node(i).Store(regions[(i+1)%3]); !errors.Is(err, metadata.ErrInvalidArgument) {
			t.Fatalf("node %d hosts shard %q it is not a member of (err %v)", i+1, regions[(i+1)%3], err)
		}
		st := c.Store(i, r)
		if _, err := st.Put(ctx, "regional/"+r, []byte(r), metadata.MustNotExist, 0); err != nil {
			t.Fatalf("region %s: put: %v", r, err)
		}
	}
	putVia(t, c, []int{0, 1, 2}, "global/k", "v")
	waitState(t, c, "global/", map[string]string{"global/k": "v"})

	c.StopNode(1)
	c.StopNode(2)

	// Region a's shard serves reads and writes.
	sa := c.Store(0, "a")
	if _, err := sa.Put(ctx, "regional/a2", []byte("x"), metadata.MustNotExist, 0); err != nil {
		t.Fatalf("region a's shard refused a write with b and c down: %v", err)
	}
	if kv, err := sa.Get(ctx, "regional/a2", metadata.ReadOptions{}); err != nil || string(kv.Value) != "x" {
		t.Fatalf("region a's shard: linearizable read = %q, %v", kv.Value, err)
	}

	// The global shard loses its leader (CheckQuorum) and then refuses
	// proposals with ErrUnavailable, within the caller's context.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := c.Node(0).LeaderID(metadata.GlobalShard); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node 1 still knows a global leader 30s after losing quorum")
		}
		time.Sleep(20 * time.Millisecond)
	}
	sg := c.Store(0, metadata.GlobalShard)
	for i := range 3 {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		start := time.Now()
		_, err := sg.Put(pctx, fmt.Sprintf("global/lost%d", i), []byte("x"), metadata.MustNotExist, 0)
		pcancel()
		if !errors.Is(err, metadata.ErrUnavailable) {
			t.Fatalf("global put without quorum: %v, want ErrUnavailable", err)
		}
		// Bound: the 2 s context plus generous slack for a loaded machine.
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("global put without quorum took %v with a 2s context", took)
		}
	}
	// Stale reads of global keys still answer on the surviving node.
	kv, err := sg.Get(ctx, "global/k", metadata.ReadOptions{Stale: true})
	if err != nil || string(kv.Value) != "v" {
		t.Fatalf("stale read of a global key without quorum = %q, %v", kv.Value, err)
	}
}
