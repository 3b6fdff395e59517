package ledger

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// Config configures a Client.
type Config struct {
	// Store is the region's metadata shard: ledger metadata, the ledger ID
	// counter and the bookie registry live there. Required.
	Store metadata.Store
	// Placement chooses ensembles and replacements. Required.
	Placement topology.Placement
	// Region names the client's region (logs and metric labels).
	Region string
	// Logger receives the client's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the client's metrics; nil registers none.
	Registerer prometheus.Registerer

	// MaxInFlight bounds the adds a Writer has sent but not yet reported
	// (default 1024). AppendAsync blocks while the window is full.
	MaxInFlight int
	// MaxEntryBytes is the largest entry payload accepted (default 5 MiB).
	MaxEntryBytes int
	// AddTimeout is how long a bookie may take to confirm an add before it
	// is treated as failed and replaced (default 10 s).
	AddTimeout time.Duration
	// ReadTimeout bounds one read or fence RPC to one bookie (default 10 s).
	ReadTimeout time.Duration
	// SpeculativeReadDelay is how long a read waits for one replica before
	// also asking the next one (default 100 ms; 0 disables speculation).
	SpeculativeReadDelay time.Duration
	// MetadataTimeout bounds one metadata operation issued from a
	// background path such as an ensemble change (default 10 s).
	MetadataTimeout time.Duration
	// IDBatch is how many ledger IDs one counter CAS reserves (default 100),
	// keeping the counter key off the ledger-creation hot path.
	IDBatch int
	// MaxEnsembleChanges bounds the ensemble changes one Writer makes
	// before it gives up with an error (default 64).
	MaxEnsembleChanges int
	// BookieSendQueue bounds the requests queued for one bookie's add
	// stream (default 4096); senders block while it is full.
	BookieSendQueue int
	// ReadConcurrency bounds the entries one Read fetches in parallel
	// (default 32).
	ReadConcurrency int
	// DialOptions are extra gRPC dial options (the client always adds
	// insecure loopback-style credentials unless these set others).
	DialOptions []grpc.DialOption
}

// DefaultConfig returns a Config with every limit at its default; Store and
// Placement must still be set.
func DefaultConfig() Config {
	return Config{
		MaxInFlight:          1024,
		MaxEntryBytes:        5 << 20,
		AddTimeout:           10 * time.Second,
		ReadTimeout:          10 * time.Second,
		SpeculativeReadDelay: 100 * time.Millisecond,
		MetadataTimeout:      10 * time.Second,
		IDBatch:              100,
		MaxEnsembleChanges:   64,
		BookieSendQueue:      4096,
		ReadConcurrency:      32,
	}
}

// Validate checks the configuration; the error names the field and limit.
func (c Config) Validate() error {
	switch {
	case c.Store == nil:
		return invalidf("Config.Store is required")
	case c.Placement == nil:
		return invalidf("Config.Placement is required")
	case c.MaxInFlight < 1 || c.MaxInFlight > 1<<20:
		return invalidf("Config.MaxInFlight %d outside [1, %d]", c.MaxInFlight, 1<<20)
	case c.MaxEntryBytes < 1 || c.MaxEntryBytes > 64<<20:
		return invalidf("Config.MaxEntryBytes %d outside [1, %d]", c.MaxEntryBytes, 64<<20)
	case c.AddTimeout <= 0:
		return invalidf("Config.AddTimeout %v must be > 0", c.AddTimeout)
	case c.ReadTimeout <= 0:
		return invalidf("Config.ReadTimeout %v must be > 0", c.ReadTimeout)
	case c.SpeculativeReadDelay < 0:
		return invalidf("Config.SpeculativeReadDelay %v must be >= 0", c.SpeculativeReadDelay)
	case c.MetadataTimeout <= 0:
		return invalidf("Config.MetadataTimeout %v must be > 0", c.MetadataTimeout)
	case c.IDBatch < 1 || c.IDBatch > 1_000_000:
		return invalidf("Config.IDBatch %d outside [1, 1000000]", c.IDBatch)
	case c.MaxEnsembleChanges < 0:
		return invalidf("Config.MaxEnsembleChanges %d must be >= 0", c.MaxEnsembleChanges)
	case c.BookieSendQueue < 1 || c.BookieSendQueue > 1<<20:
		return invalidf("Config.BookieSendQueue %d outside [1, %d]", c.BookieSendQueue, 1<<20)
	case c.ReadConcurrency < 1 || c.ReadConcurrency > 1024:
		return invalidf("Config.ReadConcurrency %d outside [1, 1024]", c.ReadConcurrency)
	}
	return nil
}

// CreateOptions describe a new ledger.
type CreateOptions struct {
	// Ensemble (E) is the number of bookies entries are striped over.
	Ensemble int
	// WriteQuorum (Qw) is the number of bookies each entry is written to.
	WriteQuorum int
	// AckQuorum (Qa) is the number of confirmations that make an entry added.
	AckQuorum int
	// Properties are stored with the ledger's metadata (at most 64 keys,
	// 4 KiB in total).
	Properties map[string]string
}

// maxEnsemble bounds E so metadata stays small.
const maxEnsemble = 64

func (o CreateOptions) validate() error {
	if o.AckQuorum < 1 {
		return invalidf("CreateOptions.AckQuorum %d must be >= 1", o.AckQuorum)
	}
	if o.WriteQuorum < o.AckQuorum {
		return invalidf("CreateOptions.WriteQuorum %d must be >= AckQuorum %d", o.WriteQuorum, o.AckQuorum)
	}
	if o.Ensemble < o.WriteQuorum {
		return invalidf("CreateOptions.Ensemble %d must be >= WriteQuorum %d", o.Ensemble, o.WriteQuorum)
	}
	if o.Ensemble > maxEnsemble {
		return invalidf("CreateOptions.Ensemble %d exceeds the limit %d", o.Ensemble, maxEnsemble)
	}
	if len(o.Properties) > 64 {
		return invalidf("CreateOptions.Properties has %d keys, limit 64", len(o.Properties))
	}
	n := 0
	for k, v := range o.Properties {
		n += len(k) + len(v)
	}
	if n > 4096 {
		return invalidf("CreateOptions.Properties is %d bytes, limit 4096", n)
	}
	return nil
}
