package broker

import (
	"fmt"
	"github.com/meridianmq/meridian/internal/wire"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/meridianmq/meridian/internal/netguard"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/security"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a broker Server.
type Config struct {
	// BrokerID identifies the broker in the region (default: its gRPC
	// address once listening).
	BrokerID string `yaml:"broker_id"`
	// Region is the region's name; it is stamped on locally produced
	// entries as their origin. Required.
	Region string `yaml:"region"`
	// GRPCAddress is where the client and admin gRPC services listen
	// (default 127.0.0.1:6650; port 0 picks a free port).
	GRPCAddress string `yaml:"grpc_address"`
	// HTTPAddress serves /metrics, /healthz, /readyz and the admin JSON API
	// ("" = no HTTP server).
	HTTPAddress string `yaml:"http_address"`
	// AdvertisedGRPC / AdvertisedHTTP are the addresses told to clients
	// (default: the bound addresses).
	AdvertisedGRPC string `yaml:"advertised_grpc"`
	AdvertisedHTTP string `yaml:"advertised_http"`
	// HTTPAllowedHosts are the names the admin HTTP API answers to (the
	// Host header; an Origin header must be the request's host or one of
	// them); IP literals are always accepted. Empty: the host of
	// http_address and advertised_http, localhost, 127.0.0.1, ::1. At most
	// 64 names.
	HTTPAllowedHosts []string `yaml:"http_allowed_hosts"`

	// GRPCListener, when set, is the listener the gRPC services use instead
	// of listening on GRPCAddress (tests that must know a broker's address
	// before it starts hold it open, so no other process can take it).
	GRPCListener net.Listener `yaml:"-"`
	// DialRewrite maps addresses this broker dials (remote regions'
	// brokers, peers) to the address it dials instead; `meridian dev` points
	// them at its link proxies so that traffic can be delayed, shaped and
	// cut. The broker command also applies it to its metadata and bookie
	// connections (the process links of `meridian dev`). Unmapped
	// addresses are dialed as they are.
	DialRewrite map[string]string `yaml:"dial_rewrite"`
	// WAN configures the broker's WAN membership pool for region health
	// (see WANConfig); without wan.bind_address there is none.
	WAN WANConfig `yaml:"wan"`

	// RegionHealth reports remote regions' reachability from the WAN
	// membership pool, shown by ListRegions (nil: ListRegions probes each
	// region with a gRPC Lookup instead).
	RegionHealth RegionHealth `yaml:"-"`

	// Global is the global metadata shard (tenants, namespaces). Required.
	Global metadata.Store `yaml:"-"`
	// Regional is the region's metadata shard (ownership, ledger lists,
	// cursors, broker registry). Required.
	Regional metadata.Store `yaml:"-"`
	// Ledgers creates, opens and deletes ledgers on the region's bookies.
	// Required (see NewLedgerStore).
	Ledgers LedgerStore `yaml:"-"`
	// Logger receives the broker's logs (default: discard).
	Logger *slog.Logger `yaml:"-"`
	// Registerer receives the broker's metrics (nil: none registered).
	Registerer prometheus.Registerer `yaml:"-"`
	// Gatherer serves /metrics (default: Registerer when it is a Gatherer).
	Gatherer prometheus.Gatherer `yaml:"-"`

	// MaxMessageBytes is the largest Send payload accepted (default 5 MiB).
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// DefaultEnsembleSize, DefaultWriteQuorum, DefaultAckQuorum apply to
	// namespaces that set none (defaults 3, 2, 2).
	DefaultEnsembleSize int `yaml:"default_ensemble_size"`
	DefaultWriteQuorum  int `yaml:"default_write_quorum"`
	DefaultAckQuorum    int `yaml:"default_ack_quorum"`
	// RolloverEntries, RolloverBytes, RolloverAge bound one ledger
	// (defaults 50000 entries, 256 MiB, 4h); the topic moves to a new ledger
	// when any is reached.
	RolloverEntries int64         `yaml:"rollover_entries"`
	RolloverBytes   int64         `yaml:"rollover_bytes"`
	RolloverAge     time.Duration `yaml:"rollover_age"`
	// CursorPersistInterval bounds how long an acknowledgement stays only in
	// memory (default 1s): a broker crash redelivers at most this much. A
	// namespace's cursor_persist_interval_ms policy overrides it (0 there:
	// persist before answering each ack).
	CursorPersistInterval time.Duration `yaml:"cursor_persist_interval"`
	// RetentionInterval is how often retention runs (default 1 min).
	RetentionInterval time.Duration `yaml:"retention_interval"`
	// BacklogPolicyInterval is how often each topic applies message TTL and
	// the consumer_backlog_eviction quota action (default 5s; an exceeded
	// eviction quota seen at a send also starts a round at once).
	BacklogPolicyInterval time.Duration `yaml:"backlog_policy_interval"`
	// FailoverSwitchDelay (default 1s, at most 1 min; 0: at once) is how
	// long a Failover subscription waits, when its active consumer changes
	// while the previous one is still connected, before it redelivers the
	// previous consumer's unacknowledged entries and dispatches to the new
	// one: the previous consumer's acknowledgements of what it already
	// received arrive meanwhile and are not redelivered (Pulsar's
	// activeConsumerFailoverDelayTimeMillis).
	FailoverSwitchDelay time.Duration `yaml:"failover_switch_delay"`
	// SessionTTL is the metadata session TTL behind topic ownership
	// (default 10s): a dead broker's topics move after at most this.
	SessionTTL time.Duration `yaml:"session_ttl"`
	// OperationTimeout bounds topic loading, rollover and metadata calls
	// made in the background (default 30s).
	OperationTimeout time.Duration `yaml:"operation_timeout"`
	// MaxPendingSends bounds the sends a topic queues before its ledger
	// (default 4096): producers block (back-pressure) beyond it.
	MaxPendingSends int `yaml:"max_pending_sends"`
	// MaxPendingSendBytes bounds the payload bytes of a topic's sends
	// that have no receipt yet (default 64 MiB); beyond it its producers'
	// streams stop being read (back-pressure). Like MaxPendingSends, in
	// bytes. At least max_message_bytes.
	MaxPendingSendBytes int64 `yaml:"max_pending_send_bytes"`
	// MaxProducersPerTopic, MaxConsumersPerSubscription and
	// MaxSubscriptionsPerTopic are the defaults of the namespace policies
	// of the same names (limits.go); 0 = no limit. Defaults: 10000
	// producers per topic, 10000 consumers per subscription, 10000
	// subscriptions per topic, generous enough for every real use and
	// small enough that one client cannot grow a topic's maps without
	// bound.
	MaxProducersPerTopic        int `yaml:"max_producers_per_topic"`
	MaxConsumersPerSubscription int `yaml:"max_consumers_per_subscription"`
	MaxSubscriptionsPerTopic    int `yaml:"max_subscriptions_per_topic"`
	// AllowAutoTopicCreation and AllowAutoSubscriptionCreation are the
	// defaults of the namespace policies of the same names (limits.go):
	// whether clients create topics and durable subscriptions by using
	// them (default true, as in Pulsar).
	AllowAutoTopicCreation        bool `yaml:"allow_auto_topic_creation"`
	AllowAutoSubscriptionCreation bool `yaml:"allow_auto_subscription_creation"`
	// MaxTopicsPerNamespace is the default of the namespace policy of the
	// same name: the topics (each partition counts) this region creates in
	// a namespace (default 0 = no limit, as in Pulsar).
	MaxTopicsPerNamespace int `yaml:"max_topics_per_namespace"`
	// MaxBatchMessages refuses a send whose num_messages is larger (default
	// 100 000, the client's largest batch), and MaxBatchBytes one whose
	// declared uncompressed_size is larger (default 64 MiB, at most that):
	// a batch is what every consumer must decode in one piece. The broker
	// checks what the send declares; a consumer's decoder refuses a batch
	// that lies about either (a poison entry, client/poison.go).
	MaxBatchMessages int   `yaml:"max_batch_messages"`
	MaxBatchBytes    int64 `yaml:"max_batch_bytes"`
	// MaxInflightBytesPerConnection bounds the same per client connection
	// (default 32 MiB), over all its producers. At least max_message_bytes.
	MaxInflightBytesPerConnection int64 `yaml:"max_inflight_bytes_per_connection"`
	// MaxInflightProduceBytes bounds the same over the whole broker
	// (default 256 MiB; Pulsar's maxMessagePublishBufferSizeInMB). At
	// least max_message_bytes.
	MaxInflightProduceBytes int64 `yaml:"max_inflight_produce_bytes"`
	// MaxPendingDeliveryBytesPerConsumer bounds the payload bytes queued
	// towards one consumer's stream and not yet written to it (default
	// 16 MiB); MaxPendingDeliveryBytesPerConnection the same over the
	// consumers of one client connection (default 64 MiB), and
	// MaxPendingDeliveryBytes over the whole broker (default 512 MiB). A
	// level with room takes a whole entry, so each overshoots by at most
	// one entry. Past a limit dispatch to that consumer pauses until its
	// stream drains (see deliverybudget.go).
	MaxPendingDeliveryBytesPerConsumer   int64 `yaml:"max_pending_delivery_bytes_per_consumer"`
	MaxPendingDeliveryBytesPerConnection int64 `yaml:"max_pending_delivery_bytes_per_connection"`
	MaxPendingDeliveryBytes              int64 `yaml:"max_pending_delivery_bytes"`
	// DispatcherMaxReadBytes is about the most one dispatch round reads
	// (default 5 MiB, Pulsar's dispatcherMaxReadSizeBytes), estimated from
	// the mean size of the subscription's last read;
	// MaxInflightDispatchReadBytes bounds those estimates over all rounds
	// reading at once (default 64 MiB; a round waits for room). See
	// readbudget.go.
	DispatcherMaxReadBytes       int64 `yaml:"dispatcher_max_read_bytes"`
	MaxInflightDispatchReadBytes int64 `yaml:"max_inflight_dispatch_read_bytes"`
	// MaxPermitsPerConsumer caps the permits a consumer may accumulate
	// (default 10000) and so the entries queued towards it.
	MaxPermitsPerConsumer int `yaml:"max_permits_per_consumer"`
	// MaxUnackedPerConsumer stops dispatch to a consumer holding this many
	// delivered but unacknowledged entries (default 50000), so a consumer
	// that never acks cannot make the broker track without bound.
	MaxUnackedPerConsumer int `yaml:"max_unacked_per_consumer"`
	// TailCacheBytes bounds, for the whole broker, the cache of recently
	// written entries used to dispatch without reading them back from
	// bookies (default 256 MiB; one topic holds at most an eighth of it).
	TailCacheBytes int64 `yaml:"tail_cache_bytes"`
	// MaxIndividualAcks bounds the individually acknowledged positions
	// persisted with a cursor (default 100000); beyond it the latest ones
	// are redelivered after a restart, never lost.
	MaxIndividualAcks int `yaml:"max_individual_acks"`
	// DedupMaxProducers bounds the producer names a topic tracks for
	// deduplication in memory (default 10000); a new name beyond it makes
	// the topic forget the least recently used one. Producers found in the
	// ledgers scanned when the topic is taken are tracked even beyond it.
	// At most 2000 of them (the most recently used) are stored in the
	// ledger list; the others are found again by rescanning the ledgers
	// that hold their last batches (see broker/dedup.go).
	DedupMaxProducers int `yaml:"dedup_max_producers"`
	// MaxOriginIncarnations bounds the origin streams (incarnations,
	// broker/originstream.go) of one origin region whose dedup marks a
	// topic keeps (default 16): the marks of old incarnations stay pinned,
	// beyond the bound the lowest are forgotten (a resend of those could
	// be stored again: a duplicate, never a loss).
	MaxOriginIncarnations int `yaml:"max_origin_incarnations"`
	// MaxFailoverConfirmBytes bounds the memory of GetFailoverTarget's
	// freshness checks (default 1 MiB): per failover group a client asks
	// about, when the broker last read its target from the global shard
	// (about 100 bytes a group). Past it the memory is cleared and the
	// next polls read the global shard again.
	MaxFailoverConfirmBytes int64 `yaml:"max_failover_confirm_bytes"`
	// MaxPermissionGrants bounds each grant map of the permission model
	// (roles of a namespace, prefix or topic grant, prefixes of a
	// namespace, a tenant's admin roles); 0 = DefaultMaxPermissionGrants
	// (1024), at most 100000.
	MaxPermissionGrants int `yaml:"max_permission_grants"`
	// KeepaliveTime is how long a client connection may stay silent before
	// the broker pings it (default 30s), and KeepaliveTimeout how long the
	// broker waits for the answer before it closes the connection (default
	// 10s): a client that vanished without closing its TCP connection
	// releases its producers and consumers.
	KeepaliveTime    time.Duration `yaml:"keepalive_time"`
	KeepaliveTimeout time.Duration `yaml:"keepalive_timeout"`
	// KeepaliveMinTime is the shortest interval at which the broker lets a
	// client ping it, with or without an open stream (default 5s, below the
	// client's 10s default). A client pinging faster is disconnected with
	// "too many pings", so keep it below every client's keepalive time.
	KeepaliveMinTime time.Duration `yaml:"keepalive_min_time"`
	// GRPCWindowBytes is the HTTP/2 receive window of each stream and each
	// connection the broker serves (0: DefaultGRPCWindowBytes; -1: gRPC's
	// own, 64 KiB grown by its bandwidth-delay estimator). gRPC's own
	// window holds a replication stream from a distant region to 64 KiB
	// per round trip until the estimator has grown it, several round trips
	// later: at 10k msg/s over an 80 ms round trip that delays entries by
	// hundreds of milliseconds whenever a stream opens. A fixed window
	// lets a connection's senders buffer up to this many unread bytes in
	// the broker.
	GRPCWindowBytes int32 `yaml:"grpc_window_bytes"`
	// DefaultRetentionTime and DefaultRetentionSizeBytes are the retention
	// of a namespace created without one (both its retention fields 0),
	// including public/default. Default 0/0, Pulsar's rule: a topic with
	// no subscription keeps nothing. Standalone sets 7 days / 10 GiB so a
	// new user's messages wait for a later `consume --from earliest`. -1
	// means forever / unlimited, as in the namespace policies.
	DefaultRetentionTime      time.Duration `yaml:"default_retention_time"`
	DefaultRetentionSizeBytes int64         `yaml:"default_retention_size_bytes"`
	// DefaultBacklogQuotaBytes is the backlog quota of a namespace created
	// without one (backlog_quota_bytes unset), including public/default:
	// default 10 GiB with the PRODUCER_HOLD action, so no client can fill
	// the bookies' disks by producing to a topic nobody consumes. -1 = no
	// quota, as in the namespace policies. Existing namespaces keep theirs.
	DefaultBacklogQuotaBytes int64 `yaml:"default_backlog_quota_bytes"`

	// Replication tunes the replicators (see ReplicationConfig; zero
	// fields take their defaults).
	Replication ReplicationConfig `yaml:"replication"`
	// Subscriptions bounds replicated subscriptions' acknowledgement
	// vectors and tunes their shipping (see SubscriptionsConfig; zero
	// fields take their defaults).
	Subscriptions SubscriptionsConfig `yaml:"subscriptions"`

	// DedupReplicatedCopies skips a replicated entry every message of which
	// is already stored here under the same producer failover identity (a
	// client failover stored the message in two regions; see
	// docs/geo/failover-dedup.md): each region then keeps one copy, but not
	// the same one, and a replicated subscription's acknowledgements of one
	// copy do not cover the other, so its backlog in the other region never
	// drains to zero for those messages. Off by default: both copies are
	// stored (a message stored twice, never lost). Local sends of messages
	// already stored are answered duplicate either way.
	DedupReplicatedCopies bool `yaml:"dedup_replicated_copies"`

	// FaultInjection enables the test-only unsafe modes below (the chaos
	// suite's deliberately broken builds). Never set it in production.
	FaultInjection bool `yaml:"fault_injection"`
	// UnsafeSkipOriginCheck (requires FaultInjection) makes the
	// replication receiver store a replicated entry whose origin_seq is at
	// or below the origin's stored high-water mark instead of answering
	// DUPLICATE: a resend after a reconnect or timeout is stored twice.
	// It exists so the chaos suite can show it detects that bug; the
	// broker logs a warning at start.
	UnsafeSkipOriginCheck bool `yaml:"unsafe_skip_origin_check"`

	// MaxSetAsideEntries bounds a subscription's replay set: entries read
	// but set aside (a Key_Shared key whose consumer has no permit or is
	// still draining, a matured delayed entry, a redelivery). Past it the
	// dispatcher stops reading new entries until the set shrinks
	// (back-pressure instead of unbounded memory). 0 = 10000.
	MaxSetAsideEntries int `yaml:"max_set_aside_entries"`
	// MaxDelayedEntries bounds the delayed entries (deliver_at_ms in the
	// future) one subscription tracks in memory; past it the dispatcher
	// stops reading ahead until some are due. The entries themselves stay
	// in the ledger: the index is rebuilt by reading. 0 = 100000.
	MaxDelayedEntries int `yaml:"max_delayed_entries"`

	// Security is the broker's TLS identity and authentication (see
	// security.Config; zero: plaintext and anonymous, as before). With TLS
	// every listener (gRPC, HTTP) serves TLS only and every dial (peer
	// brokers, remote regions, bookies for scrub) uses this certificate.
	// A grpc_address or http_address that is not loopback needs TLS and
	// auth, or security.insecure.
	Security security.Config `yaml:"security"`
	// SecurityRuntime, when set, is used instead of building one from
	// Security (a process sharing one runtime between the broker and its
	// metadata and ledger clients); the broker does not close it.
	SecurityRuntime *security.Runtime `yaml:"-"`

	// Limits are the per-peer limits of the gRPC and HTTP listeners
	// (netguard.Limits; YAML fields inline: max_connections_per_ip
	// (default 1024, 0 = unlimited), max_streams_per_connection (default
	// DefaultMaxStreamsPerConnection), max_header_list_bytes (32 KiB),
	// max_connection_idle (30m), http_read_timeout (30s),
	// http_write_timeout (2m), http_idle_timeout (2m),
	// http_max_header_bytes (64 KiB)).
	netguard.Limits `yaml:",inline"`

	// Testing holds test-only injection points; leave it zero.
	Testing TestingKnobs `yaml:"-"`
}

// DefaultMaxStreamsPerConnection is the broker's default
// max_streams_per_connection: a client multiplexes every producer and
// consumer it has on one connection, each a stream.
const DefaultMaxStreamsPerConnection = 10000

// Retention kept by standalone (and development) regions for namespaces
// created without a retention policy.
const (
	StandaloneRetentionTime      = 7 * 24 * time.Hour
	StandaloneRetentionSizeBytes = 10 << 30
)

// DefaultGRPCWindowBytes is the default GRPCWindowBytes: the ceiling of
// gRPC's own bandwidth-delay estimator.
const DefaultGRPCWindowBytes = 16 << 20

// grpcWindow returns the fixed HTTP/2 window (0: gRPC's dynamic one).
func (c Config) grpcWindow() int32 {
	switch {
	case c.GRPCWindowBytes == 0:
		return DefaultGRPCWindowBytes
	case c.GRPCWindowBytes < 0:
		return 0
	}
	return c.GRPCWindowBytes
}

// DefaultConfig returns a Config with every limit at its default.
func DefaultConfig() Config {
	return Config{
		GRPCAddress:                          "127.0.0.1:6650",
		MaxMessageBytes:                      5 << 20,
		DefaultEnsembleSize:                  3,
		DefaultWriteQuorum:                   2,
		DefaultAckQuorum:                     2,
		RolloverEntries:                      50000,
		RolloverBytes:                        256 << 20,
		RolloverAge:                          4 * time.Hour,
		CursorPersistInterval:                time.Second,
		RetentionInterval:                    time.Minute,
		BacklogPolicyInterval:                5 * time.Second,
		FailoverSwitchDelay:                  time.Second,
		SessionTTL:                           10 * time.Second,
		OperationTimeout:                     30 * time.Second,
		MaxPendingSends:                      4096,
		MaxPendingSendBytes:                  64 << 20,
		MaxProducersPerTopic:                 10000,
		MaxConsumersPerSubscription:          10000,
		MaxSubscriptionsPerTopic:             10000,
		AllowAutoTopicCreation:               true,
		AllowAutoSubscriptionCreation:        true,
		DefaultBacklogQuotaBytes:             10 << 30,
		MaxInflightBytesPerConnection:        32 << 20,
		MaxInflightProduceBytes:              256 << 20,
		MaxPermitsPerConsumer:                10000,
		DispatcherMaxReadBytes:               5 << 20,
		MaxInflightDispatchReadBytes:         64 << 20,
		MaxBatchMessages:                     100_000,
		MaxBatchBytes:                        wire.MaxUncompressedBytes,
		MaxPendingDeliveryBytesPerConsumer:   16 << 20,
		MaxPendingDeliveryBytesPerConnection: 64 << 20,
		MaxPendingDeliveryBytes:              512 << 20,
		MaxUnackedPerConsumer:                50000,
		TailCacheBytes:                       256 << 20,
		MaxIndividualAcks:                    100000,
		DedupMaxProducers:                    10000,
		MaxOriginIncarnations:                16,
		MaxFailoverConfirmBytes:              1 << 20,
		KeepaliveTime:                        30 * time.Second,
		KeepaliveTimeout:                     10 * time.Second,
		KeepaliveMinTime:                     5 * time.Second,
		Replication:                          DefaultReplicationConfig(),
		Subscriptions:                        DefaultSubscriptionsConfig(),
		Limits:                               netguard.DefaultLimits(DefaultMaxStreamsPerConnection),
	}
}

// Validate checks the configuration; the error names the field and limit.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: config: "+format, append([]any{ErrInvalidArgument}, a...)...)
	}
	switch {
	case c.Region == "":
		return bad("region is empty")
	case c.Global == nil:
		return bad("global metadata store is nil")
	case c.Regional == nil:
		return bad("regional metadata store is nil")
	case c.Ledgers == nil:
		return bad("ledgers is nil")
	case c.GRPCAddress == "":
		return bad("grpc_address is empty")
	case c.MaxMessageBytes < 1024 || c.MaxMessageBytes > 64<<20:
		return bad("max_message_bytes %d must be in [1024, %d]", c.MaxMessageBytes, 64<<20)
	case c.RolloverEntries < 1:
		return bad("rollover_entries %d must be >= 1", c.RolloverEntries)
	case c.RolloverBytes < 1:
		return bad("rollover_bytes %d must be >= 1", c.RolloverBytes)
	case c.RolloverAge <= 0:
		return bad("rollover_age %v must be > 0", c.RolloverAge)
	case c.CursorPersistInterval <= 0 || c.CursorPersistInterval > time.Hour:
		return bad("cursor_persist_interval %v must be in (0, 1h]", c.CursorPersistInterval)
	case c.RetentionInterval <= 0:
		return bad("retention_interval %v must be > 0", c.RetentionInterval)
	case c.BacklogPolicyInterval < 0:
		return bad("backlog_policy_interval %v must be >= 0 (0: the default 5s)", c.BacklogPolicyInterval)
	case c.FailoverSwitchDelay < 0 || c.FailoverSwitchDelay > time.Minute:
		return bad("failover_switch_delay %v must be in [0, 1m]", c.FailoverSwitchDelay)
	case c.SessionTTL < 500*time.Millisecond:
		return bad("session_ttl %v must be >= 500ms", c.SessionTTL)
	case c.OperationTimeout <= 0:
		return bad("operation_timeout %v must be > 0", c.OperationTimeout)
	case c.MaxPendingSends < 1:
		return bad("max_pending_sends %d must be >= 1", c.MaxPendingSends)
	case c.MaxProducersPerTopic < 0:
		return bad("max_producers_per_topic %d must be >= 0 (0 = no limit)", c.MaxProducersPerTopic)
	case c.MaxConsumersPerSubscription < 0:
		return bad("max_consumers_per_subscription %d must be >= 0 (0 = no limit)", c.MaxConsumersPerSubscription)
	case c.DispatcherMaxReadBytes < 1:
		return bad("dispatcher_max_read_bytes %d must be >= 1", c.DispatcherMaxReadBytes)
	case c.MaxInflightDispatchReadBytes < int64(c.MaxMessageBytes):
		return bad("max_inflight_dispatch_read_bytes %d must be >= max_message_bytes %d", c.MaxInflightDispatchReadBytes, c.MaxMessageBytes)
	case c.MaxBatchMessages < 1:
		return bad("max_batch_messages %d must be >= 1", c.MaxBatchMessages)
	case c.MaxBatchBytes < 1 || c.MaxBatchBytes > wire.MaxUncompressedBytes:
		return bad("max_batch_bytes %d must be in [1, %d]", c.MaxBatchBytes, wire.MaxUncompressedBytes)
	case c.MaxTopicsPerNamespace < 0:
		return bad("max_topics_per_namespace %d must be >= 0 (0 = no limit)", c.MaxTopicsPerNamespace)
	case c.MaxSubscriptionsPerTopic < 0:
		return bad("max_subscriptions_per_topic %d must be >= 0 (0 = no limit)", c.MaxSubscriptionsPerTopic)
	case c.MaxPendingSendBytes < int64(c.MaxMessageBytes):
		return bad("max_pending_send_bytes %d must be >= max_message_bytes %d", c.MaxPendingSendBytes, c.MaxMessageBytes)
	case c.MaxInflightBytesPerConnection < int64(c.MaxMessageBytes):
		return bad("max_inflight_bytes_per_connection %d must be >= max_message_bytes %d", c.MaxInflightBytesPerConnection, c.MaxMessageBytes)
	case c.MaxInflightProduceBytes < int64(c.MaxMessageBytes):
		return bad("max_inflight_produce_bytes %d must be >= max_message_bytes %d", c.MaxInflightProduceBytes, c.MaxMessageBytes)
	case c.MaxPendingDeliveryBytesPerConsumer < 1:
		return bad("max_pending_delivery_bytes_per_consumer %d must be >= 1", c.MaxPendingDeliveryBytesPerConsumer)
	case c.MaxPendingDeliveryBytesPerConnection < c.MaxPendingDeliveryBytesPerConsumer:
		return bad("max_pending_delivery_bytes_per_connection %d must be >= max_pending_delivery_bytes_per_consumer %d", c.MaxPendingDeliveryBytesPerConnection, c.MaxPendingDeliveryBytesPerConsumer)
	case c.MaxPendingDeliveryBytes < c.MaxPendingDeliveryBytesPerConnection:
		return bad("max_pending_delivery_bytes %d must be >= max_pending_delivery_bytes_per_connection %d", c.MaxPendingDeliveryBytes, c.MaxPendingDeliveryBytesPerConnection)
	case c.MaxPermitsPerConsumer < 1:
		return bad("max_permits_per_consumer %d must be >= 1", c.MaxPermitsPerConsumer)
	case c.MaxUnackedPerConsumer < 1:
		return bad("max_unacked_per_consumer %d must be >= 1", c.MaxUnackedPerConsumer)
	case c.MaxSetAsideEntries < 0:
		return bad("max_set_aside_entries %d must be >= 0 (0 = 10000)", c.MaxSetAsideEntries)
	case c.MaxDelayedEntries < 0:
		return bad("max_delayed_entries %d must be >= 0 (0 = 100000)", c.MaxDelayedEntries)
	case c.TailCacheBytes < 0:
		return bad("tail_cache_bytes %d must be >= 0", c.TailCacheBytes)
	case c.MaxIndividualAcks < 1:
		return bad("max_individual_acks %d must be >= 1", c.MaxIndividualAcks)
	case c.DedupMaxProducers < 1 || c.DedupMaxProducers > 1000000:
		return bad("dedup_max_producers %d must be in [1, 1000000]", c.DedupMaxProducers)
	case c.MaxOriginIncarnations < 1 || c.MaxOriginIncarnations > 1000:
		return bad("max_origin_incarnations %d must be in [1, 1000]", c.MaxOriginIncarnations)
	case c.MaxFailoverConfirmBytes < 4096 || c.MaxFailoverConfirmBytes > 1<<30:
		return bad("max_failover_confirm_bytes %d must be in [4096, 1073741824]", c.MaxFailoverConfirmBytes)
	case len(c.HTTPAllowedHosts) > 64:
		return bad("http_allowed_hosts has %d names, limit 64", len(c.HTTPAllowedHosts))
	case slices.Contains(c.HTTPAllowedHosts, ""):
		return bad("http_allowed_hosts holds an empty name")
	case c.MaxPermissionGrants < 0 || c.MaxPermissionGrants > 100000:
		return bad("max_permission_grants %d must be in [0 (default %d), 100000]", c.MaxPermissionGrants, DefaultMaxPermissionGrants)
	case c.KeepaliveTime < time.Second:
		return bad("keepalive_time %v must be >= 1s", c.KeepaliveTime)
	case c.KeepaliveTimeout < time.Second:
		return bad("keepalive_timeout %v must be >= 1s", c.KeepaliveTimeout)
	case c.DefaultRetentionTime < 0 && c.DefaultRetentionTime != -time.Second:
		return bad("default_retention_time %v must be -1s (forever) or >= 0", c.DefaultRetentionTime)
	case c.DefaultBacklogQuotaBytes < -1:
		return bad("default_backlog_quota_bytes %d must be -1 (no quota) or >= 0", c.DefaultBacklogQuotaBytes)
	case c.DefaultRetentionSizeBytes < -1:
		return bad("default_retention_size_bytes %d must be -1 (unlimited) or >= 0", c.DefaultRetentionSizeBytes)
	case c.KeepaliveMinTime < 0 || c.KeepaliveMinTime > 10*time.Second:
		return bad("keepalive_min_time %v must be in [0, 10s] (clients ping every 10s by default)", c.KeepaliveMinTime)
	case c.GRPCWindowBytes != 0 && c.GRPCWindowBytes != -1 && (c.GRPCWindowBytes < 64<<10 || c.GRPCWindowBytes > 1<<30):
		return bad("grpc_window_bytes %d must be 0 (default %d), -1 (gRPC's dynamic window) or in [%d, %d]",
			c.GRPCWindowBytes, DefaultGRPCWindowBytes, 64<<10, 1<<30)
	}
	if c.UnsafeSkipOriginCheck && !c.FaultInjection {
		return bad("unsafe_skip_origin_check requires fault_injection: true (a test-only mode)")
	}
	if err := c.WAN.validate(); err != nil {
		return bad("%v", err)
	}
	if c.SecurityRuntime == nil {
		if err := c.Security.Validate(); err != nil {
			return fmt.Errorf("%w: config: broker.%v", ErrInvalidArgument, err)
		}
	}
	if err := c.Limits.Validate(); err != nil {
		return bad("%v", err)
	}
	if err := c.Replication.Validate(); err != nil {
		return err
	}
	if err := c.Subscriptions.Validate(); err != nil {
		return err
	}
	if err := validateQuorum(c.DefaultEnsembleSize, c.DefaultWriteQuorum, c.DefaultAckQuorum); err != nil {
		return bad("default quorums: %v", err)
	}
	return nil
}

// validateQuorum checks 64 >= E >= Qw >= Qa >= 1.
func validateQuorum(e, w, a int) error {
	switch {
	case e < 1 || e > 64:
		return fmt.Errorf("%w: ensemble_size %d must be in [1, 64]", ErrInvalidArgument, e)
	case w < 1 || w > e:
		return fmt.Errorf("%w: write_quorum %d must be in [1, ensemble_size=%d]", ErrInvalidArgument, w, e)
	case a < 1 || a > w:
		return fmt.Errorf("%w: ack_quorum %d must be in [1, write_quorum=%d]", ErrInvalidArgument, a, w)
	}
	return nil
}
