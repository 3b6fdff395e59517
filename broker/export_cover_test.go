package broker

import (
	"context"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// coverForTesting builds a vector of this region's own entries of t (its
// own origin stream).
func coverForTesting(s *Server, t *topic, ranges [][2]int64) ackVector {
	v := ackVector{}
	key := originStreamKey(s.cfg.Region, t.ml.ownIncarnation())
	for _, r := range ranges {
		v.add(key, r[0], r[1])
	}
	return v
}

// OwnStreamForTesting returns the origin stream key (originstream.go) of
// s's own entries of the loaded topic (the region alone if not loaded).
func OwnStreamForTesting(s *Server, topic string) string {
	t := loadedTopicForTesting(s, topic)
	if t == nil {
		return s.cfg.Region
	}
	return originStreamKey(s.cfg.Region, t.ml.ownIncarnation())
}

func subForTesting(s *Server, topic, sub string) (*subscription, error) {
	t := loadedTopicForTesting(s, topic)
	if t == nil {
		return nil, ErrNotFound
	}
	return t.subscription(sub)
}

// SeekVectorForTesting seeks a subscription of a topic loaded on s to a
// vector of s's own region's origin_seq ranges (floor: before the first
// entry).
func SeekVectorForTesting(s *Server, topic, sub string, ranges [][2]int64) error {
	x, err := subForTesting(s, topic, sub)
	if err != nil {
		return err
	}
	x.t.ml.mu.Lock()
	floor := x.t.ml.beforeFirstLocked()
	x.t.ml.mu.Unlock()
	x.seekVector(coverForTesting(s, x.t, ranges), floor)
	return nil
}

// JoinCoverForTesting adds own-region ranges to a subscription's cover
// (as a vector received from another region would).
func JoinCoverForTesting(s *Server, topic, sub string, ranges [][2]int64) error {
	x, err := subForTesting(s, topic, sub)
	if err != nil {
		return err
	}
	x.joinCover(coverForTesting(s, x.t, ranges))
	return nil
}

// VectorForTesting returns a subscription's cover vector as origin ->
// [mark-delete, then ranges as first,last pairs], and whether it is
// replicated.
func VectorForTesting(s *Server, topic, sub string) (map[string][]int64, bool, error) {
	x, err := subForTesting(s, topic, sub)
	if err != nil {
		return nil, false, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cov.v == nil {
		return nil, x.cov.replicated, nil
	}
	out := map[string][]int64{}
	for origin, o := range x.cov.v {
		r := []int64{o.MD}
		for _, g := range o.Ranges {
			r = append(r, g.First, g.Last)
		}
		out[origin] = r
	}
	return out, x.cov.replicated, nil
}

// ApplySubUpdateForTesting applies a SubscriptionUpdate as if received
// from region source on the topic loaded on s.
func ApplySubUpdateForTesting(s *Server, topic, source string, u *clientv1.SubscriptionUpdate) error {
	t := loadedTopicForTesting(s, topic)
	if t == nil {
		return ErrNotFound
	}
	return t.applySubUpdate(context.Background(), source, "update", u)
}

// RegionForTesting returns s's region.
func RegionForTesting(s *Server) string { return s.cfg.Region }
