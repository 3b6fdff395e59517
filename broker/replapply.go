package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/internal/wire"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// The receiving side of geo-replication: the Replication service applies
// the entries a remote region's replicator ships, idempotently per origin
// region (see docs/geo/receiver.md).
//
// A replicated entry is stored as one entry of this region's copy of the
// topic, its metadata rewritten only in replicated=true. Its dedup key is
// the pseudo-producer meridian.repl.<origin> with sequence = origin_seq, so
// the highest applied origin_seq per origin is persisted atomically with
// the entry (the takeover scan finds it in the entry) and in the dedup
// snapshot: a resend after a timeout, crash, unload or ownership move is
// answered DUPLICATE and never stored twice.

// replAckQueue bounds the requests of one stream whose entries are queued
// for storage but not yet answered: beyond it the stream stops reading
// (gRPC flow control holds the sender).
const replAckQueue = 256

// replState is a topic's replication receiving state.
type replState struct {
	// applyMu serializes the check-and-enqueue of replicated entries across
	// streams, so the order in which entries of one origin are queued is the
	// order in which they are checked (per-origin order). It guards only
	// in-memory work and is never held across a wait (see apply).
	applyMu sync.Mutex
	// waiting counts the entries waiting outside applyMu for blocking work
	// (a queued local copy, the quota check, append queue room).
	waiting atomic.Int64
	// skips holds, per origin stream, the origin_seq ranges senders
	// reported as not for this region, above the stream's highest stored
	// entry (replapply_skip.go); guarded by applyMu.
	skips map[string][]seqRange

	// mu guards the fields below.
	mu sync.Mutex
	// direct counts the open streams per source region; heard is when a
	// request last arrived from that region (directFresh).
	direct map[string]int
	heard  map[string]time.Time
	// inflight holds the replicated entries queued and not yet stored or
	// failed, per dedup name and origin_seq.
	inflight map[string]map[int64]*replInflight
	// changed is closed (and replaced) when a replicated entry is stored or
	// fails.
	changed chan struct{}
}

// replInflight is one queued replicated entry; done closes when it is
// stored (ok) or failed.
type replInflight struct {
	done chan struct{}
	ok   bool
}

func (r *replState) addDirect(region string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.direct == nil {
		r.direct = map[string]int{}
		r.heard = map[string]time.Time{}
	}
	r.direct[region]++
	r.heard[region] = time.Now()
}

// directFresh is how recently a stream must have carried a request to
// count as direct. A replicator sends at least an idle probe every second;
// a stream silent for longer is probably behind a cut link whose close has
// not arrived (a partition stalls the FIN too), and relays must not wait on
// it until the server's keepalive ends it.
const directFresh = 3 * time.Second

// heardFrom records a request from region's stream.
func (r *replState) heardFrom(region string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.heard != nil {
		r.heard[region] = time.Now()
	}
}

func (r *replState) removeDirect(region string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.direct[region]--; r.direct[region] <= 0 {
		delete(r.direct, region)
	}
}

// directList returns the source regions with an open stream, sorted.
func (r *replState) directList() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.direct))
	for k := range r.direct {
		if time.Since(r.heard[k]) < directFresh {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// waitCh returns a channel closed at the next change (take it before
// checking the condition waited for).
func (r *replState) waitCh() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

// track records a queued entry.
func (r *replState) track(name string, seq int64) *replInflight {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight == nil {
		r.inflight = map[string]map[int64]*replInflight{}
	}
	m := r.inflight[name]
	if m == nil {
		m = map[int64]*replInflight{}
		r.inflight[name] = m
	}
	f := &replInflight{done: make(chan struct{})}
	m[seq] = f
	return f
}

// finish resolves a queued entry and wakes the waiters.
func (r *replState) finish(name string, seq int64, f *replInflight, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f.ok = ok
	close(f.done)
	if m := r.inflight[name]; m != nil && m[seq] == f {
		delete(m, seq)
		if len(m) == 0 {
			delete(r.inflight, name)
		}
	}
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// lookup returns the queued entry name/seq, if any.
func (r *replState) lookup(name string, seq int64) *replInflight {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inflight[name][seq]
}

// replVerdict is the outcome of checking one replicated entry.
type replVerdict int

const (
	replAppend replVerdict = iota
	replDupStored
	replDupInFlight
	replGap
)

// replPeek decides what to do with origin_seq seq of dedup name, without
// recording anything: a duplicate (seq <= highest queued), a gap (relayed
// and not highest queued + 1), or to append. Call under applyMu, and
// record an append with replRecord in the same critical section.
func (ml *managedLedger) replPeek(name string, seq int64, relayed bool) replVerdict {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if p, ok := ml.dedup.byName[name]; ok {
		if seq <= p.pushed {
			ml.dedup.touch(p, time.Now().UnixMilli())
			if seq <= p.stored {
				return replDupStored
			}
			return replDupInFlight
		}
		if relayed && seq != max(p.pushed, 0)+1 {
			return replGap
		}
	} else if relayed && seq != 1 {
		return replGap
	}
	return replAppend
}

// replRecord records origin_seq seq of dedup name as queued (the highest
// queued), after replPeek answered replAppend.
func (ml *managedLedger) replRecord(name string, seq int64) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	_, known := ml.dedup.byName[name]
	ml.dedup.check(name, seq, seq, time.Now().UnixMilli())
	if !known {
		// A new origin stream: bound the streams kept per region.
		region, _ := splitOriginStream(name[len(ReplDedupPrefix):])
		ml.dedup.pruneIncarnations(region)
	}
}

// replUnpush forgets a queued replicated entry that will not be stored:
// nothing from seq on counts as queued any more (entries are stored in
// order, so the later ones of the same origin fail too). The highest
// queued becomes the highest stored or still in flight below seq, never a
// number that was not queued (a direct stream may skip numbers).
func (t *topic) replUnpush(name string, seq int64) {
	below := t.repl.highestInflightBelow(name, seq)
	ml := t.ml
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if p, ok := ml.dedup.byName[name]; ok && p.pushed >= seq {
		p.pushed = max(p.stored, below)
	}
}

// highestInflightBelow returns the highest origin_seq of name below seq
// still in flight (-1: none).
func (r *replState) highestInflightBelow(name string, seq int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := int64(-1)
	for s := range r.inflight[name] {
		if s < seq && s > h {
			h = s
		}
	}
	return h
}

// replProgress returns the highest stored and queued origin_seq of name.
func (ml *managedLedger) replProgress(name string) (stored, pushed int64) {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if p, ok := ml.dedup.byName[name]; ok {
		return p.stored, p.pushed
	}
	return -1, -1
}

// replApplied returns the highest persisted origin_seq per origin stream
// key (originStreamKey).
func (ml *managedLedger) replApplied() map[string]int64 {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	out := map[string]int64{}
	for name, p := range ml.dedup.byName {
		if isReplName(name) && p.stored > 0 {
			out[name[len(ReplDedupPrefix):]] = p.stored
		}
	}
	return out
}

// replicationService implements clientv1.ReplicationServer.
type replicationService struct {
	clientv1.UnimplementedReplicationServer
	b        *Server
	received *prometheus.CounterVec
}

func newReplicationService(b *Server) *replicationService {
	rs := &replicationService{b: b,
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meridian_replication_received_entries_total",
			Help: "Replicated entries received from remote regions, by origin region and result (persisted, duplicate, gap, rejected)."},
			[]string{"origin", "result"})}
	if b.cfg.Registerer != nil {
		if err := b.cfg.Registerer.Register(rs.received); err != nil {
			b.log.Warn("replication metrics not registered", "err", err)
		}
	}
	return rs
}

// replEntry is one validated entry of a request.
type replEntry struct {
	md      *clientv1.EntryMetadata
	payload []byte
}

// replGuard is a stream's rejection barriers: after an entry of origin O
// is answered REJECTED, the stream stores no entry of O above it until the
// sender resends from it (an entry of O at or below the barrier lifts it).
// Without it a pipelined request applied after a rejection (the quota
// cleared meanwhile, an enqueue that lost to the stream's end) could store
// O's later entries with a hole below them that dedup would then answer
// DUPLICATE forever: a direct stream may skip numbers, so the gap rule does
// not catch it.
type replGuard struct {
	mu      sync.Mutex
	barrier map[string]int64
}

// set records that origin's seq was rejected (the lowest one counts).
func (g *replGuard) set(origin string, seq int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.barrier == nil {
		g.barrier = map[string]int64{}
	}
	if b, ok := g.barrier[origin]; !ok || seq < b {
		g.barrier[origin] = seq
	}
}

// check returns the barrier that refuses origin's seq (ok). It lifts the
// barrier when seq is at or below it (the sender rewound) or when filled
// reports that the barrier's entry is queued or stored meanwhile (another
// stream delivered it: the sender may then skip it as applied).
func (g *replGuard) check(origin string, seq int64, filled func(b int64) bool) (int64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, ok := g.barrier[origin]
	if !ok {
		return 0, false
	}
	if seq > b && !filled(b) {
		return b, true
	}
	delete(g.barrier, origin)
	return 0, false
}

// replAck is one request being applied; the stream answers it once every
// entry is resolved.
type replAck struct {
	id      int64
	results []clientv1.ReplicateResult
	origins []string
	seqs    []int64
	errs    []error
	// waits are the duplicates whose original is still in flight.
	waits []replWait
	wg    sync.WaitGroup
	mu    sync.Mutex // guards results and errs while appends complete
	// end, when set, ends the stream (after the acks before it).
	end error
}

type replWait struct {
	i    int
	name string
	seq  int64
	f    *replInflight
}

// validateReplEntries decodes and checks every entry of a request; nothing
// is applied when one is bad.
func validateReplEntries(raw [][]byte, maxBytes int) ([]replEntry, error) {
	out := make([]replEntry, len(raw))
	for i, data := range raw {
		md, payload, err := wire.DecodeEntry(data)
		if err != nil {
			return nil, fmt.Errorf("%w: entries[%d]: %v", ErrInvalidArgument, i, err)
		}
		if err := ValidateName(fmt.Sprintf("entries[%d].origin_region", i), md.GetOriginRegion()); err != nil {
			return nil, err
		}
		if s := md.GetOriginSeq(); s <= 0 || s > maxSeq {
			return nil, fmt.Errorf("%w: entries[%d].origin_seq %d must be in [1, %d] (math.MaxInt64 - 1)", ErrInvalidArgument, i, s, int64(maxSeq))
		}
		if md.GetOriginLedgerId() < 0 || md.GetOriginEntryId() < 0 {
			return nil, fmt.Errorf("%w: entries[%d].origin_ledger_id %d / origin_entry_id %d must be >= 0", ErrInvalidArgument, i, md.GetOriginLedgerId(), md.GetOriginEntryId())
		}
		if md.GetNumMessages() < 1 {
			return nil, fmt.Errorf("%w: entries[%d].num_messages %d must be >= 1", ErrInvalidArgument, i, md.GetNumMessages())
		}
		// The original producer's ids feed dedup keys (originProducerKey,
		// entryIdent: sequence_id + num_messages - 1): held to the bounds
		// of a send (seqlimit.go).
		if err := checkBatchSeq(fmt.Sprintf("entries[%d].", i), md.GetSequenceId(), md.GetNumMessages()); err != nil {
			return nil, err
		}
		if hs := md.GetHighestSequenceId(); hs < 0 || hs > maxSeq {
			return nil, fmt.Errorf("%w: entries[%d].highest_sequence_id %d must be in [0, %d] (math.MaxInt64 - 1)", ErrInvalidArgument, i, hs, int64(maxSeq))
		}
		if _, ok := clientv1.CompressionType_name[int32(md.GetCompression())]; !ok {
			return nil, fmt.Errorf("%w: entries[%d].compression %d is not NONE, ZSTD or S2", ErrInvalidArgument, i, md.GetCompression())
		}
		if u := md.GetUncompressedSize(); u < 0 || u > wire.MaxUncompressedBytes {
			return nil, fmt.Errorf("%w: entries[%d].uncompressed_size %d must be in [0, %d]", ErrInvalidArgument, i, u, wire.MaxUncompressedBytes)
		}
		if len(payload) > maxBytes {
			return nil, fmt.Errorf("%w: entries[%d] payload is %d bytes, limit %d (max_message_bytes)", ErrInvalidArgument, i, len(payload), maxBytes)
		}
		out[i] = replEntry{md: md, payload: payload}
	}
	return out, nil
}

// replOpen is the open request of both replication streams.
type replOpen interface {
	GetTopic() string
	GetSourceRegion() string
	GetTargetRegion() string
}

// openReplStream validates a replication stream's open request (the
// topic, a source region other than this one, this region as the target)
// and loads the topic.
func (b *Server) openReplStream(ctx context.Context, open replOpen) (*topic, string, error) {
	name, err := ParseTopic(open.GetTopic())
	if err != nil {
		return nil, "", err
	}
	source := open.GetSourceRegion()
	if err := ValidateName("source_region", source); err != nil {
		return nil, "", err
	}
	if open.GetTargetRegion() != b.cfg.Region {
		return nil, "", fmt.Errorf("%w: target_region %q is not this broker's region %q", ErrInvalidArgument, open.GetTargetRegion(), b.cfg.Region)
	}
	if source == b.cfg.Region {
		return nil, "", fmt.Errorf("%w: source_region %q is this broker's own region", ErrInvalidArgument, source)
	}
	// Security on: the caller is broker.<source>, and source a
	// replication region of the topic (replauth.go), before the topic is
	// loaded.
	if err := b.checkReplCaller(ctx, source); err != nil {
		return nil, "", err
	}
	if err := b.checkReplSourceInSet(ctx, name, source); err != nil {
		return nil, "", err
	}
	t, err := b.getTopic(ctx, name, true)
	if err != nil {
		return nil, "", err
	}
	return t, source, nil
}

// Replicate serves one replication stream (see api/client/v1/replication.proto).
func (rs *replicationService) Replicate(stream grpc.BidiStreamingServer[clientv1.ReplicateRequest, clientv1.ReplicateResponse]) error {
	b := rs.b
	ctx := stream.Context()
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	open := req.GetOpen()
	if open == nil {
		return GRPCError(fmt.Errorf("%w: the first replicate request must be open", ErrInvalidArgument))
	}
	t, source, err := b.openReplStream(ctx, open)
	if err != nil {
		return GRPCError(err)
	}
	t.repl.addDirect(source)
	defer t.repl.removeDirect(source)
	log := t.log.With("source_region", source)
	log.Info("replication stream opened")
	defer log.Info("replication stream closed")
	if err := stream.Send(&clientv1.ReplicateResponse{Kind: &clientv1.ReplicateResponse_Opened{Opened: &clientv1.ReplicateOpened{
		Applied: t.ml.replApplied(), Direct: t.repl.directList(),
	}}}); err != nil {
		return err
	}
	// The receiving goroutine applies requests in order and queues their
	// acks; this goroutine answers them in order as they resolve, so the
	// stream never waits for one request's persistence before taking the
	// next.
	acks := make(chan *replAck, replAckQueue)
	guard := &replGuard{}
	go func() {
		defer close(acks)
		for {
			r, err := stream.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					select {
					case acks <- &replAck{end: err}:
					case <-ctx.Done():
					}
				}
				return
			}
			t.repl.heardFrom(source)
			if f := b.cfg.Testing.ReplRequestDelay; f != nil {
				if d := f(t.name.String(), source); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return
					}
				}
			}
			ents := r.GetEntries()
			var a *replAck
			if ents == nil {
				a = &replAck{end: GRPCError(fmt.Errorf("%w: after open, replicate requests must be entries", ErrInvalidArgument))}
			} else if valid, verr := validateReplEntries(ents.GetEntries(), b.cfg.MaxMessageBytes); verr != nil {
				log.Warn("invalid replication request refused", "request_id", ents.GetRequestId(), "err", verr)
				a = &replAck{end: GRPCError(verr)}
			} else if verr := validateSkipped(ents.GetSkipped()); verr != nil {
				log.Warn("invalid replication request refused", "request_id", ents.GetRequestId(), "err", verr)
				a = &replAck{end: GRPCError(verr)}
			} else {
				// Skip reports first: they are facts about entries' metadata,
				// and the request's entries may need them.
				t.noteSkipped(ents.GetSkipped())
				// Security on: the replication set the entries are checked
				// against, read outside the receive lock (replauth.go).
				set, serr := b.replSet(ctx, t.name)
				a = rs.apply(ctx, t, source, guard, ents.GetRequestId(), valid, set, serr)
			}
			select {
			case acks <- a:
			case <-ctx.Done():
				return
			}
			if a.end != nil {
				return
			}
		}
	}()
	for {
		select {
		case a, ok := <-acks:
			if !ok {
				return nil
			}
			if a.end != nil {
				return a.end
			}
			resp, err := rs.resolve(ctx, t, guard, a)
			if err != nil {
				return err
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
		case <-t.stop:
			// Unloaded: answer what was queued (its entries resolve as the
			// ledger closes), then end the stream so the sender looks the
			// topic up again.
			deadline := time.After(b.cfg.OperationTimeout)
			for {
				select {
				case a, ok := <-acks:
					if !ok || a.end != nil {
						return GRPCError(&notOwnedError{})
					}
					resp, err := rs.resolve(ctx, t, guard, a)
					if err != nil {
						return err
					}
					if err := stream.Send(resp); err != nil {
						return err
					}
				case <-deadline:
					return GRPCError(&notOwnedError{})
				default:
					return GRPCError(&notOwnedError{})
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// replNeed is what an entry's check under applyMu found missing: blocking
// work to do outside the lock before the entry is checked again.
type replNeed int

const (
	// replNeedNone: the entry is resolved or queued.
	replNeedNone replNeed = iota
	// replNeedIdent: a queued local copy of the batch may cover it
	// (DedupReplicatedCopies): wait for it.
	replNeedIdent
	// replNeedQuota: the request's backlog quota is not checked yet (the
	// age quota may read a bookie).
	replNeedQuota
	// replNeedSlot: the append queue is full (MaxPendingSends).
	replNeedSlot
)

// replApplyState is what apply learned, outside applyMu, about one request
// and its current entry.
type replApplyState struct {
	// quotaChecked is set once the request's backlog quota was checked;
	// quotaErr is its outcome (once per request, as at the first append).
	quotaChecked bool
	quotaErr     error
	// slot is set while the current entry holds an append queue slot.
	slot bool
	// identWaits are the queued local copies the current entry waits for.
	identWaits []<-chan struct{}
}

// apply checks and queues the entries of one request, in order.
//
// applyMu protects only in-memory work: the check of an entry against the
// dedup state and its handing to the append queue happen together under
// it, so the order in which one origin's entries are queued is the order
// in which they are checked, whichever stream carried them. Everything
// that may block (the wait for a queued local copy of a batch, the backlog
// quota's bookie read, the append queue's back-pressure) happens outside
// it, before the entry is checked again from scratch: nothing is recorded
// for an entry until it is queued, so another stream may check and queue
// the same entry meanwhile (this one then finds it a duplicate), and one
// stream waiting never holds up another origin's streams.
//
// set is the topic's replication set for the identity checks (nil:
// security off); setErr, when not nil, rejects every entry (the set could
// not be read).
func (rs *replicationService) apply(ctx context.Context, t *topic, source string, guard *replGuard, id int64, ents []replEntry, set []string, setErr error) *replAck {
	a := &replAck{id: id, results: make([]clientv1.ReplicateResult, len(ents)), origins: make([]string, len(ents)),
		seqs: make([]int64, len(ents)), errs: make([]error, len(ents))}
	own := rs.b.cfg.Region
	var rejected error
	reject := func(i int, err error) {
		a.results[i] = clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED
		a.errs[i] = err
		rejected = err
		if r, _ := splitOriginStream(a.origins[i]); r != own {
			guard.set(a.origins[i], a.seqs[i])
		}
	}
	var st replApplyState
	for i, e := range ents {
		// origin is the region (compared with region names), stream the
		// origin stream key (keys every per-origin state, originstream.go).
		origin, stream := e.md.GetOriginRegion(), entryStream(e.md)
		a.origins[i], a.seqs[i] = stream, e.md.GetOriginSeq()
		if rejected != nil {
			reject(i, rejected)
			continue
		}
		if origin == own {
			// Our own entry coming back (a relay): never stored again.
			a.results[i] = clientv1.ReplicateResult_REPLICATE_RESULT_DUPLICATE
			continue
		}
		if setErr != nil {
			reject(i, setErr)
			continue
		}
		if err := checkReplEntry(set, t.name, source, origin); err != nil {
			rs.b.log.Warn("replicated entry refused: replication identities", "topic", t.name.String(), "source_region", source,
				"origin_region", origin, "origin_seq", e.md.GetOriginSeq(), "err", err)
			reject(i, err)
			continue
		}
		for {
			need, err := rs.applyOne(ctx, t, source, guard, a, i, e, &st)
			if err != nil {
				reject(i, err)
			}
			if need == replNeedNone {
				break
			}
			if err := rs.applyWait(ctx, t, need, &st); err != nil {
				reject(i, err)
				break
			}
		}
		if st.slot {
			t.ml.releaseSlot()
			st.slot = false
		}
	}
	return a
}

// applyWait does, outside applyMu, the blocking work an entry's check
// found missing.
func (rs *replicationService) applyWait(ctx context.Context, t *topic, need replNeed, st *replApplyState) error {
	t.repl.waiting.Add(1)
	defer t.repl.waiting.Add(-1)
	switch need {
	case replNeedIdent:
		waits := st.identWaits
		st.identWaits = nil
		return waitAll(ctx, waits)
	case replNeedQuota:
		st.quotaChecked, st.quotaErr = true, t.quotaErr()
		return nil
	case replNeedSlot:
		if err := t.ml.reserveSlot(ctx); err != nil {
			return err
		}
		st.slot = true
		return nil
	}
	return nil
}

// applyOne checks entry i of a under applyMu and resolves or queues it,
// or returns what must be done outside the lock first (then nothing is
// recorded for it). A non-nil error rejects the entry.
func (rs *replicationService) applyOne(ctx context.Context, t *topic, source string, guard *replGuard, a *replAck, i int, e replEntry, st *replApplyState) (replNeed, error) {
	t.repl.applyMu.Lock()
	defer t.repl.applyMu.Unlock()
	// stream keys every per-origin state (originstream.go); origin, its
	// region, is what is compared with region names.
	stream := a.origins[i]
	origin, _ := splitOriginStream(stream)
	name, seq := replDedupName(stream), e.md.GetOriginSeq()
	filled := func(b int64) bool {
		_, pushed := t.ml.replProgress(name)
		return pushed >= b
	}
	if b, barred := guard.check(stream, seq, filled); barred {
		return replNeedNone, fmt.Errorf("%w: origin_seq %d of %s follows origin_seq %d, rejected earlier on this stream; resend from %d",
			ErrUnavailable, seq, stream, b, b)
	}
	if err := ctx.Err(); err != nil {
		return replNeedNone, fmt.Errorf("%w: replication stream ended: %v", ErrUnavailable, err)
	}
	if t.stopped() || t.ml.isFailed() {
		return replNeedNone, &notOwnedError{}
	}
	relayed := origin != source
	verdict := t.ml.replPeek(name, seq, relayed)
	if verdict == replDupStored && rs.b.cfg.UnsafeSkipOriginCheck {
		// Test-only broken build: store the resend again.
		verdict = replAppend
	}
	switch verdict {
	case replDupStored:
		a.results[i] = clientv1.ReplicateResult_REPLICATE_RESULT_DUPLICATE
		return replNeedNone, nil
	case replDupInFlight:
		a.waits = append(a.waits, replWait{i: i, name: name, seq: seq, f: t.repl.lookup(name, seq)})
		return replNeedNone, nil
	case replGap:
		a.results[i] = clientv1.ReplicateResult_REPLICATE_RESULT_GAP
		return replNeedNone, nil
	}
	if !relayed {
		// A direct entry's number must be plausible (replapply_jump.go).
		if err := t.checkOriginJumpLocked(stream, name, seq); err != nil {
			return replNeedNone, err
		}
	}
	if rs.b.cfg.DedupReplicatedCopies {
		covered, waits := t.ml.identCoverNow(e.md)
		if len(waits) > 0 {
			st.identWaits = waits
			return replNeedIdent, nil
		}
		if covered {
			t.ml.replRecord(name, seq)
			t.skipCovered(a, i, name, seq) // ident_dedup.go
			return replNeedNone, nil
		}
	}
	if !st.quotaChecked {
		return replNeedQuota, nil
	}
	if st.quotaErr != nil {
		return replNeedNone, st.quotaErr
	}
	if !st.slot {
		if !t.ml.tryReserveSlot() {
			return replNeedSlot, nil
		}
		st.slot = true
	}
	md := e.md
	md.Replicated = true
	// This region's own count (a relay's copy carries its receiver's).
	stored, _ := t.ml.replProgress(name)
	md.OriginSkippedBefore = t.repl.skippedBeforeLocked(stream, seq, stored)
	data, err := wire.EncodeEntry(md, e.payload)
	if err != nil {
		return replNeedNone, fmt.Errorf("%w: entries[%d]: %v", ErrInvalidArgument, i, err)
	}
	// Checked and queued together: recorded as queued from here on.
	t.ml.replRecord(name, seq)
	f := t.repl.track(name, seq)
	a.wg.Add(1)
	nmsgs, nbytes := int(md.GetNumMessages()), len(e.payload)
	start := time.Now()
	req := &appendReq{data: data, producer: name, firstSeq: seq, lastSeq: seq}
	req.from, req.fromFirst, req.fromLast, _ = originProducerKey(md)
	req.ident, req.identFirst, req.identLast, _ = entryIdent(md)
	req.done = func(_ pos, err error) {
		a.mu.Lock()
		if err != nil {
			a.results[i] = clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED
			a.errs[i] = err
		} else {
			a.results[i] = clientv1.ReplicateResult_REPLICATE_RESULT_PERSISTED
		}
		a.mu.Unlock()
		if err != nil {
			t.replUnpush(name, seq)
		} else {
			t.msgsIn.Add(int64(nmsgs))
			t.bytesIn.Add(int64(nbytes))
			rs.b.metrics.in(t.name.NamespaceName(), nmsgs, nbytes, time.Since(start).Seconds())
		}
		t.repl.finish(name, seq, f, err == nil)
		a.wg.Done()
	}
	release := t.ml.pendIdent(req)
	st.slot = false // enqueueReserved uses or releases it
	if err := t.ml.enqueueReserved(req); err != nil {
		release()
		t.replUnpush(name, seq)
		t.repl.finish(name, seq, f, false)
		a.wg.Done()
		return replNeedNone, err
	}
	return replNeedNone, nil
}

// resolve waits until every entry of a is resolved and builds its ack.
func (rs *replicationService) resolve(ctx context.Context, t *topic, guard *replGuard, a *replAck) (*clientv1.ReplicateResponse, error) {
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	deadline := time.NewTimer(rs.b.cfg.OperationTimeout)
	defer deadline.Stop()
	for _, w := range a.waits {
		res, err := rs.waitOriginal(ctx, t, w, deadline.C)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		a.results[w.i], a.errs[w.i] = res, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	ack := &clientv1.ReplicateAck{RequestId: a.id, Results: a.results}
	var first error
	for i, r := range a.results {
		if first != nil {
			// After the first rejection every result is REJECTED (an entry
			// stored meanwhile is answered DUPLICATE when resent).
			a.results[i] = clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED
		} else if r == clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED {
			first = a.errs[i]
			if first == nil {
				first = fmt.Errorf("%w: entry %d not stored", ErrUnavailable, i)
			}
		}
		region, _ := splitOriginStream(a.origins[i])
		if a.results[i] == clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED && region != rs.b.cfg.Region {
			guard.set(a.origins[i], a.seqs[i])
		}
		rs.received.WithLabelValues(region, replResultLabel(a.results[i])).Inc()
	}
	ack.Error = ToError(first)
	ack.Applied = t.ml.replApplied()
	ack.Direct = t.repl.directList()
	return &clientv1.ReplicateResponse{Kind: &clientv1.ReplicateResponse_Ack{Ack: ack}}, nil
}

// waitOriginal answers a duplicate whose original was in flight when it
// was checked: DUPLICATE once the original is stored, REJECTED when it
// failed (the resend must come again) or the wait ends.
func (rs *replicationService) waitOriginal(ctx context.Context, t *topic, w replWait, deadline <-chan time.Time) (clientv1.ReplicateResult, error) {
	if w.f != nil {
		select {
		case <-w.f.done:
			if w.f.ok {
				return clientv1.ReplicateResult_REPLICATE_RESULT_DUPLICATE, nil
			}
			return clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED, fmt.Errorf("%w: origin_seq %d of %s was not stored; resend it", ErrUnavailable, w.seq, w.name)
		case <-ctx.Done():
			return clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED, ctx.Err()
		case <-deadline:
			return clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED, fmt.Errorf("%w: origin_seq %d of %s is still being stored; resend it", ErrUnavailable, w.seq, w.name)
		}
	}
	// Not queued by a stream (below the highest queued, not yet stored: an
	// origin_seq the origin never sent here): a duplicate once the highest
	// queued one is stored.
	for {
		ch := t.repl.waitCh()
		stored, pushed := t.ml.replProgress(w.name)
		switch {
		case stored >= w.seq:
			return clientv1.ReplicateResult_REPLICATE_RESULT_DUPLICATE, nil
		case pushed < w.seq:
			return clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED, fmt.Errorf("%w: origin_seq %d of %s was not stored; resend it", ErrUnavailable, w.seq, w.name)
		case t.stopped() || t.ml.isFailed():
			return clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED, &notOwnedError{}
		}
		select {
		case <-ch:
		case <-t.stop:
		case <-ctx.Done():
			return clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED, ctx.Err()
		case <-deadline:
			return clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED, fmt.Errorf("%w: origin_seq %d of %s is still being stored; resend it", ErrUnavailable, w.seq, w.name)
		}
	}
}

func replResultLabel(r clientv1.ReplicateResult) string {
	switch r {
	case clientv1.ReplicateResult_REPLICATE_RESULT_PERSISTED:
		return "persisted"
	case clientv1.ReplicateResult_REPLICATE_RESULT_DUPLICATE:
		return "duplicate"
	case clientv1.ReplicateResult_REPLICATE_RESULT_GAP:
		return "gap"
	default:
		return "rejected"
	}
}

// isFailed reports whether the managed ledger can no longer take writes.
func (ml *managedLedger) isFailed() bool {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	return ml.failed != nil
}
