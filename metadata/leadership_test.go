package metadata_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/prometheus/client_golang/prometheus"
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLeaderVisible: which node leads each shard shows in the
// meridian_metadata_is_leader gauge, in /status, in the Status RPC (through
// the client, for every endpoint) and in a log line on every change.
func TestLeaderVisible(t *testing.T) {
	regs := make([]*prometheus.Registry, 3)
	logs := make([]*syncBuffer, 3)
	c := metadatatest.StartClusterWith(t, 3, metadatatest.Options{GRPC: true, HTTP: true, Shards: []string{metadata.GlobalShard, "local"},
		Configure: func(i int, cfg *metadata.NodeConfig) {
			regs[i] = prometheus.NewRegistry()
			cfg.Registerer = regs[i]
			logs[i] = &syncBuffer{}
			cfg.Logger = slog.New(slog.NewTextHandler(logs[i], &slog.HandlerOptions{Level: slog.LevelInfo}))
		}})
	cl := newClient(t, c.Endpoints(), metadata.GlobalShard)

	// check waits until every view of the running nodes agrees on who
	// leads each shard; it returns the global shard's leader index.
	check := func(running []int) int {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				sts := cl.NodeStatuses(ctx)
				if len(sts) != 3 {
					return fmt.Errorf("client reported %d nodes, want 3", len(sts))
				}
				for _, i := range running {
					st := sts[i]
					if st.Error != "" || st.NodeID != uint64(i+1) || len(st.Shards) != 2 {
						return fmt.Errorf("node %d status via client: %+v", i+1, st)
					}
					for _, s := range st.Shards {
						ls := c.Leader(s.Name)
						if s.LeaderID != uint64(ls+1) || s.IsLeader != (i == ls) || s.Term == 0 ||
							s.LeaderAddress != c.Node(ls).Config().RaftAddress {
							return fmt.Errorf("node %d shard %s: %+v (leader is node %d)", i+1, s.Name, s, ls+1)
						}
					}
					// The same view over HTTP /status.
					code, body := httpGet(t, "http://"+c.Node(i).HTTPAddr()+"/status")
					var hs metadata.NodeStatus
					if err := json.Unmarshal([]byte(body), &hs); code != 200 || err != nil || len(hs.Shards) != 2 {
						return fmt.Errorf("node %d /status %d %v: %s", i+1, code, err, body)
					}
					for _, s := range hs.Shards {
						if ls := c.Leader(s.Name); s.LeaderID != uint64(ls+1) || s.IsLeader != (i == ls) {
							return fmt.Errorf("node %d /status shard %s: %+v", i+1, s.Name, s)
						}
					}
					// And in the gauge.
					_, metrics := httpGet(t, "http://"+c.Node(i).HTTPAddr()+"/metrics")
					for _, shard := range []string{metadata.GlobalShard, "local"} {
						v := 0
						if c.Leader(shard) == i {
							v = 1
						}
						if g := fmt.Sprintf(`meridian_metadata_is_leader{shard=%q} %d`, shard, v); !strings.Contains(metrics, g) {
							return fmt.Errorf("node %d metrics lack %s", i+1, g)
						}
					}
				}
				return nil
			}()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return c.Leader(metadata.GlobalShard)
	}
	leader := check([]int{0, 1, 2})
	if !strings.Contains(logs[leader].String(), "metadata shard leader changed") || !strings.Contains(logs[leader].String(), "this_node=true") {
		t.Fatalf("leader node %d logged no leadership line:\n%s", leader+1, logs[leader].String())
	}

	// Stop the leader: the others report the new one; the stopped node's
	// endpoint is reported with an error, not a failed call.
	c.StopNode(leader)
	var running []int
	for i := range 3 {
		if i != leader {
			running = append(running, i)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		nl := c.Leader(metadata.GlobalShard)
		nl2 := c.Leader("local")
		if nl != leader && nl2 != leader {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new leader after stopping the old one")
		}
		time.Sleep(50 * time.Millisecond)
	}
	newLeader := check(running)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st := cl.NodeStatuses(ctx)[leader]; st.Error == "" {
		t.Fatalf("stopped node %d reported without error: %+v", leader+1, st)
	}
	if !strings.Contains(logs[newLeader].String(), "this_node=true") {
		t.Fatalf("new leader node %d logged no leadership line:\n%s", newLeader+1, logs[newLeader].String())
	}
}
