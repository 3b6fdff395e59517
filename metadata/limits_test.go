package metadata_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metadatav1 "github.com/meridianmq/meridian/api/metadata/v1"
	"github.com/meridianmq/meridian/internal/netguard/netguardtest"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestNodeLimitsPerIP: the node's gRPC, HTTP and Raft listeners each
// refuse connection N+1 from one IP and accept again after one closes.
func TestNodeLimitsPerIP(t *testing.T) {
	var raftAddr string
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{GRPC: true, HTTP: true, Configure: func(_ int, cfg *metadata.NodeConfig) {
		cfg.MaxConnectionsPerIP = 2
		raftAddr = cfg.RaftAddress
	}})
	netguardtest.CheckPerIPLimit(t, c.Node(0).GRPCAddr(), 2, nil)
	netguardtest.CheckPerIPLimit(t, c.Node(0).HTTPAddr(), 2, netguardtest.HTTPProbe)

	// The Raft listener never writes first: a held connection stays open
	// (its read times out), a refused one is closed at once.
	open := func() (net.Conn, bool) {
		t.Helper()
		conn, err := net.DialTimeout("tcp", raftAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err = conn.Read(make([]byte, 1))
		var ne net.Error
		return conn, errors.As(err, &ne) && ne.Timeout()
	}
	var held []net.Conn
	for deadline := time.Now().Add(10 * time.Second); len(held) < 2; {
		if conn, ok := open(); ok {
			held = append(held, conn)
		} else if time.Now().After(deadline) {
			t.Fatal("the Raft listener refuses connections under the limit")
		}
	}
	if _, ok := open(); ok {
		t.Fatal("the Raft listener held a 3rd connection from one IP; max_connections_per_ip is 2")
	}
	held[0].Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, ok := open(); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Raft listener still refuses after a connection closed")
		}
	}
	// The node still commits.
	if _, err := c.Store(0, metadata.GlobalShard).Put(context.Background(), "/after-raft-limit", []byte("v"), metadata.AnyVersion, 0); err != nil {
		t.Fatalf("put after the Raft per-IP test: %v", err)
	}
}

// TestNodeLimitsStreamsTimeoutsAndSize: the gRPC server announces the
// stream and header caps and refuses a message over max_txn_bytes plus
// framing; the HTTP server cuts a slow body and an idle connection.
func TestNodeLimitsStreamsTimeoutsAndSize(t *testing.T) {
	c := metadatatest.StartClusterWith(t, 1, metadatatest.Options{GRPC: true, HTTP: true, Configure: func(_ int, cfg *metadata.NodeConfig) {
		cfg.MaxStreamsPerConnection = 9
		cfg.HTTPReadTimeout = 200 * time.Millisecond
		cfg.HTTPIdleTimeout = 200 * time.Millisecond
	}})
	set := netguardtest.GRPCSettings(t, c.Node(0).GRPCAddr())
	if set[netguardtest.SettingMaxConcurrentStreams] != 9 || set[netguardtest.SettingMaxHeaderListSize] == 0 {
		t.Fatalf("metadata SETTINGS %v: want max_concurrent_streams 9 and a max_header_list_size", set)
	}
	netguardtest.CheckSlowBodyCut(t, c.Node(0).HTTPAddr(), "/healthz")
	netguardtest.CheckIdleCut(t, c.Node(0).HTTPAddr())
	cc, err := grpc.NewClient(c.Node(0).GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	big := bytes.Repeat([]byte{1}, 6<<20) // max_txn_bytes is 4 MiB, the limit 5 MiB
	_, err = metadatav1.NewMetadataClient(cc).Put(ctxT(t), &metadatav1.PutRequest{Shard: metadata.GlobalShard, Key: "k", Value: big})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("6 MiB put: %v, want ResourceExhausted", err)
	}
}

func TestNodeConfigValidateLimits(t *testing.T) {
	cfg := metadata.SingleNodeConfig(t.TempDir(), "127.0.0.1:1", metadata.GlobalShard)
	cfg.HTTPReadTimeout = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "http_read_timeout") {
		t.Fatalf("Validate with http_read_timeout 0: %v, want an error naming it", err)
	}
}

// loadNodeYAML loads a one-node config file with extra YAML lines appended.
func loadNodeYAML(t *testing.T, extra string) metadata.NodeConfig {
	t.Helper()
	p := filepath.Join(t.TempDir(), "node.yaml")
	y := "node_id: 1\nraft_address: 127.0.0.1:1\ndata_dir: " + t.TempDir() + "\nshards:\n  - {name: global, shard_id: 1, members: {1: 127.0.0.1:1}}\n" + extra
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := metadata.LoadNodeConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestNodeConfigLimitsYAML: the limits are top-level node YAML fields.
func TestNodeConfigLimitsYAML(t *testing.T) {
	cfg := loadNodeYAML(t, "max_connections_per_ip: 7\nhttp_idle_timeout: 4s\n")
	if cfg.MaxConnectionsPerIP != 7 || cfg.HTTPIdleTimeout != 4*time.Second || cfg.MaxStreamsPerConnection != metadata.DefaultMaxStreamsPerConnection {
		t.Fatalf("decoded limits %+v", cfg.Limits)
	}
}
