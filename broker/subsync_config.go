package broker

import (
	"fmt"
	"time"
)

// SubscriptionsConfig bounds the acknowledgement vectors of replicated
// subscriptions and tunes their shipping (subsync.go, ackvector.go). Zero
// fields take their defaults.
type SubscriptionsConfig struct {
	// MaxAckVectorBytes bounds one subscription's acknowledgement vector,
	// as its cursor record stores it (estimated from above: every range
	// counted at the width of its origin stream's highest origin_seq;
	// default 512 KiB, in [4 KiB, 16 MiB]). It must leave room, under the
	// metadata store's max_value_bytes (1 MiB by default), for the rest of
	// the cursor record (the individually acknowledged positions). A
	// vector that would grow past it keeps its mark-deletes and its lowest
	// ranges and drops the highest ones: the entries they acknowledged are
	// delivered again after a move (duplicates, never a loss), and
	// meridian_subscription_ack_vector_dropped_total counts it. A
	// received vector larger than it is refused (INVALID_ARGUMENT naming
	// this field), changing nothing: give every region the same value (a
	// remote with a lower bound refuses the whole vector at every retry,
	// once per replication.keepalive, so the subscription's
	// acknowledgements stop reaching it).
	MaxAckVectorBytes int `yaml:"max_ack_vector_bytes"`
	// MaxVectorBatchSeqs bounds the partially acknowledged entries (batch
	// index acknowledgements) one vector keeps per origin stream (default
	// 10000), and MaxVectorBatchWords their bitset words (64 indexes each;
	// default 32768, 256 KiB). Beyond them new batch acknowledgements are
	// not recorded in the vector (their messages are delivered again after
	// a move, never skipped); an acknowledgement of a whole entry still is.
	MaxVectorBatchSeqs  int `yaml:"max_vector_batch_seqs"`
	MaxVectorBatchWords int `yaml:"max_vector_batch_words"`
	// FullSyncInterval is how often a subscription's whole vector is
	// shipped to each remote region even though only deltas are needed
	// (default 1 min, in [1s, 24h]): a sender ships what changed since what
	// the remote is known to hold, and the whole vector on every new stream,
	// after a reset, after a refused update, and at this interval, so that
	// anything a remote lost is healed.
	FullSyncInterval time.Duration `yaml:"full_sync_interval"`
	// MaxSkipRangesPerStream bounds, per topic and origin stream, the
	// ranges of origin_seq values a receiver holds in memory because its
	// senders reported them as not for this region (ReplicateEntries.skipped),
	// until the next entry of that stream is stored (default 4096). Beyond
	// it the lowest are forgotten: the vectors then keep a hole there,
	// which costs size, never a message.
	MaxSkipRangesPerStream int `yaml:"max_skip_ranges_per_stream"`
}

// Defaults of SubscriptionsConfig.
const (
	DefaultMaxAckVectorBytes      = 512 << 10
	DefaultMaxVectorBatchSeqs     = 10000
	DefaultMaxVectorBatchWords    = 1 << 15
	DefaultFullSyncInterval       = time.Minute
	DefaultMaxSkipRangesPerStream = 4096
)

// DefaultSubscriptionsConfig returns the defaults.
func DefaultSubscriptionsConfig() SubscriptionsConfig {
	return SubscriptionsConfig{MaxAckVectorBytes: DefaultMaxAckVectorBytes, MaxVectorBatchSeqs: DefaultMaxVectorBatchSeqs,
		MaxVectorBatchWords: DefaultMaxVectorBatchWords, FullSyncInterval: DefaultFullSyncInterval,
		MaxSkipRangesPerStream: DefaultMaxSkipRangesPerStream}
}

func (c SubscriptionsConfig) withDefaults() SubscriptionsConfig {
	d := DefaultSubscriptionsConfig()
	if c.MaxAckVectorBytes == 0 {
		c.MaxAckVectorBytes = d.MaxAckVectorBytes
	}
	if c.MaxVectorBatchSeqs == 0 {
		c.MaxVectorBatchSeqs = d.MaxVectorBatchSeqs
	}
	if c.MaxVectorBatchWords == 0 {
		c.MaxVectorBatchWords = d.MaxVectorBatchWords
	}
	if c.FullSyncInterval == 0 {
		c.FullSyncInterval = d.FullSyncInterval
	}
	if c.MaxSkipRangesPerStream == 0 {
		c.MaxSkipRangesPerStream = d.MaxSkipRangesPerStream
	}
	return c
}

// Validate checks the configuration (zero = default); the error names the
// field and the limit.
func (c SubscriptionsConfig) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: config: subscriptions."+format, append([]any{ErrInvalidArgument}, a...)...)
	}
	switch {
	case c.MaxAckVectorBytes != 0 && (c.MaxAckVectorBytes < 4<<10 || c.MaxAckVectorBytes > 16<<20):
		return bad("max_ack_vector_bytes %d must be in [4096, %d] (0 = default %d)", c.MaxAckVectorBytes, 16<<20, DefaultMaxAckVectorBytes)
	case c.MaxVectorBatchSeqs < 0 || c.MaxVectorBatchSeqs > 1<<20:
		return bad("max_vector_batch_seqs %d must be in [0, %d] (0 = default %d)", c.MaxVectorBatchSeqs, 1<<20, DefaultMaxVectorBatchSeqs)
	case c.MaxVectorBatchWords < 0 || c.MaxVectorBatchWords > 1<<22:
		return bad("max_vector_batch_words %d must be in [0, %d] (0 = default %d)", c.MaxVectorBatchWords, 1<<22, DefaultMaxVectorBatchWords)
	case c.FullSyncInterval != 0 && (c.FullSyncInterval < time.Second || c.FullSyncInterval > 24*time.Hour):
		return bad("full_sync_interval %v must be in [1s, 24h] (0 = default %v)", c.FullSyncInterval, DefaultFullSyncInterval)
	case c.MaxSkipRangesPerStream < 0 || c.MaxSkipRangesPerStream > 1<<20:
		return bad("max_skip_ranges_per_stream %d must be in [0, %d] (0 = default %d)", c.MaxSkipRangesPerStream, 1<<20, DefaultMaxSkipRangesPerStream)
	}
	return nil
}

// vecLimits returns the bounds the vectors of this configuration obey.
func (c SubscriptionsConfig) vecLimits() *vecLimits {
	c = c.withDefaults()
	return &vecLimits{maxBytes: c.MaxAckVectorBytes, batchSeqs: c.MaxVectorBatchSeqs, batchWords: c.MaxVectorBatchWords}
}
