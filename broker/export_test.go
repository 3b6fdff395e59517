package broker

// SetBeforeTopicDeleteForTesting makes DeleteTopic call f between the
// unload of the topic and its deletion (to race a producer against it);
// nil removes it.
func SetBeforeTopicDeleteForTesting(s *Server, f func()) {
	if f == nil {
		s.beforeTopicDelete.Store(nil)
		return
	}
	s.beforeTopicDelete.Store(&f)
}
