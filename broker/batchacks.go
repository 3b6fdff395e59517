package broker

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Batch-index acknowledgements.
//
// Acks, permits and dispatch are per entry (one producer batch). A
// consumer that acknowledges some messages of a multi-message entry sends
// their indexes (Ack.batch_index_acks); the subscription keeps a bitset per
// such entry, counts those messages out of its message backlog, persists
// the bitsets with the cursor, and on redelivery tells the consumer which
// messages to skip (Message.acked_batch_indexes). The entry itself is
// acknowledged as a whole (Ack.message_ids) once every message is, and its
// bitset is dropped then (or when mark-delete passes it).

// maxBatchIndex bounds a batch index (a batch never holds more messages:
// the producer's batch limits are far lower).
const maxBatchIndex = 1 << 16

// batchBits is the set of acknowledged indexes of one entry.
type batchBits struct {
	words []uint64
	count int32
}

// set adds index i; it reports whether it was new.
func (b *batchBits) set(i int32) bool {
	w := int(i / 64)
	if w >= len(b.words) {
		b.words = append(b.words, make([]uint64, w+1-len(b.words))...)
	}
	m := uint64(1) << (uint(i) % 64)
	if b.words[w]&m != 0 {
		return false
	}
	b.words[w] |= m
	b.count++
	return true
}

// indexes lists the set indexes in order.
func (b *batchBits) indexes() []int32 {
	out := make([]int32, 0, b.count)
	for w, x := range b.words {
		for x != 0 {
			t := bits.TrailingZeros64(x)
			out = append(out, int32(w*64+t))
			x &= x - 1
		}
	}
	return out
}

// batchAckRecord is one partially acknowledged entry in a cursor record:
// ledger, entry, and the acknowledged indexes' bitset words.
type batchAckRecord struct {
	L     int64    `json:"l"`
	E     int64    `json:"e"`
	Words []uint64 `json:"w"`
}

// batchAcksToRecord converts the bitsets for a cursor record, keeping the
// first maxN entries in position order (a dropped one only makes its
// messages come back after a restart: redelivered, never lost).
func batchAcksToRecord(m map[pos]*batchBits, maxN int) []batchAckRecord {
	if len(m) == 0 {
		return nil
	}
	ps := make([]pos, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].L < ps[j].L || ps[i].L == ps[j].L && ps[i].E < ps[j].E })
	if len(ps) > maxN {
		ps = ps[:maxN]
	}
	out := make([]batchAckRecord, 0, len(ps))
	for _, p := range ps {
		out = append(out, batchAckRecord{L: p.L, E: p.E, Words: append([]uint64(nil), m[p].words...)})
	}
	return out
}

// formatBatchAcks renders records as "L:E:[i,j,...]" for internal stats.
func formatBatchAcks(rs []batchAckRecord) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		b := batchBits{words: r.Words}
		idx := b.indexes()
		parts := make([]string, len(idx))
		for i, x := range idx {
			parts[i] = strconv.Itoa(int(x))
		}
		out = append(out, fmt.Sprintf("%d:%d:[%s]", r.L, r.E, strings.Join(parts, ",")))
	}
	return out
}

// restoreBatchAcks loads the partially acknowledged entries of a stored
// cursor record (those at or before mark-delete are dropped).
func (s *subscription) restoreBatchAcks(ext cursorExt) {
	if len(ext.BatchAcks) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	var learn []pos
	for _, r := range ext.BatchAcks {
		p := pos{r.L, r.E}
		if _, ok := ml.seqOf[p.L]; !ok || !ml.lessLocked(s.markDelete, p) {
			continue
		}
		if _, whole := s.acked[p]; whole {
			continue
		}
		b := &batchBits{words: append([]uint64(nil), r.Words...)}
		for _, w := range b.words {
			b.count += int32(bits.OnesCount64(w))
		}
		if b.count > 0 {
			s.batchAcked[p] = b
			if _, exact := ml.msgsOfLocked(p); !exact {
				learn = append(learn, p)
			}
		}
	}
	if len(learn) > 0 {
		go s.t.learnMsgCounts(learn)
	}
}

// learnMsgCounts reads entries to learn their message counts (a restored
// cursor's partially acknowledged entries, so that the message backlog is
// exact before they are dispatched). Best effort: a failed read leaves
// the count estimated until dispatch reads the entry.
func (t *topic) learnMsgCounts(ps []pos) {
	for _, p := range ps {
		ctx, cancel := context.WithTimeout(context.Background(), t.b.cfg.OperationTimeout)
		ents, err := t.ml.read(ctx, p, 1)
		cancel()
		if err != nil {
			t.log.Debug("message count not learned", "ledger", p.L, "entry", p.E, "err", err)
			continue
		}
		t.ml.mu.Lock()
		for _, e := range ents {
			t.ml.noteEntryDataLocked(pos{e.LedgerID, e.EntryID}, e.Data)
		}
		t.ml.mu.Unlock()
	}
}

// acknowledgeAck applies one Ack request of a consumer: whole entries
// (message_ids), batch indexes, and the dead-letter count. It persists like
// acknowledge.
func (s *subscription) acknowledgeAck(ctx context.Context, a *clientv1.Ack) error {
	if len(a.GetBatchIndexAcks()) > 0 {
		if err := s.ackBatchIndexes(a.GetBatchIndexAcks()); err != nil {
			return err
		}
	}
	if a.GetDeadLetter() && !a.GetCumulative() {
		s.countDeadLettered(a.GetMessageIds())
	}
	if a.GetPoisonReason() != "" && !a.GetCumulative() {
		s.countPoison(a.GetPoisonReason(), a.GetMessageIds()) // poison.go
	}
	if len(a.GetMessageIds()) == 0 {
		if len(a.GetBatchIndexAcks()) == 0 || s.t.persistInterval() > 0 {
			return nil
		}
		pctx, cancel := context.WithTimeout(ctx, s.t.b.cfg.OperationTimeout)
		defer cancel()
		err := s.persist(pctx, false)
		if errors.Is(err, ErrTopicFenced) {
			go s.t.b.unloadTopic(s.t, false, err)
		}
		return err
	}
	return s.acknowledge(ctx, a.GetMessageIds(), a.GetCumulative())
}

// ackBatchIndexes records batch-index acknowledgements. An index at or
// past the entry's message count (when known) is refused, and then none of
// the request is applied; an entry whose every message is now acknowledged
// is acknowledged as a whole.
func (s *subscription) ackBatchIndexes(acks []*clientv1.BatchIndexAck) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	type apply struct {
		p     pos
		n     int64
		exact bool
		idx   []int32
	}
	var todo []apply
	for _, a := range acks {
		p := pos{a.GetLedgerId(), a.GetEntryId()}
		if _, ok := ml.seqOf[p.L]; !ok {
			continue // a ledger already trimmed (or never ours)
		}
		if p.E < 0 || ml.lessLocked(ml.lastPosLocked(), p) {
			return fmt.Errorf("%w: batch_index_acks: message ID %d:%d is not a stored entry", ErrInvalidArgument, p.L, p.E)
		}
		n, exact := ml.msgsOfLocked(p)
		limit := int64(maxBatchIndex)
		if exact {
			limit = n
		}
		for _, i := range a.GetBatchIndexes() {
			if i < 0 || int64(i) >= limit {
				return fmt.Errorf("%w: batch_index_acks: index %d of entry %d:%d out of range [0, %d)", ErrInvalidArgument, i, p.L, p.E, limit)
			}
		}
		if !ml.lessLocked(s.markDelete, p) {
			continue
		}
		if _, done := s.acked[p]; done {
			continue
		}
		todo = append(todo, apply{p, n, exact, a.GetBatchIndexes()})
	}
	var whole []pos
	for _, a := range todo {
		b := s.batchAcked[a.p]
		if b == nil {
			b = &batchBits{}
			s.batchAcked[a.p] = b
		}
		for _, i := range a.idx {
			if b.set(i) {
				s.dirty = true
			}
		}
		s.cov.noteBatch(a.p)
		if a.exact && int64(b.count) >= a.n {
			whole = append(whole, a.p)
		}
	}
	for _, p := range whole {
		s.ackWholeLocked(p)
	}
	if len(whole) > 0 {
		s.compactLocked()
	}
	if len(whole) > 0 || len(todo) > 0 && s.cov.replicated {
		s.afterAckLocked() // translates the batch indexes for the vector
	}
	return nil
}

// ackWholeLocked acknowledges entry p individually (s.mu and ml.mu held).
func (s *subscription) ackWholeLocked(p pos) {
	s.acked[p] = struct{}{}
	s.cov.noteAck(p)
	if c, ok := s.pending[p]; ok {
		delete(s.pending, p)
		c.pending--
	}
	delete(s.redeliver, p)
	delete(s.redelivers, p)
	delete(s.batchAcked, p)
	s.dirty = true
}

// countDeadLettered adds the messages of the entries ids (those not yet
// acknowledged) to the dead-lettered count.
func (s *subscription) countDeadLettered(ids []*clientv1.MessageId) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	for _, id := range ids {
		p := pos{id.GetLedgerId(), id.GetEntryId()}
		if !s.liveUnackedLocked(p) {
			continue
		}
		n, _ := ml.msgsOfLocked(p)
		if b := s.batchAcked[p]; b != nil {
			n = max(0, n-int64(b.count))
		}
		s.deadLettered += n
	}
}

// liveUnackedLocked reports whether entry p is in a ledger of the topic, after
// the mark-delete position and not acknowledged. s.mu and s.t.ml.mu held.
func (s *subscription) liveUnackedLocked(p pos) bool {
	if _, ok := s.t.ml.seqOf[p.L]; !ok || !s.t.ml.lessLocked(s.markDelete, p) {
		return false
	}
	_, done := s.acked[p]
	return !done
}

// msgStats returns the subscription's message backlog (and whether it is
// exact), its unacknowledged messages, the number of partially
// acknowledged entries and the dead-lettered count.
func (s *subscription) msgStats() (backlog int64, exact bool, unacked, partial, dead int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	backlog, exact = ml.msgsAfterLocked(s.markDelete)
	for p := range s.acked {
		if !ml.lessLocked(s.markDelete, p) {
			continue
		}
		n, ok := ml.msgsOfLocked(p)
		backlog -= n
		exact = exact && ok
	}
	for p, b := range s.batchAcked {
		if _, whole := s.acked[p]; !whole && ml.lessLocked(s.markDelete, p) {
			n, ok := ml.msgsOfLocked(p)
			if !ok && n <= int64(b.count) {
				backlog += int64(b.count) + 1 - n // it has at least one message more
			}
			backlog -= int64(b.count)
		}
	}
	for p := range s.pending {
		n, _ := ml.msgsOfLocked(p)
		if b := s.batchAcked[p]; b != nil {
			n -= int64(b.count)
		}
		unacked += max(n, 0)
	}
	return max(backlog, 0), exact, unacked, int64(len(s.batchAcked)), s.deadLettered
}

// consumerUnackedLocked counts c's delivered, unacknowledged messages.
// s.mu held; takes ml.mu.
func (s *subscription) consumerUnackedLocked(c *consumer) int64 {
	ml := s.t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	var n int64
	for p, o := range s.pending {
		if o != c {
			continue
		}
		m, _ := ml.msgsOfLocked(p)
		if b := s.batchAcked[p]; b != nil {
			m -= int64(b.count)
		}
		n += max(m, 0)
	}
	return n
}

// redeliverRate returns redelivered messages per second, averaged over
// the interval since the previous sample at least a second old.
func (s *subscription) redeliverRate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.rdAt.IsZero() {
		s.rdAt, s.rdBase = s.createdAt, 0
	}
	if dt := now.Sub(s.rdAt).Seconds(); dt >= 1 {
		s.rdRate = float64(s.redelivered-s.rdBase) / dt
		s.rdBase, s.rdAt = s.redelivered, now
	}
	return s.rdRate
}
