package drill

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MsgID names one workload message: the producer index and its sequence
// number within the drill (not the client's sequence ID: a resend keeps
// its MsgID).
type MsgID struct {
	Producer int
	Seq      int64
}

// String returns "p<producer>-<seq>".
func (id MsgID) String() string { return fmt.Sprintf("p%d-%d", id.Producer, id.Seq) }

// MarshalText makes MsgID a JSON map key ("p<producer>-<seq>").
func (id MsgID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText parses "p<producer>-<seq>".
func (id *MsgID) UnmarshalText(b []byte) error {
	p, s, ok := strings.Cut(strings.TrimPrefix(string(b), "p"), "-")
	prod, err1 := strconv.Atoi(p)
	seq, err2 := strconv.ParseInt(s, 10, 64)
	if !ok || !strings.HasPrefix(string(b), "p") || err1 != nil || err2 != nil {
		return fmt.Errorf("drill: message ID %q: want p<producer>-<seq>", b)
	}
	id.Producer, id.Seq = prod, seq
	return nil
}

// payloadPrefix starts every drill payload.
const payloadPrefix = "meridian-drill "

// Payload returns the message body for id: "meridian-drill <drill> <id>
// <send unix ns> " padded with '.' to size bytes (at least the header).
func Payload(drillID string, id MsgID, sent time.Time, size int) []byte {
	b := fmt.Appendf(nil, "%s%s %d %d %d ", payloadPrefix, drillID, id.Producer, id.Seq, sent.UnixNano())
	for len(b) < size {
		b = append(b, '.')
	}
	return b
}

// ParsePayload returns the drill ID, message ID and first send time of a
// drill payload; ok is false for anything else.
func ParsePayload(p []byte) (drillID string, id MsgID, sent time.Time, ok bool) {
	s, found := strings.CutPrefix(string(p), payloadPrefix)
	if !found {
		return "", MsgID{}, time.Time{}, false
	}
	f := strings.Fields(s)
	if len(f) < 4 {
		return "", MsgID{}, time.Time{}, false
	}
	prod, err1 := strconv.Atoi(f[1])
	seq, err2 := strconv.ParseInt(f[2], 10, 64)
	ns, err3 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || prod < 0 || seq < 0 {
		return "", MsgID{}, time.Time{}, false
	}
	return f[0], MsgID{Producer: prod, Seq: seq}, time.Unix(0, ns), true
}

// Send is one workload message from its first send to its
// acknowledgement.
type Send struct {
	ID MsgID
	// Sent is when the message was first handed to a producer.
	Sent time.Time
	// Acked is when the first acknowledgement arrived (zero: never);
	// AckRegion is the region of the broker that acknowledged it.
	Acked     time.Time
	AckRegion string
	// Attempts counts sends of this message (resends after a failure).
	Attempts int
	// Duplicate: the broker answered that it had already stored the
	// message (a resend deduplicated).
	Duplicate bool
	// Err is the last send error while not acknowledged.
	Err string
}

// Delivery is one delivery of a message to a workload consumer.
type Delivery struct {
	ID     MsgID
	At     time.Time
	Region string
}

// EventKind names an event on the drill's timeline.
type EventKind string

// Events of a drill.
const (
	// EventFault: the fault was injected (At = when the injection
	// started, Took = how long it took).
	EventFault EventKind = "fault"
	// EventSwitch: a client moved its producers and consumers to another
	// region (From, To; Took = from detection to reconnection when known).
	EventSwitch EventKind = "switch"
	// EventHeal: the fault was undone (At = when healing finished).
	EventHeal EventKind = "heal"
	// EventSwitchCommand: an operator's switch (controlled move) was
	// issued.
	EventSwitchCommand EventKind = "switch-command"
	// EventStopSend: the producers stopped; what follows is the drain.
	EventStopSend EventKind = "stop-send"
	// EventNote is anything else worth marking (Detail says what).
	EventNote EventKind = "note"
)

// Event is a marker on the timeline.
type Event struct {
	Kind   EventKind
	At     time.Time
	From   string
	To     string
	Reason string
	Took   time.Duration
}

// Sample is a periodic reading of a metric that the history itself does
// not hold (for example the acknowledgement replication lag a broker
// reports).
type Sample struct {
	At   time.Time
	Name string
	// Unit groups samples on the chart (one panel per unit).
	Unit  string
	Value float64
}

// Samples the drill reads from the source region's broker (topic stats)
// while it can reach it.
const (
	// SampleAckLag: age of the oldest acknowledgement of the workload's
	// replicated subscription not yet confirmed by the target region.
	SampleAckLag = "ack replication lag"
	// SamplePendingAcks: acknowledgements of that subscription the target
	// region has not confirmed.
	SamplePendingAcks = "unreplicated acks"
	// SampleMsgLag: age of the oldest message not yet replicated to the
	// target region.
	SampleMsgLag = "message replication lag"
)

// History is everything a drill recorded. It is plain data: Analyze reads
// it, tests build it by hand.
type History struct {
	Start time.Time
	End   time.Time
	// From is the region the workload starts in, To the one it moves to.
	From, To string
	Sends    []Send
	// Deliveries holds every delivery to the workload's consumers, in
	// order of arrival.
	Deliveries []Delivery
	// Observed is, per message, when an observer in region To first saw it
	// (a subscription of its own there, reading all the time).
	Observed map[MsgID]time.Time
	Events   []Event
	Samples  []Sample
}

// Recorder builds a History from concurrent workload callbacks. Its
// methods are safe for concurrent use.
type Recorder struct {
	mu sync.Mutex // guards h and index
	h  History
	// index maps a message to its element of h.Sends.
	index map[MsgID]int
}

// NewRecorder starts a history at start.
func NewRecorder(start time.Time, from, to string) *Recorder {
	return &Recorder{
		h:     History{Start: start, From: from, To: to, Observed: map[MsgID]time.Time{}},
		index: map[MsgID]int{},
	}
}

// Sent records a send attempt of id at t (the first one creates the
// message).
func (r *Recorder) Sent(id MsgID, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.index[id]
	if !ok {
		r.index[id] = len(r.h.Sends)
		r.h.Sends = append(r.h.Sends, Send{ID: id, Sent: t, Attempts: 1})
		return
	}
	r.h.Sends[i].Attempts++
}

// Acked records an acknowledgement of id at t from region; only the first
// counts.
func (r *Recorder) Acked(id MsgID, t time.Time, region string, duplicate bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.index[id]
	if !ok || !r.h.Sends[i].Acked.IsZero() {
		return
	}
	s := &r.h.Sends[i]
	s.Acked, s.AckRegion, s.Duplicate, s.Err = t, region, duplicate, ""
}

// Failed records a failed send attempt of id.
func (r *Recorder) Failed(id MsgID, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i, ok := r.index[id]; ok && r.h.Sends[i].Acked.IsZero() {
		r.h.Sends[i].Err = err.Error()
	}
}

// Delivered records a delivery to a workload consumer.
func (r *Recorder) Delivered(id MsgID, t time.Time, region string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Deliveries = append(r.h.Deliveries, Delivery{ID: id, At: t, Region: region})
}

// Observed records that the observer in the target region saw id at t.
func (r *Recorder) Observed(id MsgID, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.h.Observed[id]; !ok {
		r.h.Observed[id] = t
	}
}

// Event records a timeline event.
func (r *Recorder) Event(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Events = append(r.h.Events, e)
}

// Sample records a metric reading.
func (r *Recorder) Sample(s Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Samples = append(r.h.Samples, s)
}

// Counts returns how many messages were sent, acknowledged, and of those
// acknowledged how many were delivered and observed so far.
func (r *Recorder) Counts() (sent, acked, delivered, observed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := make(map[MsgID]bool, len(r.h.Deliveries))
	for _, d := range r.h.Deliveries {
		got[d.ID] = true
	}
	for _, s := range r.h.Sends {
		if s.Acked.IsZero() {
			continue
		}
		acked++
		if got[s.ID] {
			delivered++
		}
		if _, ok := r.h.Observed[s.ID]; ok {
			observed++
		}
	}
	return len(r.h.Sends), acked, delivered, observed
}

// Unacked returns the messages sent and not (yet) acknowledged whose last
// attempt failed.
func (r *Recorder) Unacked() []MsgID {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []MsgID
	for _, s := range r.h.Sends {
		if s.Acked.IsZero() && s.Err != "" {
			out = append(out, s.ID)
		}
	}
	return out
}

// History returns a copy of what was recorded, ending at end.
func (r *Recorder) History(end time.Time) History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	h.End = end
	h.Sends = slices.Clone(h.Sends)
	h.Deliveries = slices.Clone(h.Deliveries)
	h.Events = slices.Clone(h.Events)
	h.Samples = slices.Clone(h.Samples)
	h.Observed = make(map[MsgID]time.Time, len(r.h.Observed))
	for k, v := range r.h.Observed {
		h.Observed[k] = v
	}
	return h
}
