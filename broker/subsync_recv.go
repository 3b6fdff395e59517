package broker

import (
	"context"
	"errors"
	"fmt"
	"io"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"google.golang.org/grpc"
)

// Replicated subscriptions: receiving.
//
// The owner of the topic applies each SubscriptionUpdate in memory before
// answering (the cursors persist as usual):
//
//   - an unknown subscription is created: replicated, with the same type,
//     at the earliest entry with the received vector as its cover (not at
//     the latest: the vector decides what is acknowledged);
//   - reset epochs: a higher (epoch, region) than the subscription's
//     replaces its vector (seekVector); an equal one is joined; a lower one
//     is ignored (answered ok);
//   - deleted deletes the local subscription (refused while it has
//     consumers: the error goes back and the sender retries later), and is
//     relayed to the other regions.

// ReplicateSubscriptions implements the acknowledgement stream of one
// topic's replicated subscriptions (see replication.proto).
func (rs *replicationService) ReplicateSubscriptions(stream grpc.BidiStreamingServer[clientv1.SubscriptionSyncRequest, clientv1.SubscriptionSyncResponse]) error {
	b := rs.b
	ctx := stream.Context()
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	open := req.GetOpen()
	if open == nil {
		return GRPCError(fmt.Errorf("%w: the first subscription sync request must be open", ErrInvalidArgument))
	}
	t, source, err := b.openReplStream(ctx, open)
	if err != nil {
		return GRPCError(err)
	}
	log := t.log.With("source_region", source)
	log.Debug("subscription sync stream opened")
	if err := stream.Send(&clientv1.SubscriptionSyncResponse{Kind: &clientv1.SubscriptionSyncResponse_Opened{Opened: &clientv1.SubscriptionSyncOpened{}}}); err != nil {
		return err
	}
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		ups := r.GetUpdates()
		if ups == nil {
			return GRPCError(fmt.Errorf("%w: after open, subscription sync requests must be updates", ErrInvalidArgument))
		}
		if t.stopped() {
			return GRPCError(&notOwnedError{})
		}
		var first error
		// Security on: the regions an update may name (replauth.go).
		set, serr := b.replSet(ctx, t.name)
		for i, u := range ups.GetUpdates() {
			field := fmt.Sprintf("updates[%d]", i)
			err := serr
			if err == nil {
				err = t.applySubUpdateIn(ctx, source, field, u, set)
			}
			if err != nil {
				log.Warn("subscription update not applied", "subscription", u.GetSubscription(), "err", err)
				if first == nil {
					first = err
				}
			}
		}
		if err := stream.Send(&clientv1.SubscriptionSyncResponse{Kind: &clientv1.SubscriptionSyncResponse_Ack{Ack: &clientv1.SubscriptionSyncAck{
			RequestId: ups.GetRequestId(), Error: ToError(first)}}}); err != nil {
			return err
		}
	}
}

// applySubUpdate applies one received update (field names it in errors).
func (t *topic) applySubUpdate(ctx context.Context, source, field string, u *clientv1.SubscriptionUpdate) error {
	return t.applySubUpdateIn(ctx, source, field, u, nil)
}

// applySubUpdateIn is applySubUpdate refusing, when set is not nil
// (security on), an update naming regions outside the replication set
// set; nothing of it is applied then.
func (t *topic) applySubUpdateIn(ctx context.Context, source, field string, u *clientv1.SubscriptionUpdate, set []string) error {
	name := u.GetSubscription()
	if err := ValidateName(field+".subscription", name); err != nil {
		return err
	}
	if isReplName(name) {
		return fmt.Errorf("%w: %s.subscription %q: names starting with %q are the replicators' cursors", ErrInvalidArgument, field, name, ReplicatorCursorPrefix)
	}
	if _, ok := clientv1.SubscriptionType_name[int32(u.GetType())]; !ok {
		return fmt.Errorf("%w: %s.type %d is not EXCLUSIVE, SHARED or FAILOVER", ErrInvalidArgument, field, u.GetType())
	}
	if u.GetResetEpoch() < 0 {
		return fmt.Errorf("%w: %s.reset_epoch %d must be >= 0", ErrInvalidArgument, field, u.GetResetEpoch())
	}
	v, err := ackVectorFromProtoLim(field+".vector", u.GetVector(), t.b.vlim)
	if err != nil {
		return err
	}
	if err := checkSubUpdateRegions(set, t.name, field, v, u.GetResetRegion()); err != nil {
		return err
	}
	if u.GetDeleted() {
		return t.applySubDelete(ctx, name, u.GetType())
	}
	if t.subsync.isTomb(name) {
		return nil // deleted here; the deletion is on its way to the sender
	}
	epoch, region := u.GetResetEpoch(), u.GetResetRegion()
	s, err := t.subscription(name)
	if errors.Is(err, ErrNotFound) {
		var created bool
		s, created, err = t.getOrCreateSubOpts(ctx, name, subCreate{fromRemote: true, cover: v, epoch: epoch, region: region, typ: u.GetType()})
		if err != nil {
			return err
		}
		if created {
			t.log.Info("replicated subscription created from a remote region", "subscription", name, "source_region", source, "type", u.GetType())
			t.noteReceived(source, name, v, epoch, region)
			t.subsync.notify() // relay to the other regions
			return nil
		}
	} else if err != nil {
		return err
	}
	changed := s.applyRemote(v, epoch, region, u.GetType())
	if changed >= 0 {
		t.noteReceived(source, name, v, epoch, region)
	}
	if changed > 0 {
		t.subsync.notify()
	}
	return nil
}

// noteReceived tells the sender to source what it has of subscription name.
func (t *topic) noteReceived(source, name string, v ackVector, epoch int64, region string) {
	if x := t.subsync.sender(source); x != nil {
		x.noteReceived(name, v, epoch, region)
	}
}

// applyRemote applies a vector received from another region by the epoch
// rules; it returns 1 when the subscription's vector changed, 0 when it
// was applied without change, -1 when ignored (an older reset epoch).
func (s *subscription) applyRemote(v ackVector, epoch int64, region string, typ clientv1.SubscriptionType) int {
	if s.nonDurable {
		return -1 // a reader (seek_reader.go) of the same name is never made replicated
	}
	s.mu.Lock()
	if !s.cov.replicated {
		// A local subscription of the same name: it joins the replicated
		// one. Its own progress is translated from the start.
		s.cov.replicated = true
		if s.cov.v == nil {
			s.cov.v = ackVector{}
		}
		ml := s.t.ml
		ml.mu.Lock()
		s.cov.vfront = ml.beforeFirstLocked()
		ml.mu.Unlock()
		for p := range s.acked {
			s.cov.noteAck(p)
		}
		for p := range s.batchAcked {
			s.cov.noteBatch(p)
		}
		s.cov.due = true
		s.dirty = true
	}
	if len(s.consumers) == 0 {
		s.cov.typ = typ
	}
	c := cmpEpoch(epoch, region, s.cov.epoch, s.cov.region)
	s.mu.Unlock()
	switch {
	case c > 0:
		s.t.ml.mu.Lock()
		floor := s.t.ml.beforeFirstLocked()
		s.t.ml.mu.Unlock()
		s.seekVectorEpoch(v, floor, epoch, region)
		s.t.log.Info("replicated subscription reset by a remote region", "subscription", s.name, "reset_epoch", epoch, "reset_region", region)
		return 1
	case c == 0:
		if s.joinCover(v) {
			return 1
		}
		return 0
	}
	return -1
}

// applySubDelete deletes a replicated subscription on a remote's request.
func (t *topic) applySubDelete(ctx context.Context, name string, typ clientv1.SubscriptionType) error {
	s, err := t.subscription(name)
	if errors.Is(err, ErrNotFound) {
		if !t.subsync.isTomb(name) {
			t.subsync.addTomb(name, typ) // relay it
		}
		return nil
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	repl := s.cov.replicated
	s.mu.Unlock()
	if !repl {
		return nil // a local subscription of the same name: not ours to delete
	}
	if err := t.deleteSub(ctx, name, false); err != nil {
		return err
	}
	t.log.Info("replicated subscription deleted by a remote region", "subscription", name)
	return nil
}

// isReplicated reports whether s is a replicated subscription.
func (s *subscription) isReplicated() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cov.replicated
}
