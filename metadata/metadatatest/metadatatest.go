// Package metadatatest starts real metadata stores (Dragonboat on loopback,
// data in t.TempDir()) for tests of this and other packages.
package metadatatest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/metadata"
)

// Start runs a single-node store hosting the global shard and returns its
// in-process Store. The node stops on t.Cleanup.
func Start(t testing.TB) metadata.Store {
	t.Helper()
	c := StartClusterWith(t, 1, Options{})
	return c.Store(0, metadata.GlobalShard)
}

// Options tune a test cluster.
type Options struct {
	// Shards are the shard names every node hosts (default: global).
	Shards []string
	// GRPC starts each node's gRPC server on a free loopback port.
	GRPC bool
	// HTTP starts each node's HTTP server on a free loopback port.
	HTTP bool
	// Configure, if set, edits each node's config before it starts.
	Configure func(i int, cfg *metadata.NodeConfig)
}

// Cluster is a set of metadata nodes in this process, each with its own
// NodeHost, raft port and data dir, all replicas of the same shards.
type Cluster struct {
	t       testing.TB
	mu      sync.Mutex
	nodes   []*metadata.Node
	configs []metadata.NodeConfig
}

// StartCluster runs n nodes hosting the global shard and waits until every
// node serves linearizable reads. Nodes stop on t.Cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWith(t, n, Options{})
}

// StartClusterWith is StartCluster with options.
func StartClusterWith(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	if len(opts.Shards) == 0 {
		opts.Shards = []string{metadata.GlobalShard}
	}
	logger := slog.New(newTestHandler(t))
	c := &Cluster{t: t, nodes: make([]*metadata.Node, n), configs: make([]metadata.NodeConfig, n)}
	// The first TempDir registers the removal of every later one: before
	// the nodes' stop, so that it runs after it (cleanups run last first)
	// and no node is still writing a snapshot into a removed dir.
	t.TempDir()
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, nd := range c.nodes {
			if nd != nil {
				nd.Stop()
			}
		}
	})
	// A free port can be taken by another process between FreeAddr and
	// Dragonboat's bind: start over on fresh ports and dirs a few times.
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		c.configure(n, opts, logger)
		err = nil
		for i := range n {
			if _, err = c.startNode(i); err != nil {
				break
			}
		}
		if err == nil {
			break
		}
		for i := range n {
			c.StopNode(i)
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		t.Fatalf("metadatatest: %v", err)
	}
	c.WaitReady()
	return c
}

// configure builds the node configs on fresh ports and data dirs.
func (c *Cluster) configure(n int, opts Options, logger *slog.Logger) {
	raft := make([]string, n)
	for i := range raft {
		raft[i] = FreeAddr(c.t)
	}
	for i := range n {
		cfg := metadata.DefaultNodeConfig()
		cfg.NodeID = uint64(i + 1)
		cfg.RaftAddress = raft[i]
		cfg.DataDir = filepath.Join(c.t.TempDir(), fmt.Sprintf("meta%d", i+1))
		cfg.Logger = logger.With("node", i+1)
		if opts.GRPC {
			cfg.GRPCAddress = "127.0.0.1:0"
		}
		if opts.HTTP {
			cfg.HTTPAddress = "127.0.0.1:0"
		}
		for s, name := range opts.Shards {
			members := map[uint64]string{}
			for j := range n {
				members[uint64(j+1)] = raft[j]
			}
			cfg.Shards = append(cfg.Shards, metadata.ShardConfig{Name: name, ShardID: uint64(s + 1), Members: members})
		}
		if opts.Configure != nil {
			opts.Configure(i, &cfg)
		}
		c.configs[i] = cfg
	}
}

// StartNode starts (or restarts, on the same data dir and addresses) node i.
func (c *Cluster) StartNode(i int) *metadata.Node {
	c.t.Helper()
	nd, err := c.startNode(i)
	if err != nil {
		c.t.Fatalf("metadatatest: %v", err)
	}
	return nd
}

func (c *Cluster) startNode(i int) (*metadata.Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	nd, err := metadata.NewNode(c.configs[i])
	if err != nil {
		return nil, fmt.Errorf("node %d config: %w", i+1, err)
	}
	if err := nd.Start(context.Background()); err != nil {
		return nil, fmt.Errorf("start node %d: %w", i+1, err)
	}
	// Keep the ports chosen on first start so clients' endpoints stay valid.
	if nd.GRPCAddr() != "" {
		c.configs[i].GRPCAddress = nd.GRPCAddr()
	}
	if nd.HTTPAddr() != "" {
		c.configs[i].HTTPAddress = nd.HTTPAddr()
	}
	c.nodes[i] = nd
	return nd, nil
}

// StopNode stops node i (its data stays for a restart).
func (c *Cluster) StopNode(i int) {
	c.mu.Lock()
	nd := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if nd != nil {
		nd.Stop()
	}
}

// Node returns node i (nil while stopped).
func (c *Cluster) Node(i int) *metadata.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Size is the number of nodes, running or not.
func (c *Cluster) Size() int { return len(c.configs) }

// Store returns node i's in-process Store of a shard.
func (c *Cluster) Store(i int, shard string) metadata.Store {
	c.t.Helper()
	nd := c.Node(i)
	if nd == nil {
		c.t.Fatalf("metadatatest: node %d is stopped", i+1)
	}
	st, err := nd.Store(shard)
	if err != nil {
		c.t.Fatalf("metadatatest: %v", err)
	}
	return st
}

// Endpoints returns every node's gRPC address (Options.GRPC must be set).
func (c *Cluster) Endpoints() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var eps []string
	for _, cfg := range c.configs {
		eps = append(eps, cfg.GRPCAddress)
	}
	return eps
}

// WaitReady waits (up to 30 s) until every running node serves
// linearizable reads of every shard.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range c.configs {
		if nd := c.Node(i); nd != nil {
			if err := nd.WaitReady(ctx); err != nil {
				c.t.Fatalf("metadatatest: node %d: %v", i+1, err)
			}
		}
	}
}

// Leader returns the index of the node leading the shard, as the running
// nodes agree on it, waiting up to 30 s for one.
func (c *Cluster) Leader(shard string) int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for i := range c.configs {
			nd := c.Node(i)
			if nd == nil {
				continue
			}
			id, ok := nd.LeaderID(shard)
			if ok && id >= 1 && int(id) <= len(c.configs) && c.Node(int(id)-1) != nil {
				return int(id) - 1
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("metadatatest: no leader for shard %q", shard)
	return -1
}

// FreeAddr returns a free 127.0.0.1 port as host:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("metadatatest: free port: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// testHandler routes warnings and errors to t.Log until the test ends
// (logging after that panics in the testing package).
type handlerState struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func newTestHandler(t testing.TB) slog.Handler {
	st := &handlerState{t: t}
	t.Cleanup(func() {
		st.mu.Lock()
		st.done = true
		st.mu.Unlock()
	})
	w := writerFunc(func(p []byte) (int, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		if !st.done {
			st.t.Log(strings.TrimRight(string(p), "\n"))
		}
		return len(p), nil
	})
	return slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
