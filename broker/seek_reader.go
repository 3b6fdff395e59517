package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Readers: non-durable subscriptions (Subscribe.non_durable).
//
// A reader's subscription lives only in the owning broker's memory: it is
// never written to metadata (persist and deleteCursor skip it), never
// loaded by a takeover, holds no retention and no backlog quota, and is
// removed when its consumer's stream ends. It is positioned by the
// Subscribe's start (resolved like a seek, seek.go) or its
// initial_position. A reader that reconnects (its stream broke, the topic
// moved) gets a new subscription: the client resumes it (client.Reader).

// readerNamePrefix starts the names the broker gives unnamed readers.
const readerNamePrefix = "reader-"

// newReaderName returns a fresh reader subscription name.
func newReaderName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return readerNamePrefix + hex.EncodeToString(b[:])
}

// startOf returns the start position a Subscribe asks for: its start, or
// its initial_position.
func startOf(sub *clientv1.Subscribe) *clientv1.StartPosition {
	if sub.GetStart() != nil {
		return sub.GetStart()
	}
	return &clientv1.StartPosition{Kind: &clientv1.StartPosition_Initial{Initial: sub.GetInitialPosition()}}
}

// addReader creates the reader subscription name positioned at r. A
// durable subscription of that name, or a reader with a consumer, makes it
// fail; a reader left without consumers (its stream is ending) is replaced.
func (t *topic) addReader(name string, r *seekResolution) (*subscription, error) {
	t.subCreateMu.Lock()
	defer t.subCreateMu.Unlock()
	t.mu.Lock()
	old := t.subs[name]
	if t.closing {
		t.mu.Unlock()
		return nil, ErrTopicNotOwned
	}
	t.mu.Unlock()
	if old != nil {
		if !old.nonDurable {
			return nil, fmt.Errorf("%w: subscription %s on %s is a durable subscription, not a reader", ErrAlreadyExists, name, t.name)
		}
		old.mu.Lock()
		n := len(old.consumers)
		old.mu.Unlock()
		if n > 0 {
			return nil, fmt.Errorf("%w: reader %s on %s is connected", ErrConsumerBusy, name, t.name)
		}
		t.removeReader(old)
	}
	s := newSubscription(t, name, r.floor, nil, time.Now().UnixMilli(), 0)
	s.nonDurable = true
	t.applyResolution(s, r)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closing {
		s.close()
		return nil, ErrTopicNotOwned
	}
	t.subs[name] = s
	return s, nil
}

// removeReader forgets the reader subscription s and stops it.
func (t *topic) removeReader(s *subscription) {
	t.mu.Lock()
	if t.subs[s.name] == s {
		delete(t.subs, s.name)
	}
	t.mu.Unlock()
	s.mu.Lock()
	s.deleted = true
	s.mu.Unlock()
	s.close()
}

// subscribeStart is Consume's subscription step: a reader is created at
// its start; a durable subscription is created (at its start when given)
// or joined as it is. The start is resolved before anything is created, so
// a bad start changes nothing.
func (t *topic) subscribeStart(ctx context.Context, sub *clientv1.Subscribe) (*subscription, bool, error) {
	if sub.GetNonDurable() {
		r, err := t.resolveSubscribeStart(ctx, startOf(sub))
		if err != nil {
			return nil, false, err
		}
		name := sub.GetSubscription()
		if name == "" {
			name = newReaderName()
		}
		s, err := t.addReader(name, r)
		return s, err == nil, err
	}
	create := subCreate{initial: sub.GetInitialPosition(), replicated: sub.GetReplicated(), mustExist: !t.autoSubscriptionCreation()}
	if sub.GetStart() == nil {
		return t.getOrCreateSubOpts(ctx, sub.GetSubscription(), create)
	}
	if s, err := t.subscription(sub.GetSubscription()); err == nil {
		return s, false, nil // start applies only to a new subscription
	}
	r, err := t.resolveSubscribeStart(ctx, sub.GetStart())
	if err != nil {
		return nil, false, err
	}
	// Created at earliest, then moved to the start (for a replicated
	// subscription the move is a reset shipped to every region).
	create.initial = clientv1.InitialPosition_INITIAL_POSITION_EARLIEST
	s, created, err := t.getOrCreateSubOpts(ctx, sub.GetSubscription(), create)
	if err != nil || !created {
		return s, created, err
	}
	t.applyResolution(s, r)
	if err := s.persist(ctx, true); err != nil {
		t.log.Warn("persist cursor of a new subscription at its start", "subscription", s.name, "err", err)
	}
	return s, true, nil
}

// resolveSubscribeStart resolves a Subscribe's start (resolveStart, bounded
// by seekScanTimeout).
func (t *topic) resolveSubscribeStart(ctx context.Context, sp *clientv1.StartPosition) (*seekResolution, error) {
	rctx, cancel := seekContext(ctx)
	defer cancel()
	v, floor, err := t.resolveStart(rctx, sp)
	if err != nil {
		return nil, err
	}
	_, initial := sp.GetKind().(*clientv1.StartPosition_Initial)
	return &seekResolution{vec: v, floor: floor, initial: initial}, nil
}
