package client

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/meridianmq/meridian/security"
	"github.com/prometheus/client_golang/prometheus"
)

// Compression selects how a producer compresses its batches. Batches are
// stored and delivered as they were sent; consumers decompress.
type Compression int

const (
	// CompressionNone sends batches uncompressed.
	CompressionNone Compression = iota
	// CompressionZstd compresses batches with zstd (klauspost/compress).
	CompressionZstd
	// CompressionS2 compresses batches with s2 (klauspost/compress).
	CompressionS2
)

// String returns the lower-case codec name ("none", "zstd", "s2").
func (c Compression) String() string {
	switch c {
	case CompressionNone:
		return "none"
	case CompressionZstd:
		return "zstd"
	case CompressionS2:
		return "s2"
	}
	return fmt.Sprintf("compression(%d)", int(c))
}

// ParseCompression parses "none", "zstd" or "s2".
func ParseCompression(s string) (Compression, error) {
	switch s {
	case "", "none":
		return CompressionNone, nil
	case "zstd":
		return CompressionZstd, nil
	case "s2":
		return CompressionS2, nil
	}
	return 0, fmt.Errorf("%w: compression %q (want none, zstd or s2)", ErrInvalidArgument, s)
}

// SubscriptionType selects how a subscription spreads messages over its
// consumers.
type SubscriptionType int

const (
	// Exclusive allows one consumer; another Subscribe fails.
	Exclusive SubscriptionType = iota
	// Shared delivers round-robin to every consumer with permits.
	Shared
	// Failover has one active consumer (by priority, then name); the next
	// one takes over when it disconnects.
	Failover
	// KeyShared splits the key space among consumers: every message of one
	// key goes to one consumer, in publish order (see KeySharedOptions).
	KeyShared
)

// String returns the lower-case type name.
func (t SubscriptionType) String() string {
	switch t {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	case Failover:
		return "failover"
	case KeyShared:
		return "key_shared"
	}
	return fmt.Sprintf("subscription-type(%d)", int(t))
}

// ParseSubscriptionType parses "exclusive", "shared" or "failover".
func ParseSubscriptionType(s string) (SubscriptionType, error) {
	switch s {
	case "", "exclusive":
		return Exclusive, nil
	case "shared":
		return Shared, nil
	case "failover":
		return Failover, nil
	case "key_shared", "keyshared", "key-shared":
		return KeyShared, nil
	}
	return 0, fmt.Errorf("%w: subscription type %q (want exclusive, shared, failover or key_shared)", ErrInvalidArgument, s)
}

// InitialPosition is where a NEW subscription starts; an existing one
// resumes from its cursor.
type InitialPosition int

const (
	// Latest starts after the last message published so far.
	Latest InitialPosition = iota
	// Earliest starts at the oldest retained message.
	Earliest
)

// String returns "latest" or "earliest".
func (p InitialPosition) String() string {
	if p == Earliest {
		return "earliest"
	}
	return "latest"
}

// ParseInitialPosition parses "earliest" or "latest".
func ParseInitialPosition(s string) (InitialPosition, error) {
	switch s {
	case "", "latest":
		return Latest, nil
	case "earliest":
		return Earliest, nil
	}
	return 0, fmt.Errorf("%w: initial position %q (want earliest or latest)", ErrInvalidArgument, s)
}

// Options configures a Client.
type Options struct {
	// URL is host:port of any broker of the region (gRPC port), or a
	// comma-separated list of them. Required. The client also learns the
	// region's other brokers, so losing this one does not strand it.
	URL string
	// Logger receives client logs; nil discards them.
	Logger *slog.Logger
	// ConnectTimeout bounds one connection attempt plus lookup. Default 10s.
	ConnectTimeout time.Duration
	// OperationTimeout bounds lookups and admin calls when the caller's
	// context has no deadline. Default 30s.
	OperationTimeout time.Duration
	// InitialBackoff is the first reconnect delay. Default 100ms.
	InitialBackoff time.Duration
	// MaxBackoff caps the exponential reconnect delay. Default 5s.
	MaxBackoff time.Duration
	// Registerer receives the client's metrics (meridian_client_*); nil
	// exports none. Clients sharing a registry share the counters.
	Registerer prometheus.Registerer
	// KeepaliveTime is how long a broker connection may stay silent before
	// the client pings it. Default 10s, the smallest gRPC allows (smaller
	// values are refused); negative disables keepalive pings. A broker that
	// hangs with its TCP connection open (paused process, stuck host) is
	// then noticed within KeepaliveTime + KeepaliveTimeout: the connection
	// is dropped and every stream on it reconnects after a new lookup.
	KeepaliveTime time.Duration
	// KeepaliveTimeout is how long the client waits for a ping's answer
	// before it drops the connection. Default 5s.
	KeepaliveTimeout time.Duration
	// Regions makes a multi-region client: the first region is the
	// primary, the others where it fails over to (see Failover). A URL
	// "a=host:port,b=host:port" sets it too. Exclusive with a plain URL.
	Regions []RegionURL
	// Failover is the multi-region policy (ignored with one plain URL).
	Failover FailoverOptions
	// OnFailover, if set, is called after every region switch, once a
	// producer or consumer of the client reconnected in the new region
	// (at once when the client has none). It must not block.
	OnFailover func(FailoverEvent)
	// DialRewrite, if set, maps every broker address the client dials
	// (URL addresses and the owners lookups return) to the address to
	// connect to: tests and drills route a region through a proxy.
	DialRewrite func(addr string) string

	// TLS, when set, makes every broker connection TLS with this config,
	// used as is (not reloaded; ServerName empty: the broker address's
	// host). Exclusive with TLSFiles.
	TLS *tls.Config
	// TLSFiles, when its CAFile is set, makes every broker connection TLS
	// against that CA bundle, presenting CertFile/KeyFile if given (mutual
	// TLS: the certificate's CN is the role); the files are reloaded when
	// they change. Exclusive with TLS.
	TLSFiles security.TLSFiles
	// Token is a JWT presented on every call as "authorization: Bearer"
	// (its sub is the role). Requires TLS or TLSFiles. Exclusive with
	// TokenFile.
	Token string
	// TokenFile is a file holding the token, read again whenever it
	// changes (a rotated token applies to the next call). Requires TLS or
	// TLSFiles.
	TokenFile string
}

// securityRuntime builds the dial security the options ask for (never
// nil: plaintext without TLS).
func (o Options) securityRuntime() (*security.Runtime, error) {
	var tok security.TokenSource
	switch {
	case o.Token != "" && o.TokenFile != "":
		return nil, fmt.Errorf("%w: Token and TokenFile are exclusive", ErrInvalidArgument)
	case o.Token != "":
		tok = security.StaticToken(o.Token)
	case o.TokenFile != "":
		tok = security.TokenFromFile(o.TokenFile)
		if _, err := tok.Token(); err != nil {
			return nil, fmt.Errorf("%w: TokenFile: %v", ErrInvalidArgument, err)
		}
	}
	if o.TLS != nil {
		if !o.TLSFiles.IsZero() {
			return nil, fmt.Errorf("%w: TLS and TLSFiles are exclusive", ErrInvalidArgument)
		}
		return security.ClientRuntimeTLS(o.TLS, tok)
	}
	if tok != nil && o.TLSFiles.IsZero() {
		return nil, fmt.Errorf("%w: a Token or TokenFile requires TLS or TLSFiles (it would cross the network in clear)", ErrInvalidArgument)
	}
	rt, err := security.ClientRuntime(o.TLSFiles, tok, o.Logger)
	if err != nil {
		return nil, fmt.Errorf("%w: TLSFiles: %v", ErrInvalidArgument, err)
	}
	return rt, nil
}

// resolveRegions parses a multi-region URL into Regions.
func (o *Options) resolveRegions() error {
	rs, err := ParseRegionURLs(o.URL)
	if err != nil {
		return err
	}
	if rs == nil {
		return nil
	}
	if len(o.Regions) > 0 {
		return fmt.Errorf("%w: URL %q names regions and Regions is set too; use one", ErrInvalidArgument, o.URL)
	}
	o.Regions, o.URL = rs, ""
	return nil
}

// describeURL names what the client connects to, for errors.
func (o Options) describeURL() string {
	if len(o.Regions) == 0 {
		return o.URL
	}
	parts := make([]string, len(o.Regions))
	for i, r := range o.Regions {
		parts[i] = r.Name + "=" + r.URL
	}
	return strings.Join(parts, ",")
}

// MinKeepaliveTime is the smallest KeepaliveTime: gRPC raises anything
// below it to it, so the client refuses it rather than pretend.
const MinKeepaliveTime = 10 * time.Second

// DefaultOptions returns Options with every default filled in (URL empty).
func DefaultOptions() Options {
	return Options{
		ConnectTimeout:   10 * time.Second,
		OperationTimeout: 30 * time.Second,
		InitialBackoff:   100 * time.Millisecond,
		MaxBackoff:       5 * time.Second,
		KeepaliveTime:    MinKeepaliveTime,
		KeepaliveTimeout: 5 * time.Second,
	}
}

// withDefaults fills zero fields from DefaultOptions.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = d.ConnectTimeout
	}
	if o.OperationTimeout == 0 {
		o.OperationTimeout = d.OperationTimeout
	}
	if o.InitialBackoff == 0 {
		o.InitialBackoff = d.InitialBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = d.MaxBackoff
	}
	if o.KeepaliveTime == 0 {
		o.KeepaliveTime = d.KeepaliveTime
	}
	if o.KeepaliveTimeout == 0 {
		o.KeepaliveTimeout = d.KeepaliveTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Failover = o.Failover.withDefaults()
	return o
}

// Validate reports the first invalid field.
func (o Options) Validate() error {
	if len(o.Regions) > 0 {
		if o.URL != "" {
			return fmt.Errorf("%w: URL and Regions are exclusive (URL %q)", ErrInvalidArgument, o.URL)
		}
		if err := validateRegions(o.Regions); err != nil {
			return err
		}
		if err := o.Failover.withDefaults().validate(); err != nil {
			return err
		}
	} else if o.URL == "" {
		return fmt.Errorf("%w: URL is required (host:port of a broker, or region=host:port,...)", ErrInvalidArgument)
	}
	if o.ConnectTimeout < 0 || o.OperationTimeout < 0 || o.InitialBackoff < 0 || o.MaxBackoff < 0 {
		return fmt.Errorf("%w: timeouts and backoffs must be >= 0", ErrInvalidArgument)
	}
	if o.MaxBackoff > 0 && o.InitialBackoff > o.MaxBackoff {
		return fmt.Errorf("%w: InitialBackoff %v > MaxBackoff %v", ErrInvalidArgument, o.InitialBackoff, o.MaxBackoff)
	}
	if o.KeepaliveTime > 0 && o.KeepaliveTime < MinKeepaliveTime {
		return fmt.Errorf("%w: KeepaliveTime %v must be >= %v (or negative to disable)", ErrInvalidArgument, o.KeepaliveTime, MinKeepaliveTime)
	}
	if o.KeepaliveTimeout < 0 {
		return fmt.Errorf("%w: KeepaliveTimeout %v must be >= 0", ErrInvalidArgument, o.KeepaliveTimeout)
	}
	return nil
}

// Limits on producer options: they bound client memory.
const (
	// MaxBatchingMaxMessages is the largest allowed BatchingMaxMessages.
	MaxBatchingMaxMessages = 100_000
	// MaxBatchingMaxBytes is the largest allowed BatchingMaxBytes (4 MiB,
	// below the broker's default 5 MiB entry limit).
	MaxBatchingMaxBytes = 4 << 20
	// MaxMaxPendingMessages is the largest allowed MaxPendingMessages.
	MaxMaxPendingMessages = 1_000_000
	// MaxReceiverQueueSize is the largest allowed ReceiverQueueSize.
	MaxReceiverQueueSize = 100_000
)

// ProducerOptions configures a Producer.
type ProducerOptions struct {
	// Topic is "tenant/namespace/topic". Required.
	Topic string
	// Name is the producer name, the key of broker-side deduplication;
	// empty lets the client generate a unique one.
	Name string
	// BatchingMaxMessages closes a batch at this many messages. Default
	// 1000; 1 disables batching.
	BatchingMaxMessages int
	// BatchingMaxBytes closes a batch at this many payload bytes. Default
	// 128 KiB. A single larger message is sent alone.
	BatchingMaxBytes int
	// BatchingMaxDelay closes a non-empty batch this long after its first
	// message. Default 10ms. It is an upper bound: while the producer has
	// nothing in flight, a batch is sent at once (see BatchingHoldOpen).
	BatchingMaxDelay time.Duration
	// BatchingHoldOpen keeps a batch open until BatchingMaxDelay or a size
	// limit closes it, even when nothing else is in flight (Pulsar's
	// behaviour). By default a producer with nothing in flight sends at
	// once, and batches form only while earlier sends await their receipt
	// (as Kafka's linger.ms=0): the same batches under load, without the
	// delay when idle.
	BatchingHoldOpen bool
	// Compression is the batch codec. Default none.
	Compression Compression
	// SendTimeout fails a message with ErrSendTimeout when it is not
	// acknowledged this long after SendAsync accepted it. Default 30s;
	// negative disables it. A timed-out message may still have been stored.
	// After StallTimeouts send timeouts in a row with no receipt between
	// them, the producer drops its stream and looks the topic up again.
	SendTimeout time.Duration
	// StallTimeouts is how many send timeouts in a row, with no receipt in
	// between, make the producer give up on its stream: it reconnects
	// after a new lookup, so a hung owner does not stall it forever.
	// Default 3; negative never gives up on a stream for timeouts.
	StallTimeouts int
	// MaxPendingMessages bounds messages accepted but not yet resolved
	// (batching, in flight, awaiting resend). Default 1000.
	MaxPendingMessages int
	// BlockIfQueueFull makes Send/SendAsync wait for room instead of
	// failing with ErrProducerQueueFull.
	BlockIfQueueFull bool
	// MaxMessageSize rejects larger payloads client-side with
	// ErrMessageTooLarge. Default 5 MiB (the broker default).
	MaxMessageSize int

	// schema is the producer's schema (NewTypedProducer; schema.go).
	schema *clientv1.SchemaInfo
	// PartitionsAutoDiscoveryInterval is how often a producer or consumer
	// of a partitioned topic asks for its partition count and opens the
	// partitions added since (Pulsar's autoUpdatePartitionsInterval).
	// Default 1 min; minimum 100 ms.
	PartitionsAutoDiscoveryInterval time.Duration
}

// DefaultProducerOptions returns ProducerOptions with defaults (Topic empty).
func DefaultProducerOptions() ProducerOptions {
	return ProducerOptions{
		BatchingMaxMessages: 1000,
		BatchingMaxBytes:    128 << 10,
		BatchingMaxDelay:    10 * time.Millisecond,
		SendTimeout:         30 * time.Second,
		StallTimeouts:       3,
		MaxPendingMessages:  1000,
		MaxMessageSize:      5 << 20,
	}
}

func (o ProducerOptions) withDefaults() ProducerOptions {
	d := DefaultProducerOptions()
	if o.BatchingMaxMessages == 0 {
		o.BatchingMaxMessages = d.BatchingMaxMessages
	}
	if o.BatchingMaxBytes == 0 {
		o.BatchingMaxBytes = d.BatchingMaxBytes
	}
	if o.BatchingMaxDelay == 0 {
		o.BatchingMaxDelay = d.BatchingMaxDelay
	}
	if o.SendTimeout == 0 {
		o.SendTimeout = d.SendTimeout
	}
	if o.StallTimeouts == 0 {
		o.StallTimeouts = d.StallTimeouts
	}
	if o.MaxPendingMessages == 0 {
		o.MaxPendingMessages = d.MaxPendingMessages
	}
	if o.MaxMessageSize == 0 {
		o.MaxMessageSize = d.MaxMessageSize
	}
	return o
}

// Validate reports the first invalid field, naming it and its limit.
func (o ProducerOptions) Validate() error {
	if err := ValidateTopicName(o.Topic); err != nil {
		return err
	}
	if o.BatchingMaxMessages < 0 || o.BatchingMaxMessages > MaxBatchingMaxMessages {
		return fmt.Errorf("%w: BatchingMaxMessages %d out of range [1, %d]", ErrInvalidArgument, o.BatchingMaxMessages, MaxBatchingMaxMessages)
	}
	if o.BatchingMaxBytes < 0 || o.BatchingMaxBytes > MaxBatchingMaxBytes {
		return fmt.Errorf("%w: BatchingMaxBytes %d out of range [1, %d]", ErrInvalidArgument, o.BatchingMaxBytes, MaxBatchingMaxBytes)
	}
	if o.BatchingMaxDelay < 0 {
		return fmt.Errorf("%w: BatchingMaxDelay %v must be >= 0", ErrInvalidArgument, o.BatchingMaxDelay)
	}
	if o.Compression < CompressionNone || o.Compression > CompressionS2 {
		return fmt.Errorf("%w: Compression %d unknown (want None, Zstd or S2)", ErrInvalidArgument, int(o.Compression))
	}
	if o.MaxPendingMessages < 0 || o.MaxPendingMessages > MaxMaxPendingMessages {
		return fmt.Errorf("%w: MaxPendingMessages %d out of range [1, %d]", ErrInvalidArgument, o.MaxPendingMessages, MaxMaxPendingMessages)
	}
	if o.MaxMessageSize < 0 {
		return fmt.Errorf("%w: MaxMessageSize %d must be >= 0", ErrInvalidArgument, o.MaxMessageSize)
	}
	if len(o.Name) > maxNameLen {
		return fmt.Errorf("%w: producer Name is %d bytes, limit %d", ErrInvalidArgument, len(o.Name), maxNameLen)
	}
	return nil
}

// ConsumerOptions configures a Consumer.
type ConsumerOptions struct {
	// Topic is "tenant/namespace/topic". Required.
	Topic string
	// Subscription names the durable cursor. Required.
	Subscription string
	// Type is the subscription type. Default Exclusive.
	Type SubscriptionType
	// InitialPosition applies when the subscription is created. Default Latest.
	InitialPosition InitialPosition
	// Name is the consumer name (Failover ordering); empty = generated.
	Name string
	// Priority orders Failover consumers: lower is preferred. Default 0.
	Priority int32
	// Replicated makes the subscription, when this consumer creates it, a
	// replicated subscription: its acknowledgements are replicated to every
	// region of the namespace, so a consumer can move to another region
	// and resume there (duplicates limited to the acknowledgements not yet
	// replicated). A namespace with replicate_subscriptions makes every
	// subscription replicated. Default false.
	Replicated bool
	// ReceiverQueueSize bounds messages buffered in the client; it is the
	// flow-control window granted to the broker. Default 1000.
	ReceiverQueueSize int
	// Start, when set, positions the subscription when this consumer
	// creates it (it then replaces InitialPosition): a message ID, a time or
	// an origin position, resolved per origin region so that it selects the
	// same messages in every region (see StartPosition). An existing
	// subscription keeps its position: use Seek to move it.
	Start *StartPosition
	// KeyShared configures a KeyShared consumer (nil: the broker splits the
	// key space automatically, in order).
	KeyShared *KeySharedOptions
	// PartitionsAutoDiscoveryInterval is how often a producer or consumer
	// of a partitioned topic asks for its partition count and opens the
	// partitions added since (Pulsar's autoUpdatePartitionsInterval).
	// Default 1 min; minimum 100 ms.
	PartitionsAutoDiscoveryInterval time.Duration
	// NackRedeliveryDelay is how long a negatively acknowledged message
	// waits before the broker is asked to redeliver it (Pulsar's
	// negativeAckRedeliveryDelay). Default 1 min; range [1ms, 24h].
	NackRedeliveryDelay time.Duration
	// NackBackoff, when set, replaces NackRedeliveryDelay with a delay that
	// grows with the message's redelivery count (see NackBackoff).
	NackBackoff *NackBackoff
	// AckTimeout, when not 0, redelivers a received message not
	// acknowledged within it (Pulsar's ackTimeout). Default 0 = off;
	// minimum 1 s.
	AckTimeout time.Duration
	// DeadLetter, when set, sends messages redelivered too often to a
	// dead-letter topic (see DeadLetterPolicy).
	DeadLetter *DeadLetterPolicy
	// MaxEntryBytes bounds the decoded (uncompressed) size of an entry the
	// consumer accepts: an entry that declares or decodes to more is a
	// poison pill ("too_large", poison.go). Default and maximum
	// wire.MaxUncompressedBytes (64 MiB); minimum 1 KiB.
	MaxEntryBytes int64
	// PoisonSchemaMismatch makes a TypedConsumer treat a message its schema
	// cannot decode as a poison pill ("schema"): it goes to the dead-letter
	// topic when DeadLetter is set, else it is acknowledged and counted,
	// and Receive moves on. Default false: Receive returns the message with
	// ErrSchemaMismatch and the application acks or nacks it.
	PoisonSchemaMismatch bool

	// nonDurable makes a reader's consumer (NewReader).
	nonDurable bool
	// schema is the consumer's schema (SubscribeTyped; schema.go).
	schema *clientv1.SchemaInfo
}

// HashRange is an inclusive range of key slots (wire.KeySlot), 0..65535.
type HashRange struct {
	Start, End int32
}

// KeySharedOptions configures a KeyShared consumer.
type KeySharedOptions struct {
	// Sticky, when not empty, names this consumer's key slots; the broker
	// refuses ranges that overlap another connected consumer's. Empty: the
	// broker assigns slots by consistent hashing (auto split).
	Sticky []HashRange
	// AllowOutOfOrder lets this consumer receive its keys as soon as it
	// joins, before messages of those keys delivered earlier to other
	// consumers are acknowledged: per-key order may break at a join.
	AllowOutOfOrder bool
}

// DefaultConsumerOptions returns ConsumerOptions with defaults.
func DefaultConsumerOptions() ConsumerOptions {
	return ConsumerOptions{ReceiverQueueSize: 1000}
}

func (o ConsumerOptions) withDefaults() ConsumerOptions {
	if o.ReceiverQueueSize == 0 {
		o.ReceiverQueueSize = DefaultConsumerOptions().ReceiverQueueSize
	}
	if o.NackRedeliveryDelay == 0 {
		o.NackRedeliveryDelay = DefaultNackRedeliveryDelay
	}
	if o.MaxEntryBytes == 0 {
		o.MaxEntryBytes = wire.MaxUncompressedBytes
	}
	return o
}

// Validate reports the first invalid field.
func (o ConsumerOptions) Validate() error {
	if err := ValidateTopicName(o.Topic); err != nil {
		return err
	}
	if o.Subscription == "" && !o.nonDurable {
		return fmt.Errorf("%w: Subscription is required", ErrInvalidArgument)
	}
	if o.Start != nil {
		if err := o.Start.validate("Start"); err != nil {
			return err
		}
	}
	if len(o.Subscription) > maxNameLen {
		return fmt.Errorf("%w: Subscription is %d bytes, limit %d", ErrInvalidArgument, len(o.Subscription), maxNameLen)
	}
	if o.Type < Exclusive || o.Type > KeyShared {
		return fmt.Errorf("%w: Type %d unknown (want Exclusive, Shared, Failover or KeyShared)", ErrInvalidArgument, int(o.Type))
	}
	if o.InitialPosition != Latest && o.InitialPosition != Earliest {
		return fmt.Errorf("%w: InitialPosition %d unknown (want Earliest or Latest)", ErrInvalidArgument, int(o.InitialPosition))
	}
	if o.ReceiverQueueSize < 0 || o.ReceiverQueueSize > MaxReceiverQueueSize {
		return fmt.Errorf("%w: ReceiverQueueSize %d out of range [1, %d]", ErrInvalidArgument, o.ReceiverQueueSize, MaxReceiverQueueSize)
	}
	if len(o.Name) > maxNameLen {
		return fmt.Errorf("%w: consumer Name is %d bytes, limit %d", ErrInvalidArgument, len(o.Name), maxNameLen)
	}
	if o.MaxEntryBytes != 0 && (o.MaxEntryBytes < 1<<10 || o.MaxEntryBytes > wire.MaxUncompressedBytes) {
		return fmt.Errorf("%w: MaxEntryBytes %d out of range [1024, %d]", ErrInvalidArgument, o.MaxEntryBytes, wire.MaxUncompressedBytes)
	}
	return o.validateAcks() // nack.go
}
