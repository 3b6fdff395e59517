package broker

import (
	"context"
	"errors"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/metadata"
)

// SenderForTesting drives a subscription sender of a topic loaded on a
// broker by hand, without a stream: Collect builds the next request as a
// flush does, Confirm answers it.
type SenderForTesting struct {
	x     *subSender
	items []sentItem
}

// NewSenderForTesting returns a sender of the topic loaded on s towards
// region remote (never started: nothing is dialed).
func NewSenderForTesting(s *Server, topic, remote string) (*SenderForTesting, error) {
	t := loadedTopicForTesting(s, topic)
	if t == nil {
		return nil, ErrNotFound
	}
	return &SenderForTesting{x: newSubSender(s.repl, t, remote)}, nil
}

// Collect returns the updates of the next request (none: nothing to ship).
func (f *SenderForTesting) Collect() []*clientv1.SubscriptionUpdate {
	items, ups := f.x.collect()
	f.items = items
	return ups
}

// Confirm answers the last collected request: applied (errMsg "") or
// refused.
func (f *SenderForTesting) Confirm(errMsg string) {
	var e *clientv1.Error
	if errMsg != "" {
		e = &clientv1.Error{Message: errMsg}
	}
	f.x.confirm(f.items, e)
	f.items = nil
}

// CursorRecordForTesting returns the stored cursor record of a
// subscription (ErrNotFound without one).
func CursorRecordForTesting(s *Server, topic, sub string) ([]byte, error) {
	kv, err := s.cfg.Regional.Get(context.Background(), cursorPrefix+topic+"/"+sub, metadata.ReadOptions{})
	if errors.Is(err, metadata.ErrNotFound) {
		return nil, ErrNotFound
	}
	return kv.Value, err
}

// JoinVectorForTesting joins a received vector (wire form, not
// validated) into a subscription's cover, as applying an update of the
// same reset epoch does.
func JoinVectorForTesting(s *Server, topic, sub string, v *clientv1.AckVector) error {
	x, err := subForTesting(s, topic, sub)
	if err != nil {
		return err
	}
	w, err := ackVectorFromProtoLim("vector", v, noVecLimits)
	if err != nil {
		return err
	}
	x.joinCover(w)
	return nil
}

// VectorProtoForTesting returns a subscription's whole vector in wire
// form (nil without one).
func VectorProtoForTesting(s *Server, topic, sub string) (*clientv1.AckVector, error) {
	x, err := subForTesting(s, topic, sub)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cov.v == nil {
		return nil, nil
	}
	return x.cov.v.toProto(), nil
}
