package metadata

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/security"
)

// Fixed limits of the store.
const (
	// MaxKeyBytes is the longest key accepted. Keys are names (paths of
	// tenants, topics, ledgers), not data.
	MaxKeyBytes = 1024
	// MaxPageLimit is the largest List page.
	MaxPageLimit = 1000
	// GlobalShard is the name of the shard holding global metadata.
	GlobalShard = "global"
)

// Raft transports (NodeConfig.RaftTransport).
const (
	// RaftTransportMeridian is metadata/transport.go, the only transport:
	// it validates every frame before Dragonboat sees it, dials through
	// raft_dial_rewrite and applies security.tls.
	RaftTransportMeridian = "meridian"
	// RaftTransportDragonboat names Dragonboat's built-in TCP transport,
	// which is refused: a frame header sizes its buffer (one 20-byte write
	// ran a node out of memory), an Accept error panics, and it passes
	// messages addressed to replica 0 to a registry that panics on them.
	RaftTransportDragonboat = "dragonboat"
)

// NodeConfig configures one metadata node: one Dragonboat NodeHost hosting
// one replica of each of several shards, plus its gRPC and HTTP servers.
type NodeConfig struct {
	// NodeID is this node's replica ID in every shard it hosts (non-zero).
	NodeID uint64 `yaml:"node_id"`
	// RaftAddress is host:port for Raft traffic, shared by all shards.
	RaftAddress string `yaml:"raft_address"`
	// GRPCAddress is where the metadata gRPC service listens ("" = none;
	// port 0 picks a free port, see Node.GRPCAddr).
	GRPCAddress string `yaml:"grpc_address"`
	// HTTPAddress serves /metrics, /healthz, /readyz ("" = none).
	HTTPAddress string `yaml:"http_address"`
	// DataDir holds the Raft log and snapshots; it must be this node's own.
	DataDir string `yaml:"data_dir"`
	// Shards are the shards this node hosts. A node hosts only the shards
	// it lists, each with its own member set: a region's node typically
	// lists the global shard (one or more members per region) and its own
	// region's shard (members in that region only).
	Shards []ShardConfig `yaml:"shards"`
	// RaftDialRewrite maps a peer's Raft address to the address this node
	// dials instead (a link proxy in `meridian dev`), so that cross-region
	// Raft traffic can be delayed and cut. Unmapped addresses are dialed as
	// they are.
	RaftDialRewrite map[string]string `yaml:"raft_dial_rewrite"`
	// RaftTransport names the Raft transport: "meridian" or "" (the same).
	// "dragonboat" (Dragonboat's own TCP transport) is refused: it trusts
	// the sizes and replica IDs of the frames it reads, so one frame from
	// anyone who reaches the Raft port crashes the node.
	RaftTransport string `yaml:"raft_transport"`

	// RTT is the Raft round-trip unit (default 10ms); elections take
	// ElectionTicks RTTs, heartbeats HeartbeatTicks.
	RTT            time.Duration `yaml:"rtt"`
	ElectionTicks  uint64        `yaml:"election_ticks"`
	HeartbeatTicks uint64        `yaml:"heartbeat_ticks"`
	// SnapshotEntries takes a snapshot every this many applied entries
	// (default 10000), keeping CompactionOverhead entries (default 5000)
	// behind it in the log for slow followers.
	SnapshotEntries    uint64 `yaml:"snapshot_entries"`
	CompactionOverhead uint64 `yaml:"compaction_overhead"`

	// MaxValueBytes is the largest value accepted (default 1 MiB).
	MaxValueBytes int `yaml:"max_value_bytes"`
	// MaxTxnOps caps the operations of one transaction (default 128).
	MaxTxnOps int `yaml:"max_txn_ops"`
	// MaxTxnBytes caps the keys plus values of one transaction
	// (default 4 MiB) so a proposal stays well under Dragonboat's limits.
	MaxTxnBytes int `yaml:"max_txn_bytes"`
	// DefaultPageLimit is used when a List asks for Limit 0 (default 1000).
	DefaultPageLimit int `yaml:"default_page_limit"`
	// HistoryEvents and HistoryBytes bound the change history kept for
	// watch resume (defaults 10000 events, 64 MiB); older revisions give
	// ErrCompacted.
	HistoryEvents int `yaml:"history_events"`
	HistoryBytes  int `yaml:"history_bytes"`
	// MinSessionTTL and MaxSessionTTL bound session TTLs (defaults 500ms, 1h).
	MinSessionTTL time.Duration `yaml:"min_session_ttl"`
	MaxSessionTTL time.Duration `yaml:"max_session_ttl"`
	// SessionTick is how often the leader checks for expired sessions and
	// proposes its clock (default 200ms): expiry is late by at most this.
	SessionTick time.Duration `yaml:"session_tick"`
	// MaxClockSkew bounds how far a proposer's clock may run ahead of the
	// session clock, which only the shard leader's ticks move (default 2s).
	// A keep-alive or new session through a node whose clock runs fast
	// gets a deadline at most this much later than the leader would give;
	// the leader refreshes the session clock every MaxClockSkew/2 while
	// sessions exist. Must be at least 2×session_tick.
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
	// RequestTimeout applies to requests whose context has no deadline
	// (default 5s).
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// AttemptTimeout caps one proposal or ReadIndex attempt (default 2s).
	// A proposal forwarded to a leader that just died is lost, and only
	// this timeout ends the wait; then reads and version-guarded writes are
	// retried, other writes return ErrUnknownOutcome.
	AttemptTimeout time.Duration `yaml:"attempt_timeout"`
	// MaxWatches caps concurrent watches served by this node (default 1024).
	MaxWatches int `yaml:"max_watches"`
	// MaxWatchesPerClient caps the concurrent watches one client holds on
	// this node (default 256), so one caller cannot take all of max_watches.
	// A client is the authenticated role of a gRPC caller, else its remote
	// IP; in-process callers are not counted.
	MaxWatchesPerClient int `yaml:"max_watches_per_client"`
	// MaxTotalBytes caps the bytes of keys plus values stored in one shard
	// (default 1 GiB): the state machine, and every snapshot, holds them
	// all in memory. A write that would pass it is refused; deletes and
	// session expiry always succeed.
	MaxTotalBytes int64 `yaml:"max_total_bytes"`
	// MaxKeys caps the keys stored in one shard (default 1000000).
	MaxKeys int `yaml:"max_keys"`
	// MaxSessionsPerClient caps the live sessions one client (as for
	// max_watches_per_client) holds in one shard (default 1024), counted by
	// the state machine across the cluster: each session holds state until
	// it expires.
	MaxSessionsPerClient int `yaml:"max_sessions_per_client"`
	// FaultInjection (chaos testing only) runs the node on a SkewClock and
	// serves GET/POST /debug/clock on HTTPAddress to read and set its skew
	// (see Node.httpHandler). Default false.
	FaultInjection bool `yaml:"fault_injection"`

	// Security is the node's TLS identity and authentication (zero:
	// plaintext and anonymous). With TLS the gRPC and HTTP listeners serve
	// TLS only, and the Raft transport is mutual TLS between metadata nodes
	// (certificate CN "metadata.<region>"). A non-loopback grpc_address,
	// http_address or raft_address needs TLS and auth, or
	// security.insecure.
	Security security.Config `yaml:"security"`
	// SecurityRuntime, when set, is used instead of building one from
	// Security; the node does not close it.
	SecurityRuntime *security.Runtime `yaml:"-"`

	// Logger receives the node's logs (default slog.Default()).
	Logger *slog.Logger `yaml:"-"`
	// Registerer receives the node's metrics (nil = not registered).
	Registerer prometheus.Registerer `yaml:"-"`

	// Expert holds injection points for tests; leave it zero in production.
	Expert ExpertConfig `yaml:"-"`

	// Limits are the per-peer limits of the gRPC and HTTP listeners
	// (netguard.Limits; YAML fields inline: max_connections_per_ip
	// (default 1024, 0 = unlimited), max_streams_per_connection (default
	// DefaultMaxStreamsPerConnection), max_header_list_bytes (32 KiB),
	// max_connection_idle (30m), http_read_timeout (30s),
	// http_write_timeout (2m), http_idle_timeout (2m),
	// http_max_header_bytes (64 KiB)). Keepalive is
	// netguard.DefaultKeepalive. max_connections_per_ip also caps the
	// Raft listener, before its TLS handshake; its other limits are its
	// own (transport.go).
	netguard.Limits `yaml:",inline"`
}

// DefaultMaxStreamsPerConnection is the metadata node's default
// max_streams_per_connection: a broker multiplexes its watches
// (max_watches caps them per node) and calls in flight on one connection.
const DefaultMaxStreamsPerConnection = 4096

// ExpertConfig holds test-only injection points.
type ExpertConfig struct {
	// Clock replaces the wall clock (nil = SystemClock()), so a test can run
	// a node whose clock is skewed.
	Clock Clock
}

// ShardConfig is one shard hosted by a node.
type ShardConfig struct {
	// Name is "global" or a region name; clients address shards by name.
	Name string `yaml:"name"`
	// ShardID is the Raft shard ID, the same on every replica (non-zero,
	// unique per node).
	ShardID uint64 `yaml:"shard_id"`
	// Members is the initial replica set: replica ID → raft address. It
	// must be identical on every initial replica and must include this
	// node's NodeID with its RaftAddress.
	Members map[uint64]string `yaml:"members"`
}

// DefaultNodeConfig returns a config with every tunable at its default and
// no identity (NodeID, addresses, DataDir, Shards) set.
func DefaultNodeConfig() NodeConfig {
	return NodeConfig{
		RTT:                  10 * time.Millisecond,
		ElectionTicks:        10,
		HeartbeatTicks:       1,
		SnapshotEntries:      10000,
		CompactionOverhead:   5000,
		MaxValueBytes:        1 << 20,
		MaxTxnOps:            128,
		MaxTxnBytes:          4 << 20,
		DefaultPageLimit:     MaxPageLimit,
		HistoryEvents:        10000,
		HistoryBytes:         64 << 20,
		MinSessionTTL:        500 * time.Millisecond,
		MaxSessionTTL:        time.Hour,
		SessionTick:          200 * time.Millisecond,
		MaxClockSkew:         2 * time.Second,
		RequestTimeout:       5 * time.Second,
		AttemptTimeout:       2 * time.Second,
		MaxWatches:           1024,
		MaxWatchesPerClient:  256,
		MaxTotalBytes:        1 << 30,
		MaxKeys:              1000000,
		MaxSessionsPerClient: 1024,
		Limits:               netguard.DefaultLimits(DefaultMaxStreamsPerConnection),
	}
}

// SingleNodeConfig returns a default config for one node that is the only
// replica of each named shard (shard IDs 1, 2, ... in order): the embedded
// store of the standalone process and of tests.
func SingleNodeConfig(dataDir, raftAddress string, shards ...string) NodeConfig {
	cfg := DefaultNodeConfig()
	cfg.NodeID = 1
	cfg.RaftAddress = raftAddress
	cfg.DataDir = dataDir
	for i, name := range shards {
		cfg.Shards = append(cfg.Shards, ShardConfig{Name: name, ShardID: uint64(i + 1), Members: map[uint64]string{1: raftAddress}})
	}
	return cfg
}

// LoadNodeConfig reads a YAML node config over DefaultNodeConfig and
// validates it.
func LoadNodeConfig(path string) (NodeConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return DefaultNodeConfig(), fmt.Errorf("metadata: read config: %w", err)
	}
	cfg, err := ParseNodeConfig(b)
	if err != nil {
		return cfg, fmt.Errorf("metadata: config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseNodeConfig decodes a YAML node config over DefaultNodeConfig
// (unknown fields are errors) and validates it.
func ParseNodeConfig(data []byte) (NodeConfig, error) {
	cfg := DefaultNodeConfig()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// Validate reports the first bad field by name.
func (c *NodeConfig) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.NodeID == 0 {
		bad("node_id must be non-zero")
	}
	if _, _, err := net.SplitHostPort(c.RaftAddress); err != nil || c.RaftAddress == "" {
		bad("raft_address %q must be host:port", c.RaftAddress)
	}
	for name, a := range map[string]string{"grpc_address": c.GRPCAddress, "http_address": c.HTTPAddress} {
		if a != "" {
			if _, _, err := net.SplitHostPort(a); err != nil {
				bad("%s %q must be host:port", name, a)
			}
		}
	}
	if c.DataDir == "" {
		bad("data_dir must be set")
	}
	if c.SecurityRuntime == nil {
		if err := c.Security.Validate(); err != nil {
			bad("%v", err)
		}
	}
	switch c.RaftTransport {
	case "", RaftTransportMeridian:
	case RaftTransportDragonboat:
		bad("raft_transport %q is no longer supported: Dragonboat's TCP transport crashes on a hostile frame; use %q (or leave it empty) on every node of the shard", c.RaftTransport, RaftTransportMeridian)
	default:
		bad("raft_transport %q must be %q or empty", c.RaftTransport, RaftTransportMeridian)
	}
	for from, to := range c.RaftDialRewrite {
		if _, _, err := net.SplitHostPort(from); err != nil {
			bad("raft_dial_rewrite key %q must be host:port", from)
		}
		if _, _, err := net.SplitHostPort(to); err != nil {
			bad("raft_dial_rewrite[%q] = %q must be host:port", from, to)
		}
	}
	if len(c.Shards) == 0 {
		bad("shards must list at least one shard")
	}
	names, ids := map[string]bool{}, map[uint64]bool{}
	for i, s := range c.Shards {
		switch {
		case s.Name == "":
			bad("shards[%d].name must be set", i)
		case names[s.Name]:
			bad("shards[%d].name %q is repeated", i, s.Name)
		}
		names[s.Name] = true
		switch {
		case s.ShardID == 0:
			bad("shards[%d].shard_id must be non-zero", i)
		case ids[s.ShardID]:
			bad("shards[%d].shard_id %d is repeated", i, s.ShardID)
		}
		ids[s.ShardID] = true
		if len(s.Members) == 0 {
			bad("shards[%d].members must list the initial replicas", i)
		} else if addr, ok := s.Members[c.NodeID]; !ok {
			bad("shards[%d].members must include node_id %d", i, c.NodeID)
		} else if addr != c.RaftAddress {
			bad("shards[%d].members[%d] = %q must equal raft_address %q", i, c.NodeID, addr, c.RaftAddress)
		}
		for id, addr := range s.Members {
			if id == 0 {
				bad("shards[%d].members has replica ID 0", i)
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				bad("shards[%d].members[%d] %q must be host:port", i, id, addr)
			}
		}
	}
	if c.RTT < time.Millisecond {
		bad("rtt %v must be at least 1ms", c.RTT)
	}
	if c.HeartbeatTicks == 0 {
		bad("heartbeat_ticks must be at least 1")
	}
	if c.ElectionTicks <= 2*c.HeartbeatTicks {
		bad("election_ticks %d must be more than twice heartbeat_ticks %d", c.ElectionTicks, c.HeartbeatTicks)
	}
	if c.MaxValueBytes < 1 || c.MaxValueBytes > 16<<20 {
		bad("max_value_bytes %d must be in [1, 16 MiB]", c.MaxValueBytes)
	}
	if c.MaxTxnOps < 1 {
		bad("max_txn_ops %d must be at least 1", c.MaxTxnOps)
	}
	if c.MaxTxnBytes < c.MaxValueBytes || c.MaxTxnBytes > 32<<20 {
		bad("max_txn_bytes %d must be in [max_value_bytes, 32 MiB]", c.MaxTxnBytes)
	}
	if c.DefaultPageLimit < 1 || c.DefaultPageLimit > MaxPageLimit {
		bad("default_page_limit %d must be in [1, %d]", c.DefaultPageLimit, MaxPageLimit)
	}
	if c.HistoryEvents < 1 {
		bad("history_events %d must be at least 1", c.HistoryEvents)
	}
	if c.HistoryBytes < c.MaxValueBytes {
		bad("history_bytes %d must be at least max_value_bytes", c.HistoryBytes)
	}
	if c.MinSessionTTL <= 0 || c.MaxSessionTTL < c.MinSessionTTL {
		bad("min_session_ttl %v and max_session_ttl %v must be positive and ordered", c.MinSessionTTL, c.MaxSessionTTL)
	}
	if c.SessionTick <= 0 {
		bad("session_tick %v must be positive", c.SessionTick)
	}
	if c.MaxClockSkew < 2*c.SessionTick || c.MaxClockSkew > time.Minute {
		bad("max_clock_skew %v must be in [2×session_tick (%v), 1m]", c.MaxClockSkew, 2*c.SessionTick)
	}
	if c.RequestTimeout <= 0 {
		bad("request_timeout %v must be positive", c.RequestTimeout)
	}
	if c.AttemptTimeout < 10*time.Millisecond {
		bad("attempt_timeout %v must be at least 10ms", c.AttemptTimeout)
	}
	if c.MaxWatches < 1 {
		bad("max_watches %d must be at least 1", c.MaxWatches)
	}
	if c.MaxWatchesPerClient < 1 {
		bad("max_watches_per_client %d must be at least 1", c.MaxWatchesPerClient)
	}
	if c.MaxTotalBytes < 1 {
		bad("max_total_bytes %d must be at least 1", c.MaxTotalBytes)
	}
	if c.MaxKeys < 1 {
		bad("max_keys %d must be at least 1", c.MaxKeys)
	}
	if c.MaxSessionsPerClient < 1 {
		bad("max_sessions_per_client %d must be at least 1", c.MaxSessionsPerClient)
	}
	if err := c.Limits.Validate(); err != nil {
		bad("%v", err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	return nil
}
