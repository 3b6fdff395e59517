// Package check holds the history a chaos run records and the checkers
// that judge it: lost, unexpected, duplicated, order, divergence, stuck
// and completeness. Checkers are pure functions of a History, so a failing run can be
// re-checked offline from its history.jsonl (`meridian chaos check`).
package check

import "time"

// Kind is what one history record describes.
type Kind string

// Record kinds. Invocations (send) and their completions (ack, fail,
// timeout) are separate records, as in a Jepsen history: a send whose
// completion is fail or timeout may still have been stored.
const (
	// KindRun opens a history: the run's ID, seed, regions, start time and
	// the options the checkers need (Run is set).
	KindRun Kind = "run"
	// KindSend is an invocation: a producer starts sending one message.
	KindSend Kind = "send"
	// KindAck completes a send: the broker acknowledged it (MsgID set).
	KindAck Kind = "ack"
	// KindFail completes a send with a definite error (not stored).
	KindFail Kind = "fail"
	// KindTimeout completes a send with an indefinite outcome (may or may
	// not be stored).
	KindTimeout Kind = "timeout"
	// KindDeliver is one message received by a consumer of a subscription.
	KindDeliver Kind = "deliver"
	// KindRead is one message found by the final read-back of a region's
	// topic (a reader from earliest after the heal and the quiet period).
	KindRead Kind = "read"
	// KindFaultStart and KindFaultEnd bracket one fault (Fault set).
	KindFaultStart Kind = "fault-start"
	KindFaultEnd   Kind = "fault-end"
	// KindSample is a periodic measurement (Sample set): throughput,
	// replication lag, backlog, errors.
	KindSample Kind = "sample"
	// KindPhase marks a phase of the run: "faults", "heal", "quiet",
	// "readback", "done" (Phase set), or the end of one topic's complete
	// read-back in one region (PhaseReadBackComplete, Region and Topic
	// set).
	KindPhase Kind = "phase"
	// KindOp is an operator action the runner performed through the
	// admin API (Op set), recorded when it completed: what the checkers
	// must know of it (a topic deleted in a region, a subscription created
	// at a position, a cursor moved on request).
	KindOp Kind = "op"
)

// Operator actions (Op.Action).
const (
	// OpDeleteTopic: the topic was deleted (--force) in Op.Region: its
	// log and subscriptions there are gone.
	OpDeleteTopic = "delete-topic"
	// OpCreateTopic: the topic was created (again) in Op.Region.
	OpCreateTopic = "create-topic"
	// OpUnload: the topic was unloaded in Op.Region.
	OpUnload = "unload"
	// OpSetReplication: the namespace's (Op.Topic empty) or the topic's
	// replication regions were set to Op.Regions.
	OpSetReplication = "set-replication"
	// OpCreateSubscription: subscription Op.Sub (Op.Replicated) was
	// created in Op.Region at Op.Position ("earliest" or "latest"), by
	// the admin API or by a consumer's subscribe.
	OpCreateSubscription = "create-subscription"
	// OpSeek: subscription Op.Sub was reset in Op.Region to Op.Position
	// ("earliest", "latest"): an explicit request; a reset to latest
	// skips what was sent before it.
	OpSeek = "seek"
	// OpSkip: messages of subscription Op.Sub were skipped on request
	// (skip, clear-backlog) in Op.Region: what was sent before it may be
	// skipped.
	OpSkip = "skip"
	// OpFailoverTarget: failover group Op.Group's target was set to
	// Op.Region.
	OpFailoverTarget = "failover-target"
)

// Op is one operator action of a KindOp record.
type Op struct {
	Action string `json:"action"`
	// Region is where it was done (for a failover target: the target).
	Region     string   `json:"region,omitempty"`
	Topic      string   `json:"topic,omitempty"`
	Sub        string   `json:"sub,omitempty"`
	Replicated bool     `json:"replicated,omitempty"`
	Position   string   `json:"position,omitempty"`
	Regions    []string `json:"regions,omitempty"`
	Group      string   `json:"group,omitempty"`
	// Fault is the ID of the fault that did it (0: the runner's setup).
	Fault int `json:"fault,omitempty"`
	// Started is when the action was requested (the record's T is when it
	// completed).
	Started time.Time `json:"started"`
	// Err is set when the action failed (then it did nothing the
	// checkers count on, except a delete, which may have happened).
	Err string `json:"err,omitempty"`
}

// PhaseReadBackComplete is the phase record that ends a complete
// read-back: every entry the topic had stored in Region when the read
// began was read. Without it, the region's read-back may be partial.
const PhaseReadBackComplete = "readback-complete"

// Record is one line of history.jsonl. Only the fields of its Kind are set.
type Record struct {
	T    time.Time `json:"t"`
	Kind Kind      `json:"kind"`

	// Region is where it happened: the producer's, consumer's or reader's
	// region at that moment (it changes on client failover).
	Region string `json:"region,omitempty"`

	// Message identity (send, ack, fail, timeout, deliver, read): the
	// region the producer was created in, its name (unique in the run) and
	// its sequence (1, 2, ...). A message is (Origin, Producer, Seq).
	Origin   string `json:"origin,omitempty"`
	Producer string `json:"producer,omitempty"`
	Seq      int64  `json:"seq,omitempty"`
	Key      string `json:"key,omitempty"`
	Topic    string `json:"topic,omitempty"`
	// Dedup is set on sends of producers with deduplication on.
	Dedup bool `json:"dedup,omitempty"`
	// MsgID is the broker's message ID (ack, deliver, read).
	MsgID string `json:"msg_id,omitempty"`
	// Err is the error of a fail or timeout.
	Err string `json:"err,omitempty"`

	// Subscription of a delivery: its name, type (exclusive, failover,
	// shared, key_shared), whether it is replicated, and the consumer.
	Sub        string `json:"sub,omitempty"`
	SubType    string `json:"sub_type,omitempty"`
	Replicated bool   `json:"replicated,omitempty"`
	Consumer   string `json:"consumer,omitempty"`
	// Redelivery is the broker's redelivery count of a delivery, if known.
	Redelivery int `json:"redelivery,omitempty"`
	// Unparsed is set on a deliver or read whose payload is not one of
	// this run's (Payload holds a prefix of it).
	Unparsed bool   `json:"unparsed,omitempty"`
	Payload  string `json:"payload,omitempty"`

	Fault  *Fault  `json:"fault,omitempty"`
	Sample *Sample `json:"sample,omitempty"`
	Phase  string  `json:"phase,omitempty"`
	Run    *Run    `json:"run,omitempty"`
	Op     *Op     `json:"op,omitempty"`

	// StoredOrigin and OriginID (deliver, read; optional) name the stored
	// copy: the region whose log stored it first (the client's
	// ReceivedMessage.OriginRegion, which differs from Origin when the
	// producer had failed over) and its ID there (ReceivedMessage.OriginID).
	// When set, the checkers tell a replicated copy stored twice (the same
	// copy twice in one region) from a resend (two copies), and check order
	// per storage origin, timed-out messages included.
	StoredOrigin string `json:"stored_origin,omitempty"`
	OriginID     string `json:"origin_id,omitempty"`
}

// Run describes the run a history belongs to.
type Run struct {
	ID       string   `json:"id"`
	Seed     int64    `json:"seed"`
	Regions  []string `json:"regions"`
	Faults   []string `json:"faults,omitempty"`
	Scenario string   `json:"scenario,omitempty"`
	// Topics are the run's topics, all replicated to every region.
	Topics []string `json:"topics"`
	// Subscriptions are the subscriptions the workload consumes, per
	// region.
	Subscriptions []Subscription `json:"subscriptions"`
	// Quiet is how long the run waited after the heal before the
	// read-back and the checks.
	Quiet time.Duration `json:"quiet"`
}

// Subscription is one subscription the workload consumes in Region.
type Subscription struct {
	Region     string `json:"region"`
	Topic      string `json:"topic"`
	Name       string `json:"name"`
	Type       string `json:"type"`
	Replicated bool   `json:"replicated"`
}

// Fault is one injected fault. Start and end records carry the same ID.
type Fault struct {
	ID int `json:"id"`
	// Kind is the catalogue name ("kill", "pause", "partition", ...).
	Kind string `json:"kind"`
	// Targets names what it hit: processes ("a/broker-0"), regions ("a")
	// or links ("a/broker-0->a/bookie-1", "a->b").
	Targets []string `json:"targets"`
	// Detail says how ("SIGKILL", "latency 200ms jitter 50ms", ...).
	Detail string `json:"detail,omitempty"`
	// Err is set when injecting or healing failed.
	Err string `json:"err,omitempty"`
}

// Sample is one measurement at T. Name is a series name, Region the
// region it was measured in, Labels narrow it (remote, subscription).
//
// Series the runner records: "sent_per_s", "acked_per_s",
// "delivered_per_s", "errors_per_s" (per region), "repl_backlog_msgs"
// (per region and remote, label "remote"), "sub_backlog_msgs" (per region
// and subscription, label "sub"). The stuck checker reads the last two.
type Sample struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Value  float64           `json:"value"`
}

// History is a whole run: its records in the order they were written.
type History struct {
	Records []Record
}
