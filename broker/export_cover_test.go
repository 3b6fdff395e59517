package broker

// coverForTesting builds a vector of this region's own entries.
func coverForTesting(s *Server, ranges [][2]int64) ackVector {
	v := ackVector{}
	for _, r := range ranges {
		v.add(s.cfg.Region, r[0], r[1])
	}
	return v
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
	x.seekVector(coverForTesting(s, ranges), floor)
	return nil
}

// JoinCoverForTesting adds own-region ranges to a subscription's cover
// (as a vector received from another region would).
func JoinCoverForTesting(s *Server, topic, sub string, ranges [][2]int64) error {
	x, err := subForTesting(s, topic, sub)
	if err != nil {
		return err
	}
	x.joinCover(coverForTesting(s, ranges))
	return nil
}
