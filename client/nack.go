package client

import (
	"context"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Nack tells the broker that the message id could not be processed: its
// entry (the whole batch) is redelivered, with a higher redelivery count.
// It is best effort: if the stream is broken the entry comes back anyway
// after the reconnect, since it was never acknowledged.
func (co *Consumer) Nack(ctx context.Context, id MessageID) error {
	if co.part != nil {
		return co.part.nack(ctx, id)
	}
	if err := co.checkOpen(); err != nil {
		return err
	}
	gen, stale := co.ackGen(id)
	if stale {
		return nil // delivered by a region the client has left
	}
	stream, err := co.waitStream(ctx)
	if err != nil {
		return err
	}
	co.mu.Lock()
	cur := co.gen
	co.mu.Unlock()
	if cur != gen {
		return nil // the entry belongs to an older stream: it is redelivered
	}
	co.forgetDelivered(id, false)
	_ = co.sendReq(stream, &clientv1.ConsumeRequest{Kind: &clientv1.ConsumeRequest_Redeliver{Redeliver: &clientv1.Redeliver{
		MessageIds: []*clientv1.MessageId{{LedgerId: id.LedgerID, EntryId: id.EntryID}},
	}}})
	return nil
}
