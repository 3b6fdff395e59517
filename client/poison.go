package client

import (
	"context"
	"errors"
	"strconv"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
)

// Poison pills (issue 22).
//
// An entry the consumer cannot decode (its batch or compression is
// corrupt, it declares or decodes to more than MaxEntryBytes, its codec is
// unknown, or, with PoisonSchemaMismatch, its payload does not decode with
// the consumer's schema) is never handed to the application and never left
// unacknowledged, which would stall the subscription's mark-delete for
// good. Receive handles it in the consumer's order:
//   - with a DeadLetterPolicy, the entry's raw payload is written to the
//     dead-letter topic as one message (properties name the topic, entry,
//     subscription and reason), then the entry is acknowledged with
//     dead_letter and poison_reason set; if the dead-letter topic refuses it
//     (too large, invalid) it is acknowledged with its reason alone; any
//     other produce failure nacks it, so it comes back and is tried again;
//   - without one, it is acknowledged with Ack.poison_reason.
//
// The broker counts poison entries per subscription and reason (topics
// stats poison_entries, meridian_broker_poison_entries_total); the client
// counts them in meridian_client_poison_entries_total and logs each one.

// Properties of a poison entry written to a dead-letter topic, besides
// PropertyRealTopic, PropertyOriginMessageID and PropertySubscription.
const (
	// PropertyPoisonReason is why the entry did not decode: corrupt,
	// too_large, unknown_compression or schema.
	PropertyPoisonReason = "POISON_REASON"
	// PropertyPoisonError is the decoder's error text (at most 256 bytes).
	PropertyPoisonError = "POISON_ERROR"
	// PropertyPoisonCompression is the entry's compression codec; the
	// payload is the entry's bytes as stored (compressed, batched).
	PropertyPoisonCompression = "POISON_COMPRESSION"
	// PropertyPoisonNumMessages is the message count the entry declares.
	PropertyPoisonNumMessages = "POISON_NUM_MESSAGES"
	// PropertyPoisonUncompressedSize is the size the entry declares.
	PropertyPoisonUncompressedSize = "POISON_UNCOMPRESSED_SIZE"
)

// The poison reasons (Ack.poison_reason).
const (
	poisonCorrupt            = "corrupt"
	poisonTooLarge           = "too_large"
	poisonUnknownCompression = "unknown_compression"
	poisonSchema             = "schema"
)

// poisonEntry is an entry the client could not decode.
type poisonEntry struct {
	id     MessageID // the entry (BatchIndex 0)
	reason string
	err    error
	md     *clientv1.EntryMetadata // nil when the entry had none
	raw    []byte
}

// newPoison describes delivered entry m, which failed to decode with err.
func newPoison(m *clientv1.Message, err error) *poisonEntry {
	id := idFromProto(m.GetMessageId())
	id.BatchIndex = 0
	return &poisonEntry{id: id, reason: poisonReasonOf(err), err: err, md: m.GetMetadata(), raw: m.GetPayload()}
}

// poisonReasonOf names the reason of a decode error.
func poisonReasonOf(err error) string {
	switch {
	case errors.Is(err, wire.ErrTooLarge):
		return poisonTooLarge
	case errors.Is(err, wire.ErrUnknownCompression):
		return poisonUnknownCompression
	case errors.Is(err, ErrSchemaMismatch):
		return poisonSchema
	}
	return poisonCorrupt
}

// handlePoison dead-letters or acknowledges the poison entry of d (see
// above). recvMu held.
func (co *Consumer) handlePoison(ctx context.Context, d *delivery) {
	p := d.poison
	co.log.Warn("undecodable entry (poison pill)", "topic", co.opts.Topic, "entry", p.id, "reason", p.reason, "err", p.err)
	gen, stale := co.ackGen(p.id)
	if stale {
		return
	}
	ack := &clientv1.Ack{MessageIds: []*clientv1.MessageId{{LedgerId: p.id.LedgerID, EntryId: p.id.EntryID}}, PoisonReason: p.reason}
	action := "acked"
	if dl := co.opts.DeadLetter; dl != nil && co.reader == nil {
		topic := dl.dlqTopic(co.opts)
		err := co.letters.produceAll(ctx, co.c, topic, []*Message{co.poisonLetter(p)})
		switch {
		case err == nil:
			ack.DeadLetter, action = true, "dead_lettered"
		case errors.Is(err, ErrMessageTooLarge) || errors.Is(err, ErrInvalidArgument):
			co.log.Warn("the dead-letter topic refused the poison entry; it is acknowledged with its reason", "topic", topic, "entry", p.id, "err", err)
			action = "acked_dead_letter_refused"
		default:
			co.log.Warn("dead-letter produce of a poison entry failed; the entry is redelivered", "topic", topic, "entry", p.id, "err", err)
			_ = co.Nack(ctx, p.id)
			return
		}
	}
	co.forgetEntry(p.id)
	if err := co.sendAck(ctx, gen, ack); err != nil && !errors.Is(err, ErrConsumerClosed) {
		co.log.Warn("poison entry ack failed; the entry may be redelivered", "entry", p.id, "err", err)
	}
	if co.reader != nil {
		co.readerEntryDone(d) // reader.go: the origin position moves past it
	}
	co.c.metrics.poison.WithLabelValues(p.reason, action).Inc()
}

// poisonLetter is the dead-letter message of poison entry p: its raw
// bytes, with properties naming where it came from and why.
func (co *Consumer) poisonLetter(p *poisonEntry) *Message {
	msg := p.err.Error()
	if len(msg) > 256 {
		msg = msg[:256]
	}
	props := map[string]string{
		PropertyRealTopic:         co.opts.Topic,
		PropertyOriginMessageID:   p.id.String(),
		PropertySubscription:      co.opts.Subscription,
		PropertyPoisonReason:      p.reason,
		PropertyPoisonError:       msg,
		PropertyPoisonCompression: p.md.GetCompression().String(),
	}
	if p.md != nil {
		props[PropertyPoisonNumMessages] = strconv.FormatInt(int64(p.md.GetNumMessages()), 10)
		props[PropertyPoisonUncompressedSize] = strconv.FormatInt(int64(p.md.GetUncompressedSize()), 10)
	}
	return &Message{Payload: p.raw, Properties: props}
}

// poisonMessage handles one received message that does not decode with
// the consumer's schema (PoisonSchemaMismatch): with a DeadLetterPolicy it
// is written to the dead-letter topic first; then it is acknowledged. An
// error (the dead-letter produce or the ack failed) leaves it to the
// application.
func (co *Consumer) poisonMessage(ctx context.Context, m *ReceivedMessage, cause error) error {
	co.log.Warn("message does not decode with the consumer's schema (poison pill)", "topic", co.opts.Topic, "id", m.ID, "err", cause)
	action := "acked"
	if dl := co.opts.DeadLetter; dl != nil && co.reader == nil {
		lm := co.letterMessage(m)
		lm.Properties[PropertyPoisonReason] = poisonSchema
		if err := co.letters.produceAll(ctx, co.c, dl.dlqTopic(co.opts), []*Message{lm}); err != nil {
			return err
		}
		action = "dead_lettered"
	}
	if err := co.Ack(ctx, m.ID); err != nil {
		return err
	}
	co.c.metrics.poison.WithLabelValues(poisonSchema, action).Inc()
	return nil
}
