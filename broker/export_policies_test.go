package broker

import clientv1 "github.com/meridianmq/meridian/api/client/v1"

// TopicPoliciesForTesting returns the policies a loaded topic runs with
// (t.currentPolicies()), or nil when s does not have the topic loaded.
func TopicPoliciesForTesting(s *Server, topic string) *clientv1.NamespacePolicies {
	for _, t := range s.loadedTopics() {
		if t.name.String() == topic {
			return t.currentPolicies()
		}
	}
	return nil
}

// PolicyCachedForTesting reports whether the broker's policy cache mirror
// holds key (without reading the store).
func PolicyCachedForTesting(s *Server, key string) bool {
	_, ok, _ := s.policies.cached(key)
	return ok
}
