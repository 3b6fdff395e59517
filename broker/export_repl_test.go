package broker

import (
	"context"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// loadedTopicForTesting returns the loaded topic named name, or nil.
func loadedTopicForTesting(s *Server, name string) *topic {
	for _, t := range s.loadedTopics() {
		if t.name.String() == name {
			return t
		}
	}
	return nil
}

// OriginSeqForTesting returns the origin_seq of entry (l, e) of a topic
// loaded on s, and the topic's TrimmedEntries; ok is false when the topic
// is not loaded or the ledger no longer retained.
func OriginSeqForTesting(s *Server, name string, l, e int64) (seq, trimmed int64, ok bool) {
	t := loadedTopicForTesting(s, name)
	if t == nil {
		return 0, 0, false
	}
	seq, ok = t.ml.originSeq(pos{l, e})
	t.ml.mu.Lock()
	trimmed = t.ml.rec.TrimmedEntries
	t.ml.mu.Unlock()
	return seq, trimmed, ok
}

// ShipFormForTesting reads entry (l, e) of a topic loaded on s and returns
// what a replicator would ship for it (topic.shipForm).
func ShipFormForTesting(s *Server, name string, l, e int64) ([]byte, *clientv1.EntryMetadata, error) {
	t := loadedTopicForTesting(s, name)
	if t == nil {
		return nil, nil, ErrNotFound
	}
	ents, err := t.ml.read(context.Background(), pos{l, e}, 1)
	if err != nil {
		return nil, nil, err
	}
	if len(ents) == 0 {
		return nil, nil, ErrNotFound
	}
	return t.shipForm(ents[0])
}

// HoldIdentForTesting registers a batch [first, last] of producer under
// failover identity id as queued (not yet stored) on a topic loaded on s,
// as a local send in flight does, until release: a replicated copy of it
// then waits for the local one (DedupReplicatedCopies). ok is false when
// the topic is not loaded.
func HoldIdentForTesting(s *Server, name, id, producer string, first, last int64) (release func(), ok bool) {
	t := loadedTopicForTesting(s, name)
	if t == nil {
		return nil, false
	}
	return t.ml.pendIdent(&appendReq{ident: identDedupName(id, producer), identFirst: first, identLast: last}), true
}

// ReplWaitingForTesting returns how many replicated entries of a topic
// loaded on s wait outside the receive lock (replState.waiting); -1 when
// the topic is not loaded.
func ReplWaitingForTesting(s *Server, name string) int64 {
	t := loadedTopicForTesting(s, name)
	if t == nil {
		return -1
	}
	return t.repl.waiting.Load()
}
