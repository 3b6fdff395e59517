package client

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// OriginPosition names a message by where it was first produced: its
// origin region and its position (ledger:entry) in that region's copy of
// the topic. It names the same message in every region
// (ReceivedMessage.OriginRegion and OriginID).
type OriginPosition struct {
	Region   string
	LedgerID int64
	EntryID  int64
}

type startKind uint8

const (
	startInitial startKind = iota
	startMessageID
	startTime
	startOrigin
)

// StartPosition says where a reader, a new subscription or a seek starts:
// the next message delivered is the one named (message ID, origin
// position) or the first one published at or after a time, or the oldest
// retained (earliest) or the next one published (latest). The zero value
// is latest.
//
// Time and origin positions are resolved per origin region by the broker,
// so they select the same messages in every region: for the origin of the
// named message, that message and every later one; for the other origins,
// the messages their origin broker stamped at or after the named one (or
// the time). A message ID is a position in the region the client is
// connected to; it starts at that whole entry (its batch index is
// ignored), then per origin like an origin position.
type StartPosition struct {
	kind    startKind
	initial InitialPosition
	id      MessageID
	timeMs  int64
	origin  OriginPosition
}

// StartEarliest starts at the oldest retained message.
func StartEarliest() StartPosition { return StartPosition{kind: startInitial, initial: Earliest} }

// StartLatest starts after the last message stored so far.
func StartLatest() StartPosition { return StartPosition{kind: startInitial, initial: Latest} }

// StartAtMessageID starts at the entry holding id (in this region).
func StartAtMessageID(id MessageID) StartPosition { return StartPosition{kind: startMessageID, id: id} }

// StartAtTime starts at the first message published at or after t (per
// origin region, by its origin broker's clock; millisecond precision).
func StartAtTime(t time.Time) StartPosition {
	return StartPosition{kind: startTime, timeMs: t.UnixMilli()}
}

// StartAtOrigin starts at the message produced in o.Region at
// o.LedgerID:o.EntryID (and, for other origins, at what they published
// from then on).
func StartAtOrigin(o OriginPosition) StartPosition {
	return StartPosition{kind: startOrigin, origin: o}
}

// String renders p as ParseStartPosition reads it.
func (p StartPosition) String() string {
	switch p.kind {
	case startMessageID:
		return fmt.Sprintf("%d:%d", p.id.LedgerID, p.id.EntryID)
	case startTime:
		return time.UnixMilli(p.timeMs).UTC().Format(time.RFC3339Nano)
	case startOrigin:
		return fmt.Sprintf("origin:%s:%d:%d", p.origin.Region, p.origin.LedgerID, p.origin.EntryID)
	}
	if p.initial == Earliest {
		return "earliest"
	}
	return "latest"
}

// validate reports the first invalid part of p; field names it.
func (p StartPosition) validate(field string) error {
	switch p.kind {
	case startInitial:
		if p.initial != Latest && p.initial != Earliest {
			return fmt.Errorf("%w: %s: initial position %d unknown (want Earliest or Latest)", ErrInvalidArgument, field, int(p.initial))
		}
	case startMessageID:
		if p.id.LedgerID < 0 || p.id.EntryID < 0 {
			return fmt.Errorf("%w: %s: message ID %d:%d must be non-negative", ErrInvalidArgument, field, p.id.LedgerID, p.id.EntryID)
		}
	case startTime:
		if p.timeMs < 0 {
			return fmt.Errorf("%w: %s: time %d ms is before 1970", ErrInvalidArgument, field, p.timeMs)
		}
	case startOrigin:
		if p.origin.Region == "" || len(p.origin.Region) > maxNameLen {
			return fmt.Errorf("%w: %s: origin region %q must be 1 to %d bytes", ErrInvalidArgument, field, p.origin.Region, maxNameLen)
		}
		if p.origin.LedgerID < 0 || p.origin.EntryID < 0 {
			return fmt.Errorf("%w: %s: origin position %d:%d must be non-negative", ErrInvalidArgument, field, p.origin.LedgerID, p.origin.EntryID)
		}
	default:
		return fmt.Errorf("%w: %s: unknown start position", ErrInvalidArgument, field)
	}
	return nil
}

func (p StartPosition) toProto() *clientv1.StartPosition {
	switch p.kind {
	case startMessageID:
		return &clientv1.StartPosition{Kind: &clientv1.StartPosition_MessageId{MessageId: &clientv1.MessageId{LedgerId: p.id.LedgerID, EntryId: p.id.EntryID}}}
	case startTime:
		return &clientv1.StartPosition{Kind: &clientv1.StartPosition_PublishTimeMs{PublishTimeMs: p.timeMs}}
	case startOrigin:
		return &clientv1.StartPosition{Kind: &clientv1.StartPosition_Origin{Origin: &clientv1.OriginPosition{
			Region: p.origin.Region, LedgerId: p.origin.LedgerID, EntryId: p.origin.EntryID}}}
	}
	return &clientv1.StartPosition{Kind: &clientv1.StartPosition_Initial{Initial: positionToProto(p.initial)}}
}

// ParseStartPosition parses a start position:
//
//	earliest | latest
//	L:E[:B]                 a message ID in the region connected to
//	origin:REGION:L:E       an origin position
//	2024-05-01T10:00:00Z    an RFC 3339 time
//	-10m                    a time relative to now (a negative Go duration)
//	@1714557600000          a Unix time in milliseconds
func ParseStartPosition(s string, now time.Time) (StartPosition, error) {
	const want = "want earliest, latest, L:E, origin:REGION:L:E, an RFC 3339 time, -DURATION or @UNIX_MS"
	switch {
	case s == "earliest":
		return StartEarliest(), nil
	case s == "latest":
		return StartLatest(), nil
	case strings.HasPrefix(s, "origin:"):
		parts := strings.Split(s, ":")
		if len(parts) != 4 || parts[1] == "" {
			return StartPosition{}, fmt.Errorf("%w: start position %q: want origin:REGION:LEDGER:ENTRY", ErrInvalidArgument, s)
		}
		l, err1 := strconv.ParseInt(parts[2], 10, 64)
		e, err2 := strconv.ParseInt(parts[3], 10, 64)
		if err1 != nil || err2 != nil || l < 0 || e < 0 {
			return StartPosition{}, fmt.Errorf("%w: start position %q: LEDGER and ENTRY must be non-negative integers (origin:REGION:LEDGER:ENTRY)", ErrInvalidArgument, s)
		}
		p := StartAtOrigin(OriginPosition{Region: parts[1], LedgerID: l, EntryID: e})
		return p, p.validate("start position")
	case strings.HasPrefix(s, "@"):
		ms, err := strconv.ParseInt(s[1:], 10, 64)
		if err != nil || ms < 0 {
			return StartPosition{}, fmt.Errorf("%w: start position %q: want @UNIX_MS >= 0", ErrInvalidArgument, s)
		}
		return StartPosition{kind: startTime, timeMs: ms}, nil
	case strings.HasPrefix(s, "-"):
		d, err := time.ParseDuration(s)
		if err != nil {
			return StartPosition{}, fmt.Errorf("%w: start position %q: a relative time is a negative Go duration such as -10m or -1h30m", ErrInvalidArgument, s)
		}
		return StartAtTime(now.Add(d)), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return StartAtTime(t), nil
	}
	if n := strings.Count(s, ":"); n >= 1 && n <= 2 && !strings.ContainsAny(s, "TZ+") {
		id, err := ParseMessageID(s)
		if err != nil {
			return StartPosition{}, fmt.Errorf("%w: start position %q: a message ID is LEDGER:ENTRY[:BATCH] with non-negative integers", ErrInvalidArgument, s)
		}
		return StartAtMessageID(id), nil
	}
	return StartPosition{}, fmt.Errorf("%w: start position %q: %s", ErrInvalidArgument, s, want)
}

// ResetSubscriptionTo moves a subscription's cursor to sp, resolved per
// origin region like a Seek (every consumer keeps its stream; messages
// from the new position follow). On a replicated subscription the reset
// applies in every region. An origin position this region does not hold
// fails with ErrNotFound naming it.
func (a *Admin) ResetSubscriptionTo(ctx context.Context, topic, sub string, sp StartPosition) error {
	if err := sp.validate("position"); err != nil {
		return err
	}
	req := &clientv1.ResetSubscriptionRequest{Topic: topic, Subscription: sub}
	switch p := sp.toProto().GetKind().(type) {
	case *clientv1.StartPosition_MessageId:
		req.Position = &clientv1.ResetSubscriptionRequest_MessageId{MessageId: p.MessageId}
	case *clientv1.StartPosition_PublishTimeMs:
		req.Position = &clientv1.ResetSubscriptionRequest_PublishTimeMs{PublishTimeMs: p.PublishTimeMs}
	case *clientv1.StartPosition_Origin:
		req.Position = &clientv1.ResetSubscriptionRequest_OriginPosition{OriginPosition: p.Origin}
	case *clientv1.StartPosition_Initial:
		req.Position = &clientv1.ResetSubscriptionRequest_InitialPosition{InitialPosition: p.Initial}
	}
	return write(ctx, a, "reset subscription "+sub+" to "+sp.String(), func(ctx context.Context) error {
		_, err := a.api.ResetSubscription(ctx, req)
		return err
	})
}

// IsTime reports whether p is a time position; IsMessageID and IsOrigin
// likewise (for tools that accept only some kinds).
func (p StartPosition) IsTime() bool { return p.kind == startTime }

// IsMessageID reports whether p is a message-ID position.
func (p StartPosition) IsMessageID() bool { return p.kind == startMessageID }

// IsOrigin reports whether p is an origin position.
func (p StartPosition) IsOrigin() bool { return p.kind == startOrigin }

// Initial returns the initial position of an earliest/latest position
// (ok false for the other kinds).
func (p StartPosition) Initial() (InitialPosition, bool) { return p.initial, p.kind == startInitial }
