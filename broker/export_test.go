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

// BrokerRuleKind returns the kind of the rule of a full method name ("" =
// none) and whether it is checked on the stream's first message.
func BrokerRuleKind(method string) (kind string, firstMessage bool) {
	r, ok := brokerRules[method]
	if !ok {
		return "", false
	}
	return r.kind.String(), r.firstMessage
}

// BrokerRuleComponents returns the component kinds of a component rule.
func BrokerRuleComponents(method string) []string { return brokerRules[method].kinds }

// InflightProduceBytesForTesting reports the bytes the broker's produce
// budget holds now (sendbudget.go).
func InflightProduceBytesForTesting(s *Server) int64 { return s.sendBytes.inUse() }

// PendingDeliveryBytesForTesting is the broker's delivery budget in use.
func PendingDeliveryBytesForTesting(s *Server) int64 { return s.deliveryBytes.inUse() }
