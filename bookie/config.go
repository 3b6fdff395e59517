package bookie

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meridianmq/meridian/internal/faultfs"
	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/topology"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a bookie Server. Zero fields are NOT defaulted: start
// from DefaultConfig and change what you need.
type Config struct {
	// ID is the bookie's stable identity (required; survives restarts).
	ID string
	// Region and Rack are the bookie's failure domains (reported in the
	// registry and GetInfo).
	Region string
	Rack   string

	// ListenAddr is the gRPC listen address (host:port; port 0 picks one).
	// Default "127.0.0.1:0".
	ListenAddr string
	// InProcess also serves the gRPC service on an in-memory listener that
	// DialInProcess connects to: a ledger client in the same process (the
	// standalone) skips the loopback socket. Default off.
	InProcess bool
	// InProcessRole is the role an in-process dialer is authenticated as,
	// without a TLS handshake (only this process can dial that listener).
	// Default "" : the broker of Region (security.ComponentRole).
	InProcessRole string
	// AdvertiseAddr is the address published in the registry ("" = the
	// real listen address).
	AdvertiseAddr string
	// HTTPAddr serves /metrics, /healthz and /readyz ("" = no HTTP server).
	// Default "127.0.0.1:0".
	HTTPAddr string
	// Security is the bookie's TLS identity and authentication (zero:
	// plaintext and anonymous). With TLS the gRPC and HTTP listeners serve
	// TLS only. A ListenAddr or HTTPAddr that is not loopback needs TLS and
	// auth, or Security.Insecure.
	Security security.Config
	// SecurityRuntime, when set, is used instead of building one from
	// Security (a process sharing one between the bookie, its metadata
	// client and autorecovery); the bookie does not close it.
	SecurityRuntime *security.Runtime

	// JournalDir holds the journal files, which are also the entry log
	// (required).
	JournalDir string
	// LedgerDir holds the index checkpoint ("" = JournalDir/index).
	LedgerDir string

	// MaxEntryBytes is the largest payload accepted. Default 5 MiB.
	MaxEntryBytes int
	// GroupMaxWait bounds how long the first entry of a group waits for
	// more entries before the group is written and fsynced. Default 2ms.
	GroupMaxWait time.Duration
	// GroupMaxBytes closes a group once this many bytes are queued.
	// Default 2 MiB (32 entries of 64 KiB; small entries hit
	// GroupMaxEntries first).
	GroupMaxBytes int
	// GroupMaxEntries closes a group once it holds this many records.
	// Default 2000.
	GroupMaxEntries int
	// FlushWhenIdle writes and fsyncs a group as soon as no more records are
	// queued instead of waiting GroupMaxWait: lowest latency at low load,
	// and under load records still pile up during each fsync so groups stay
	// large. Default true.
	FlushWhenIdle bool
	// MaxQueuedAdds bounds the records waiting for the journal; beyond it
	// adds fail with ErrTooManyInFlight. Default 10000.
	MaxQueuedAdds int
	// MaxQueuedAddBytes (yaml max_queued_add_bytes) bounds the bytes
	// (record header + payload) of the entries and GC relocations queued
	// for the journal and not yet written, fsynced and answered, over all
	// streams. An add that does not fit waits (its stream stops reading)
	// until earlier adds are answered or its context ends, then fails with
	// ErrTooManyInFlight (ResourceExhausted) naming max_queued_add_bytes
	// and its value. Waiters are served in arrival order. When nothing is
	// queued one record goes through even if it is larger, so no entry
	// deadlocks. Must be >= 1 (there is no "none": this is the bound of
	// the bookie's add memory). Default 256 MiB.
	MaxQueuedAddBytes int64
	// MaxInflightAddBytesPerStream (yaml
	// max_inflight_add_bytes_per_stream) bounds the payload bytes of one
	// AddEntries stream's adds that are read and not yet answered on the
	// stream: beyond it the stream stops reading requests, so gRPC flow
	// control pushes back on the client (a client that never reads its
	// answers holds at most this much, plus the one request being read).
	// One add goes through when the stream holds nothing. Must be >= 1.
	// Default 32 MiB.
	MaxInflightAddBytesPerStream int64
	// MaxJournalFileBytes rolls the journal to a new file beyond this size.
	// Default 64 MiB.
	MaxJournalFileBytes int64

	// CheckpointInterval is how often the index is checkpointed (bounding
	// the journal replayed after a crash). Default 30s.
	CheckpointInterval time.Duration
	// GCInterval is how often garbage collection runs (0 = only on demand
	// via Server.GC). Default 60s.
	GCInterval time.Duration
	// CompactionThreshold: a journal file whose live fraction is below this
	// is compacted (its live entries copied forward, the file deleted).
	// Default 0.5.
	CompactionThreshold float64

	// DiskUsageThreshold turns the bookie read-only when the used fraction
	// of a data disk reaches it. Default 0.95.
	DiskUsageThreshold float64
	// DiskUsageLowWater turns a bookie that went read-only for disk usage
	// writable again below it. Default 0.90.
	DiskUsageLowWater float64
	// DiskCheckInterval is how often disk usage is checked. Default 1s.
	DiskCheckInterval time.Duration

	// ReadRangeMaxBytes caps the payload bytes one ReadRange sends.
	// Default 16 MiB.
	ReadRangeMaxBytes int64

	// Metadata, when set, is the regional metadata store the bookie
	// registers in (ephemeral key topology.BookieRegistryPrefix+ID).
	Metadata metadata.Store
	// SessionTTL is the registration session's TTL. Default 10s.
	SessionTTL time.Duration
	// LimboCheckInterval is how often a re-formatted bookie in limbo checks
	// whether autorecovery has moved every ledger of its previous instance
	// (see limbo.go). Default 10s.
	LimboCheckInterval time.Duration

	// Gossip, when set, makes the bookie join the region's memberlist
	// cluster (liveness within seconds for placement and autorecovery). The
	// bookie fills NodeName (= ID), Region, Rack, Role (bookie), Meta
	// ("addr" = gRPC address, "read_only"), Logger and Registerer; BindAddr,
	// Seeds and timings come from here.
	Gossip *topology.MembershipConfig

	// Logger receives the bookie's logs (nil = slog.Default()).
	Logger *slog.Logger
	// Registerer receives the bookie's metrics (nil = a private registry).
	// Several bookies in one process need distinct registerers, e.g.
	// prometheus.WrapRegistererWith(prometheus.Labels{"bookie": id}, reg).
	Registerer prometheus.Registerer
	// Gatherer is what /metrics serves (nil = the private registry, or
	// Registerer itself when it is also a Gatherer).
	Gatherer prometheus.Gatherer

	// ScrubInterval is how often the background scrub verifies the CRC of
	// every stored entry (0 = never, only on demand). Default 24h.
	ScrubInterval time.Duration
	// ScrubStartDelay is when the first background scrub runs after start:
	// it verifies the journal files under the checkpoint, which replay
	// does not read. Default 30s.
	ScrubStartDelay time.Duration
	// ScrubBytesPerSecond bounds the scrub's reads, so it never starves
	// adds and reads. Default 32 MiB/s.
	ScrubBytesPerSecond int64
	// MarkUnderReplicated, when set, is called with each ledger whose
	// replica here is damaged (found by a scrub or a read) so autorecovery
	// rewrites it from healthy replicas; `meridian bookie` wires it to
	// autorecovery.MarkCorrupt. It may be called concurrently.
	MarkUnderReplicated func(ctx context.Context, ledgerID int64, reason string) error

	// Limits are the per-peer limits of the gRPC and HTTP listeners
	// (netguard.Limits): MaxConnectionsPerIP (default 1024, 0 =
	// unlimited), MaxStreamsPerConnection (default
	// DefaultMaxStreamsPerConnection), MaxHeaderListBytes (32 KiB),
	// MaxConnectionIdle (30m), HTTPReadTimeout (30s), HTTPWriteTimeout
	// (2m), HTTPIdleTimeout (2m), HTTPMaxHeaderBytes (64 KiB). Keepalive
	// is netguard.DefaultKeepalive: ping after 30s of silence, clients may
	// ping every 5s.
	netguard.Limits

	// Testing holds test-only injection points.
	Testing TestingConfig
}

// DefaultMaxStreamsPerConnection is the bookie's default
// MaxStreamsPerConnection: a ledger client holds one add stream per
// bookie connection, plus a read or a fence per call in flight.
const DefaultMaxStreamsPerConnection = 4096

// TestingConfig holds test-only injection points.
type TestingConfig struct {
	// FS replaces the real file system (e.g. a *faultfs.FaultFS).
	FS faultfs.FS
	// FaultHTTP serves POST /debug/faults on HTTPAddr when FS is a
	// *faultfs.FaultFS: the body is a faultfs.FaultFS.Command ("fail sync
	// journal", "full on", "clear", ...). For chaos tests only.
	FaultHTTP bool
	// UnsafeAckBeforeSync BREAKS DURABILITY on purpose: adds are
	// acknowledged once written to the journal, before any fsync, and the
	// journal is fsynced only when it rolls to a new file or a checkpoint
	// is taken (BookKeeper's journalSyncData=false). A power loss then loses
	// acknowledged entries. It exists so that the chaos suite can prove it
	// detects an ack-before-fsync bug; the bookie logs a warning at start.
	UnsafeAckBeforeSync bool
}

// DefaultConfig returns a config with every default set; ID and JournalDir
// must still be filled in.
func DefaultConfig() Config {
	return Config{
		ListenAddr:          "127.0.0.1:0",
		HTTPAddr:            "127.0.0.1:0",
		MaxEntryBytes:       5 << 20,
		GroupMaxWait:        2 * time.Millisecond,
		GroupMaxBytes:       2 << 20,
		GroupMaxEntries:     2000,
		FlushWhenIdle:       true,
		MaxQueuedAdds:       10000,
		MaxJournalFileBytes: 64 << 20,
		CheckpointInterval:  30 * time.Second,
		GCInterval:          60 * time.Second,
		CompactionThreshold: 0.5,
		DiskUsageThreshold:  0.95,
		DiskUsageLowWater:   0.90,
		DiskCheckInterval:   time.Second,
		ReadRangeMaxBytes:   16 << 20,
		SessionTTL:          10 * time.Second,
		ScrubInterval:       24 * time.Hour,
		ScrubStartDelay:     30 * time.Second,
		ScrubBytesPerSecond: 32 << 20,
		LimboCheckInterval:  10 * time.Second,
		Limits:              netguard.DefaultLimits(DefaultMaxStreamsPerConnection),

		MaxQueuedAddBytes:            256 << 20,
		MaxInflightAddBytesPerStream: 32 << 20,
	}
}

// ErrInvalidConfig is returned (wrapped, naming the field) by Validate.
var ErrInvalidConfig = errors.New("bookie: invalid config")

func cfgErr(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// Validate checks the config; the error names the field and the limit.
func (c *Config) Validate() error {
	switch {
	case c.ID == "":
		return cfgErr("ID", "must be set")
	case c.JournalDir == "":
		return cfgErr("JournalDir", "must be set")
	case c.ListenAddr == "":
		return cfgErr("ListenAddr", "must be set")
	case c.MaxEntryBytes < 1 || c.MaxEntryBytes > 64<<20:
		return cfgErr("MaxEntryBytes", "must be in [1, 64MiB], got %d", c.MaxEntryBytes)
	case c.GroupMaxWait < 0 || c.GroupMaxWait > time.Second:
		return cfgErr("GroupMaxWait", "must be in [0, 1s], got %s", c.GroupMaxWait)
	case c.GroupMaxBytes < 1:
		return cfgErr("GroupMaxBytes", "must be >= 1, got %d", c.GroupMaxBytes)
	case c.GroupMaxEntries < 1:
		return cfgErr("GroupMaxEntries", "must be >= 1, got %d", c.GroupMaxEntries)
	case c.MaxQueuedAdds < 1:
		return cfgErr("MaxQueuedAdds", "must be >= 1, got %d", c.MaxQueuedAdds)
	case c.MaxQueuedAddBytes < 1:
		return cfgErr("MaxQueuedAddBytes (max_queued_add_bytes)", "must be >= 1, got %d", c.MaxQueuedAddBytes)
	case c.MaxInflightAddBytesPerStream < 1:
		return cfgErr("MaxInflightAddBytesPerStream (max_inflight_add_bytes_per_stream)", "must be >= 1, got %d", c.MaxInflightAddBytesPerStream)
	case c.MaxJournalFileBytes < 1<<20:
		return cfgErr("MaxJournalFileBytes", "must be >= 1MiB, got %d", c.MaxJournalFileBytes)
	case c.MaxJournalFileBytes > 1<<40:
		return cfgErr("MaxJournalFileBytes", "must be <= 1TiB, got %d", c.MaxJournalFileBytes)
	case c.CheckpointInterval <= 0:
		return cfgErr("CheckpointInterval", "must be > 0, got %s", c.CheckpointInterval)
	case c.GCInterval < 0:
		return cfgErr("GCInterval", "must be >= 0, got %s", c.GCInterval)
	case c.CompactionThreshold < 0 || c.CompactionThreshold > 1:
		return cfgErr("CompactionThreshold", "must be in [0, 1], got %g", c.CompactionThreshold)
	case c.DiskUsageThreshold <= 0 || c.DiskUsageThreshold > 1:
		return cfgErr("DiskUsageThreshold", "must be in (0, 1], got %g", c.DiskUsageThreshold)
	case c.DiskUsageLowWater <= 0 || c.DiskUsageLowWater > c.DiskUsageThreshold:
		return cfgErr("DiskUsageLowWater", "must be in (0, DiskUsageThreshold=%g], got %g", c.DiskUsageThreshold, c.DiskUsageLowWater)
	case c.DiskCheckInterval <= 0:
		return cfgErr("DiskCheckInterval", "must be > 0, got %s", c.DiskCheckInterval)
	case c.ReadRangeMaxBytes < 1:
		return cfgErr("ReadRangeMaxBytes", "must be >= 1, got %d", c.ReadRangeMaxBytes)
	case c.ScrubInterval < 0:
		return cfgErr("ScrubInterval", "must be >= 0, got %s", c.ScrubInterval)
	case c.ScrubStartDelay < 0:
		return cfgErr("ScrubStartDelay", "must be >= 0, got %s", c.ScrubStartDelay)
	case c.ScrubBytesPerSecond < 1<<10:
		return cfgErr("ScrubBytesPerSecond", "must be >= 1KiB, got %d", c.ScrubBytesPerSecond)
	case c.Metadata != nil && c.SessionTTL < 100*time.Millisecond:
		return cfgErr("SessionTTL", "must be >= 100ms, got %s", c.SessionTTL)
	case c.Metadata != nil && c.LimboCheckInterval < 10*time.Millisecond:
		return cfgErr("LimboCheckInterval", "must be >= 10ms, got %s", c.LimboCheckInterval)
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if c.SecurityRuntime == nil {
		if err := c.Security.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
		}
	}
	return nil
}
