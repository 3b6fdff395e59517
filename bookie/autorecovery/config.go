package autorecovery

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// AuditorConfig configures an Auditor.
type AuditorConfig struct {
	// Store is the region's metadata shard (registry, ledgers, marks). Required.
	Store metadata.Store
	// ID names this auditor candidate in AuditorKey and logs. Required.
	ID string
	// Logger receives logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the auditor metrics; nil registers none.
	Registerer prometheus.Registerer

	// LostBookieDelay is how long a bookie must be missing from the
	// registry before its ledgers are marked (default 30 s). It rides out
	// restarts and short partitions: re-replicating a bookie that comes
	// back a minute later costs a full copy of its data.
	LostBookieDelay time.Duration
	// CheckInterval is how often the registry, the decommission list and
	// the pause flag are read, and how often a non-leader retries the
	// election (default 1 s).
	CheckInterval time.Duration
	// AuditInterval is how often every ledger is scanned even when no new
	// bookie was lost (default 10 min): it catches ledgers closed by
	// recovery after their bookie was already lost.
	AuditInterval time.Duration
	// SessionTTL is the leadership session's time-to-live (default 10 s);
	// keep-alives go every third of it.
	SessionTTL time.Duration
	// PageSize is the ledgers read per metadata List during a scan
	// (default 500, at most metadata.MaxPageLimit).
	PageSize int
	// OpTimeout bounds one metadata operation (default 10 s).
	OpTimeout time.Duration

	// ReplicaCheckInterval is how often the leader asks every live bookie
	// of every closed ledger for each entry of its write sets, to find
	// entries missing on a live replica (an add that failed there while
	// Qa others confirmed it, with no ensemble change after). It reads
	// every stored entry once, so the default is 24 h; 0 disables it.
	ReplicaCheckInterval time.Duration
	// RPCTimeout bounds one bookie read of the replica check (default 10 s).
	RPCTimeout time.Duration
	// DialOptions are extra gRPC dial options for bookie connections.
	DialOptions []grpc.DialOption
}

// DefaultAuditorConfig returns the defaults; Store and ID must be set.
func DefaultAuditorConfig() AuditorConfig {
	return AuditorConfig{
		LostBookieDelay: 30 * time.Second,
		CheckInterval:   time.Second,
		AuditInterval:   10 * time.Minute,
		SessionTTL:      10 * time.Second,
		PageSize:        500,
		OpTimeout:       10 * time.Second,

		ReplicaCheckInterval: 24 * time.Hour,
		RPCTimeout:           10 * time.Second,
	}
}

// Validate checks the config; the error names the field and the limit.
func (c AuditorConfig) Validate() error {
	switch {
	case c.Store == nil:
		return fmt.Errorf("%w: AuditorConfig.Store is required", ErrInvalidArgument)
	case c.ID == "" || len(c.ID) > MaxBookieIDBytes:
		return fmt.Errorf("%w: AuditorConfig.ID must be 1..%d bytes, got %d", ErrInvalidArgument, MaxBookieIDBytes, len(c.ID))
	case c.LostBookieDelay < 0:
		return fmt.Errorf("%w: AuditorConfig.LostBookieDelay %v must be >= 0", ErrInvalidArgument, c.LostBookieDelay)
	case c.CheckInterval < time.Millisecond:
		return fmt.Errorf("%w: AuditorConfig.CheckInterval %v must be >= 1ms", ErrInvalidArgument, c.CheckInterval)
	case c.AuditInterval < c.CheckInterval:
		return fmt.Errorf("%w: AuditorConfig.AuditInterval %v must be >= CheckInterval %v", ErrInvalidArgument, c.AuditInterval, c.CheckInterval)
	case c.SessionTTL < 100*time.Millisecond:
		return fmt.Errorf("%w: AuditorConfig.SessionTTL %v must be >= 100ms", ErrInvalidArgument, c.SessionTTL)
	case c.PageSize < 1 || c.PageSize > metadata.MaxPageLimit:
		return fmt.Errorf("%w: AuditorConfig.PageSize %d must be in [1, %d]", ErrInvalidArgument, c.PageSize, metadata.MaxPageLimit)
	case c.OpTimeout <= 0:
		return fmt.Errorf("%w: AuditorConfig.OpTimeout %v must be > 0", ErrInvalidArgument, c.OpTimeout)
	case c.ReplicaCheckInterval < 0:
		return fmt.Errorf("%w: AuditorConfig.ReplicaCheckInterval %v must be >= 0 (0 disables the check)", ErrInvalidArgument, c.ReplicaCheckInterval)
	case c.ReplicaCheckInterval > 0 && c.RPCTimeout <= 0:
		return fmt.Errorf("%w: AuditorConfig.RPCTimeout %v must be > 0", ErrInvalidArgument, c.RPCTimeout)
	}
	return nil
}

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Store is the region's metadata shard. Required.
	Store metadata.Store
	// Placement chooses replacement bookies (the region's policy, so
	// replacements keep the rack constraints). Required.
	Placement topology.Placement
	// ID names this worker in lock values and logs. Required.
	ID string
	// Logger receives logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the worker metrics; nil registers none. Several
	// workers may share one registerer (their counters add up).
	Registerer prometheus.Registerer

	// PollInterval is how often the worker looks for marks when idle
	// (default 2 s).
	PollInterval time.Duration
	// RetryBackoff is how long this worker leaves a ledger alone after
	// failing on it (default 10 s), so one unrecoverable ledger does not
	// starve the others.
	RetryBackoff time.Duration
	// SessionTTL is the lock session's time-to-live (default 10 s).
	SessionTTL time.Duration
	// CopyConcurrency bounds the entries copied in parallel (default 16).
	CopyConcurrency int
	// MaxMarksPerPoll bounds the marks read per poll (default 100, at most
	// metadata.MaxPageLimit).
	MaxMarksPerPoll int
	// RPCTimeout bounds one bookie read or add (default 10 s).
	RPCTimeout time.Duration
	// OpTimeout bounds one metadata operation (default 10 s).
	OpTimeout time.Duration
	// MaxEntryBytes is the largest entry the worker reads or writes
	// (default 5 MiB, like the ledger client); it sizes gRPC messages.
	MaxEntryBytes int
	// DialOptions are extra gRPC dial options for bookie connections.
	DialOptions []grpc.DialOption
}

// DefaultWorkerConfig returns the defaults; Store, Placement and ID must be set.
func DefaultWorkerConfig() WorkerConfig {
	return WorkerConfig{
		PollInterval:    2 * time.Second,
		RetryBackoff:    10 * time.Second,
		SessionTTL:      10 * time.Second,
		CopyConcurrency: 16,
		MaxMarksPerPoll: 100,
		RPCTimeout:      10 * time.Second,
		OpTimeout:       10 * time.Second,
		MaxEntryBytes:   5 << 20,
	}
}

// Validate checks the config; the error names the field and the limit.
func (c WorkerConfig) Validate() error {
	switch {
	case c.Store == nil:
		return fmt.Errorf("%w: WorkerConfig.Store is required", ErrInvalidArgument)
	case c.Placement == nil:
		return fmt.Errorf("%w: WorkerConfig.Placement is required", ErrInvalidArgument)
	case c.ID == "" || len(c.ID) > MaxBookieIDBytes:
		return fmt.Errorf("%w: WorkerConfig.ID must be 1..%d bytes, got %d", ErrInvalidArgument, MaxBookieIDBytes, len(c.ID))
	case c.PollInterval < time.Millisecond:
		return fmt.Errorf("%w: WorkerConfig.PollInterval %v must be >= 1ms", ErrInvalidArgument, c.PollInterval)
	case c.RetryBackoff < 0:
		return fmt.Errorf("%w: WorkerConfig.RetryBackoff %v must be >= 0", ErrInvalidArgument, c.RetryBackoff)
	case c.SessionTTL < 100*time.Millisecond:
		return fmt.Errorf("%w: WorkerConfig.SessionTTL %v must be >= 100ms", ErrInvalidArgument, c.SessionTTL)
	case c.CopyConcurrency < 1 || c.CopyConcurrency > 1024:
		return fmt.Errorf("%w: WorkerConfig.CopyConcurrency %d must be in [1, 1024]", ErrInvalidArgument, c.CopyConcurrency)
	case c.MaxMarksPerPoll < 1 || c.MaxMarksPerPoll > metadata.MaxPageLimit:
		return fmt.Errorf("%w: WorkerConfig.MaxMarksPerPoll %d must be in [1, %d]", ErrInvalidArgument, c.MaxMarksPerPoll, metadata.MaxPageLimit)
	case c.RPCTimeout <= 0:
		return fmt.Errorf("%w: WorkerConfig.RPCTimeout %v must be > 0", ErrInvalidArgument, c.RPCTimeout)
	case c.OpTimeout <= 0:
		return fmt.Errorf("%w: WorkerConfig.OpTimeout %v must be > 0", ErrInvalidArgument, c.OpTimeout)
	case c.MaxEntryBytes < 1 || c.MaxEntryBytes > 64<<20:
		return fmt.Errorf("%w: WorkerConfig.MaxEntryBytes %d must be in [1, %d]", ErrInvalidArgument, c.MaxEntryBytes, 64<<20)
	}
	return nil
}
