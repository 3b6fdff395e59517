package client

import (
	"fmt"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
)

// compressionToProto maps the client enum to the wire enum.
func compressionToProto(c Compression) clientv1.CompressionType {
	switch c {
	case CompressionZstd:
		return clientv1.CompressionType_COMPRESSION_TYPE_ZSTD
	case CompressionS2:
		return clientv1.CompressionType_COMPRESSION_TYPE_S2
	}
	return clientv1.CompressionType_COMPRESSION_TYPE_NONE
}

// encodeBatch serializes and compresses b's messages (internal/wire's
// Batch format); it returns the payload and its uncompressed size.
func encodeBatch(b *batch, c Compression) ([]byte, int64, error) {
	pb := &clientv1.Batch{Messages: make([]*clientv1.SingleMessage, len(b.msgs))}
	for i, pm := range b.msgs {
		sm := &clientv1.SingleMessage{Key: pm.msg.Key, Properties: pm.msg.Properties, Payload: pm.msg.Payload}
		if !pm.msg.EventTime.IsZero() {
			sm.EventTimeMs = pm.msg.EventTime.UnixMilli()
		}
		pb.Messages[i] = sm
	}
	payload, usize, err := wire.EncodeBatch(pb, compressionToProto(c))
	if err != nil {
		return nil, 0, fmt.Errorf("client: encode batch: %w", err)
	}
	return payload, usize, nil
}

// idFromProto converts a wire message ID (nil = zero ID).
func idFromProto(id *clientv1.MessageId) MessageID {
	if id == nil {
		return MessageID{}
	}
	return MessageID{LedgerID: id.GetLedgerId(), EntryID: id.GetEntryId(), BatchIndex: id.GetBatchIndex()}
}

// toProto converts a MessageID to its wire form.
func (id MessageID) toProto() *clientv1.MessageId {
	return &clientv1.MessageId{LedgerId: id.LedgerID, EntryId: id.EntryID, BatchIndex: id.BatchIndex}
}

// msTime converts Unix milliseconds to a time (0 = zero time).
func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// decodeEntryMessage splits one delivered entry into its messages; an
// entry that declares or decodes to more than limit bytes is
// wire.ErrTooLarge.
func decodeEntryMessage(m *clientv1.Message, limit int64) ([]*ReceivedMessage, error) {
	md := m.GetMetadata()
	if md == nil {
		return nil, fmt.Errorf("%w: client: delivered entry %v has no metadata", wire.ErrCorrupt, idFromProto(m.GetMessageId()))
	}
	b, err := wire.DecodeBatchLimit(md, m.GetPayload(), limit)
	if err != nil {
		return nil, fmt.Errorf("client: decode entry %v: %w", idFromProto(m.GetMessageId()), err)
	}
	base := idFromProto(m.GetMessageId())
	pub := msTime(md.GetPublishTimeMs())
	if pub.IsZero() {
		pub = msTime(md.GetBrokerPublishTimeMs())
	}
	out := make([]*ReceivedMessage, len(b.Messages))
	// One allocation for the entry's messages (a message kept alive keeps
	// its batch-mates' structs, not their payloads, alive).
	all := make([]ReceivedMessage, len(b.Messages))
	for i, sm := range b.Messages {
		out[i] = &all[i]
		all[i] = ReceivedMessage{
			ID:                MessageID{LedgerID: base.LedgerID, EntryID: base.EntryID, BatchIndex: int32(i)},
			Key:               sm.GetKey(),
			Payload:           sm.GetPayload(),
			Properties:        sm.GetProperties(),
			EventTime:         msTime(sm.GetEventTimeMs()),
			PublishTime:       pub,
			ProducerName:      md.GetProducerName(),
			SequenceID:        md.GetSequenceId() + int64(i),
			OriginRegion:      md.GetOriginRegion(),
			OriginID:          originID(md, base, i),
			RedeliveryCount:   m.GetRedeliveryCount(),
			OriginSeq:         md.GetOriginSeq(),
			OriginIncarnation: md.GetOriginIncarnation(),
			SchemaVersion:     md.GetSchemaVersion(),
		}
	}
	return out, nil
}

// originID is message i's ID in its origin region: the origin position
// for a replicated entry, else its own position.
func originID(md *clientv1.EntryMetadata, id MessageID, i int) string {
	if md.GetReplicated() {
		return MessageID{LedgerID: md.GetOriginLedgerId(), EntryID: md.GetOriginEntryId(), BatchIndex: int32(i)}.String()
	}
	return MessageID{LedgerID: id.LedgerID, EntryID: id.EntryID, BatchIndex: int32(i)}.String()
}
