package client

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Message is what a producer sends.
type Message struct {
	// Key is the optional routing/compaction key.
	Key string
	// Payload is the message body. The producer does not copy it: do not
	// modify it until the send is resolved.
	Payload []byte
	// Properties are optional application headers.
	Properties map[string]string
	// EventTime is an optional application timestamp (zero = unset).
	EventTime time.Time
	// ReplicateTo restricts geo-replication of this message to these
	// regions (at most MaxReplicateTo; each must be one of the topic's
	// replication regions, else the broker refuses the message with
	// ErrInvalidArgument naming the region). Empty = the topic's policy.
	ReplicateTo []string
	// DisableReplication keeps the message in the region it is produced
	// in. It excludes ReplicateTo.
	DisableReplication bool
	// DeliverAt holds the message back from every subscription until this
	// time (delayed delivery; zero = at once). The time travels with the
	// stored message, so it survives broker restarts and topic moves, and
	// applies in every region the message is replicated to.
	DeliverAt time.Time
	// DeliverAfter is DeliverAt = now + DeliverAfter, taken when the
	// message is sent (ignored when DeliverAt is set).
	DeliverAfter time.Duration
	// SequenceID is an output: the producer sets it when it accepts the
	// message (before the callback runs). Do not reuse a Message for
	// another send until its send is resolved.
	SequenceID int64
	// Duplicate is an output: the producer sets it before the callback runs
	// (or Send returns) when the broker had already stored the message, as
	// happens to a message resent after a reconnect. The message is not
	// stored twice. Its MessageID is where it was first stored when the
	// broker still knows it, else UnknownMessageID.
	Duplicate bool
}

// MaxReplicateTo caps Message.ReplicateTo (the broker's limit).
const MaxReplicateTo = 16

// MaxKeyBytes caps Message.Key: the key travels as the batch key of its
// entry (Key_Shared routing), which the broker bounds to 256 bytes.
const MaxKeyBytes = 256

// validateDispatch checks a message's key and delivery time.
func (m *Message) validateDispatch() error {
	if len(m.Key) > MaxKeyBytes {
		return fmt.Errorf("%w: Key is %d bytes, limit %d (MaxKeyBytes)", ErrInvalidArgument, len(m.Key), MaxKeyBytes)
	}
	if m.DeliverAfter < 0 {
		return fmt.Errorf("%w: DeliverAfter %v must be >= 0", ErrInvalidArgument, m.DeliverAfter)
	}
	if !m.DeliverAt.IsZero() && m.DeliverAt.UnixMilli() < 0 {
		return fmt.Errorf("%w: DeliverAt %v is before 1970 (want zero or a time after the Unix epoch)", ErrInvalidArgument, m.DeliverAt)
	}
	return nil
}

// deliverAtMs resolves DeliverAt/DeliverAfter at acceptance time (Unix ms,
// 0 = at once).
func (m *Message) deliverAtMs(now time.Time) int64 {
	switch {
	case !m.DeliverAt.IsZero():
		return m.DeliverAt.UnixMilli()
	case m.DeliverAfter > 0:
		return now.Add(m.DeliverAfter).UnixMilli()
	}
	return 0
}

// validateReplication checks a message's replication options.
func (m *Message) validateReplication() error {
	if m.DisableReplication && len(m.ReplicateTo) > 0 {
		return fmt.Errorf("%w: ReplicateTo and DisableReplication are exclusive", ErrInvalidArgument)
	}
	if len(m.ReplicateTo) > MaxReplicateTo {
		return fmt.Errorf("%w: ReplicateTo has %d regions, limit %d", ErrInvalidArgument, len(m.ReplicateTo), MaxReplicateTo)
	}
	for i, r := range m.ReplicateTo {
		if r == "" {
			return fmt.Errorf("%w: ReplicateTo[%d] is empty", ErrInvalidArgument, i)
		}
	}
	return nil
}

// sameReplication reports whether a and b may share a batch: one batch is
// one entry, and replication options are per entry.
func sameReplication(a, b *Message) bool {
	return a.DisableReplication == b.DisableReplication && slices.Equal(a.ReplicateTo, b.ReplicateTo)
}

// sameBatch reports whether a and b may share a batch: one batch is one
// entry, and replication options, the key (Key_Shared routes whole
// entries by key) and the delivery time are per entry.
func sameBatch(a, b pendingMsg) bool {
	return a.deliverAt == b.deliverAt && a.msg.Key == b.msg.Key && sameReplication(a.msg, b.msg)
}

// size is the message's contribution to a batch's byte budget.
func (m *Message) size() int {
	n := len(m.Payload) + len(m.Key)
	for k, v := range m.Properties {
		n += len(k) + len(v)
	}
	return n
}

// MessageID identifies a message in one region's copy of a topic: the
// ledger, the entry (one producer batch) and the index inside the batch.
// Its text form is "ledger:entry:batchIndex".
type MessageID struct {
	LedgerID   int64
	EntryID    int64
	BatchIndex int32
	// Partition is the partition of a partitioned topic the message is in
	// (set by a partitioned producer and consumer; 0 otherwise). It is not
	// part of the text form nor of Compare: IDs compare within a partition.
	Partition int32
}

// UnknownMessageID is the ID reported for a message that the broker had
// already stored (a resend after a reconnect) when it no longer knows where.
var UnknownMessageID = MessageID{LedgerID: -1, EntryID: -1, BatchIndex: -1}

// String returns "L:E:B".
func (id MessageID) String() string {
	// strconv, not fmt: every received message gets its OriginID from here.
	b := make([]byte, 0, 48)
	b = strconv.AppendInt(b, id.LedgerID, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, id.EntryID, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(id.BatchIndex), 10)
	return string(b)
}

// Compare orders IDs: -1 if id < o, 0 if equal, +1 if id > o.
func (id MessageID) Compare(o MessageID) int {
	switch {
	case id.LedgerID != o.LedgerID:
		return cmp3(id.LedgerID, o.LedgerID)
	case id.EntryID != o.EntryID:
		return cmp3(id.EntryID, o.EntryID)
	default:
		return cmp3(int64(id.BatchIndex), int64(o.BatchIndex))
	}
}

func cmp3(a, b int64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}

// ParseMessageID parses the "L:E:B" text form (also accepts "L:E", batch 0).
func ParseMessageID(s string) (MessageID, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 2 && len(parts) != 3 {
		return MessageID{}, fmt.Errorf("%w: message ID %q (want ledger:entry:batchIndex)", ErrInvalidArgument, s)
	}
	l, err1 := strconv.ParseInt(parts[0], 10, 64)
	e, err2 := strconv.ParseInt(parts[1], 10, 64)
	var b int64
	var err3 error
	if len(parts) == 3 {
		b, err3 = strconv.ParseInt(parts[2], 10, 32)
	}
	if err1 != nil || err2 != nil || err3 != nil || l < 0 || e < 0 || b < 0 {
		return MessageID{}, fmt.Errorf("%w: message ID %q (want non-negative ledger:entry:batchIndex)", ErrInvalidArgument, s)
	}
	return MessageID{LedgerID: l, EntryID: e, BatchIndex: int32(b)}, nil
}

// ReceivedMessage is a message delivered to a consumer.
type ReceivedMessage struct {
	// ID is the message's ID; pass it to Ack or AckCumulative.
	ID MessageID
	// Key, Payload, Properties and EventTime are as the producer sent them
	// (EventTime zero when unset).
	Key        string
	Payload    []byte
	Properties map[string]string
	EventTime  time.Time
	// PublishTime is when the broker stored the batch.
	PublishTime time.Time
	// ProducerName and SequenceID identify the send.
	ProducerName string
	SequenceID   int64
	// OriginRegion is the region where the message was produced.
	OriginRegion string
	// OriginID is the message's ID in its origin region ("L:E:B"): its ID
	// for a message produced in the consumer's region, the origin position
	// for a replicated one. Together with OriginRegion it names the message
	// in every region.
	OriginID string
	// RedeliveryCount is how many times the broker delivered it before
	// (0 when the broker does not report it).
	RedeliveryCount int32
	// OriginSeq numbers the message's entry among those produced in
	// OriginRegion (1, 2, 3, ...; the same in every region; 0 when the
	// broker did not store one). The messages of one batch share it.
	// The numbers start again at 1 when the topic is deleted and written
	// again in OriginRegion, under a new OriginIncarnation: only the
	// triple (OriginRegion, OriginIncarnation, OriginSeq) never repeats.
	OriginSeq int64
	// OriginIncarnation is the origin stream OriginSeq counts in (0 for
	// entries written before incarnations existed).
	OriginIncarnation uint64
	// SchemaVersion is the topic's schema registry version the message was
	// written with (0 = none); typed consumers decode with it.
	SchemaVersion int32
}
