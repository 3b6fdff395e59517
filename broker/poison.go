package broker

import (
	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Poison pills (issue 22).
//
// A consumer that cannot decode an entry (bad compression, a batch over
// its size limit, a schema it cannot read) acknowledges it with
// Ack.poison_reason, after writing it to its dead-letter topic when it has
// one, so that the entry never stalls the subscription. The broker counts
// such entries per subscription and reason (topics stats poison_entries)
// and in meridian_broker_poison_entries_total. The reasons are a fixed
// set: a client cannot grow the map or the metric's label values.

// PoisonReasons are the reasons a consumer may give in Ack.poison_reason;
// any other value counts as PoisonOther.
var PoisonReasons = []string{PoisonCorrupt, PoisonTooLarge, PoisonUnknownCompression, PoisonSchema}

// The poison reasons.
const (
	// PoisonCorrupt: the batch or its compression does not decode.
	PoisonCorrupt = "corrupt"
	// PoisonTooLarge: the entry declares or decodes to more than the
	// consumer's size limit.
	PoisonTooLarge = "too_large"
	// PoisonUnknownCompression: a compression codec the consumer lacks.
	PoisonUnknownCompression = "unknown_compression"
	// PoisonSchema: the payload does not decode with the consumer's schema.
	PoisonSchema = "schema"
	// PoisonOther counts every reason not in PoisonReasons.
	PoisonOther = "other"
)

// poisonReason maps a client's reason to a counted one.
func poisonReason(r string) string {
	for _, k := range PoisonReasons {
		if r == k {
			return k
		}
	}
	return PoisonOther
}

// countPoison counts the entries ids (those not yet acknowledged) as
// poison pills of reason. Called before they are acknowledged.
func (s *subscription) countPoison(reason string, ids []*clientv1.MessageId) {
	reason = poisonReason(reason)
	s.mu.Lock()
	ml := s.t.ml
	ml.mu.Lock()
	var n int64
	for _, id := range ids {
		if s.liveUnackedLocked(pos{id.GetLedgerId(), id.GetEntryId()}) { // batchacks.go
			n++
		}
	}
	ml.mu.Unlock()
	if n > 0 {
		if s.poison == nil {
			s.poison = make(map[string]int64, len(PoisonReasons)+1)
		}
		s.poison[reason] += n
	}
	s.mu.Unlock()
	if m := s.t.b.metrics; m != nil && n > 0 {
		m.poisonEntries.WithLabelValues(s.t.name.NamespaceName(), reason).Add(float64(n))
	}
}

// poisonStatsLocked copies the poison counts for topics stats (nil when
// none). s.mu held.
func (s *subscription) poisonStatsLocked() map[string]int64 {
	if len(s.poison) == 0 {
		return nil
	}
	out := make(map[string]int64, len(s.poison))
	for k, v := range s.poison {
		out[k] = v
	}
	return out
}
