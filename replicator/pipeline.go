package replicator

import (
	"errors"
	"fmt"
	"slices"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// Position is an entry's position in the local copy of the topic (ledger,
// entry). The replicator only compares positions for equality; the Source
// orders them.
type Position struct{ Ledger, Entry int64 }

func (p Position) String() string { return fmt.Sprintf("%d:%d", p.Ledger, p.Entry) }

// Entry is one stored entry of the local log, in ship form.
type Entry struct {
	Pos Position
	// Data is the stored entry (internal/wire format) with its origin
	// fields filled in (origin_region, origin_ledger_id, origin_entry_id,
	// origin_seq): the bytes sent to the remote.
	Data []byte
	// Origin is the region where the entry was produced; OriginSeq its
	// offset in the origin's copy of the topic.
	Origin    string
	OriginSeq int64
	// Stream is the entry's origin stream key (the origin region and its
	// origin incarnation, "region" or "region@incarnation"): the key of
	// the remote's applied positions. "" means Origin (incarnation 0).
	Stream string
	// Targets restricts the regions the entry goes to (empty: all).
	Targets []string
	// NoReplicate is set for entries produced with replication disabled.
	NoReplicate bool
	// Messages is the number of messages in the entry (rate limits).
	Messages int
	// PublishMs is when the entry was stored (broker publish time, ms),
	// used for the replication lag.
	PublishMs int64
}

// Errors of a replication session.
var (
	// ErrRejected: the remote rejected an entry (quota, fenced, not
	// ready). The replicator rewinds to it and backs off.
	ErrRejected = errors.New("replicator: remote rejected entries")
	// ErrProtocol: the remote answered out of order or malformed.
	ErrProtocol = errors.New("replicator: protocol violation by the remote")
)

type itemState uint8

const (
	stateUnsent itemState = iota
	// stateWaiting: a relayed entry whose origin the remote reaches
	// directly. It needs no sending as long as the origin's own replicator
	// delivers it (the remote's applied position passes it), but the
	// cursor does not pass it before that: if the origin's link to the
	// remote goes down, the relay sends it after all.
	stateWaiting
	stateInflight
	stateDone
)

type item struct {
	e     Entry
	state itemState
	// persisted is set when the remote answered PERSISTED.
	persisted bool
	// prev is the position of the entry before it in the log: a waiting
	// entry drops its data (so that waiting entries do not hold back the
	// others) and is read again after prev when it must be sent.
	prev Position
	// waitSince is when it started waiting (stateWaiting).
	waitSince time.Time
}

// heldCost estimates the memory a waiting entry holds (its item, its
// metadata and its strings; its data is dropped while it waits).
func (it *item) heldCost() int64 {
	n := int64(itemOverhead + len(it.e.Origin))
	for _, t := range it.e.Targets {
		n += int64(len(t)) + 16
	}
	return n
}

// itemOverhead is the fixed part of heldCost: the item and Entry structs
// and the queue and waiting slice slots pointing at them (measured about
// 170 bytes per entry on amd64).
const itemOverhead = 176

// request is one ReplicateEntries in flight: items are sent (one result
// each), skipped are reported as not for the remote (ReplicateEntries.skipped)
// and done when the request is answered.
type request struct {
	id      int64
	items   []*item
	skipped []*item
	bytes   int64
	msgs    int
	sentAt  time.Time
}

// Limits bound a pipeline.
type Limits struct {
	// MinWindow and MaxWindow bound the bytes in flight (default 1 MiB and
	// 64 MiB); between them the window follows bandwidth × RTT.
	MinWindow, MaxWindow int64
	// MaxRequests bounds the requests in flight (default 1024).
	MaxRequests int
	// RequestBytes and RequestEntries bound one request (defaults 512 KiB
	// and 512 entries; a request always carries at least one entry).
	RequestBytes   int64
	RequestEntries int
	// MaxRelayWait bounds how long a relayed entry waits while its origin
	// has a live direct stream to the remote (default 5 s). An origin can
	// be connected but slow (a slow link, a rate limit, a receiver that
	// holds its stream): past the bound the relay sends the entry itself,
	// in origin order; whatever the origin delivered meanwhile is answered
	// DUPLICATE (the receiver's per-origin in-sequence check keeps it
	// exact).
	MaxRelayWait time.Duration
	// RequestSkipped bounds the entries one request reports as not for the
	// remote (default 4096; they go as origin_seq ranges, consecutive
	// values of a stream merged).
	RequestSkipped int
	// MaxHeldBytes bounds the memory of the waiting entries (heldCost:
	// their metadata, about 170 bytes each; default 16 MiB, some 95 000
	// entries). Past it the oldest waiting entries of the origin that has
	// waited longest are sent, so the read-ahead never stops on waiting
	// entries.
	MaxHeldBytes int64
}

// Defaults of the relay wait bounds.
const (
	DefaultMaxRelayWait = 5 * time.Second
	DefaultMaxHeldBytes = 16 << 20
)

func (l Limits) withDefaults() Limits {
	if l.MinWindow <= 0 {
		l.MinWindow = 1 << 20
	}
	if l.MaxWindow < l.MinWindow {
		l.MaxWindow = max(64<<20, l.MinWindow)
	}
	if l.MaxRequests <= 0 {
		l.MaxRequests = 1024
	}
	if l.RequestBytes <= 0 {
		l.RequestBytes = 512 << 10
	}
	if l.RequestEntries <= 0 {
		l.RequestEntries = 512
	}
	if l.RequestSkipped <= 0 {
		l.RequestSkipped = 4096
	}
	if l.MaxRelayWait <= 0 {
		l.MaxRelayWait = DefaultMaxRelayWait
	}
	if l.MaxHeldBytes <= 0 {
		l.MaxHeldBytes = DefaultMaxHeldBytes
	}
	return l
}

// Progress is what one acknowledgement did.
type Progress struct {
	// Persisted and PersistedBytes count entries the remote stored now.
	Persisted      int
	PersistedBytes int64
	PersistedMsgs  int
	// Skipped counts DUPLICATE and GAP answers.
	Skipped int
	// NotFor counts the entries reported as not for the remote.
	NotFor int
}

// pipeline is the protocol core of one replication session: the entries
// read from the cursor and not yet done, the requests in flight, the
// remote's applied/direct view and the window. It has no goroutines,
// sockets or clocks (times are passed in).
type pipeline struct {
	self, remote string
	lim          Limits

	// applied is the remote's highest applied origin_seq per origin
	// stream key (Entry.Stream).
	applied map[string]int64
	direct  map[string]bool

	// queue holds the entries read from the cursor, in log order, from the
	// first one not done. unsent indexes the first entry not yet sent or
	// skipped.
	queue  []*item
	unsent int
	// readPos is the position of the last entry read (the next read is
	// after it).
	readPos Position
	// queueBytes sums the data of the queued entries (bounds reading
	// ahead while entries wait).
	queueBytes int64
	// waiting holds, per origin, the queued entries in stateWaiting or
	// released for sending (in origin order). An origin's later entries
	// queue behind them so that its order is kept.
	waiting map[string][]*item
	// release holds entries to send before the unsent part of the queue:
	// waiting entries whose origin the remote no longer reaches directly,
	// or that waited past MaxRelayWait or MaxHeldBytes.
	release []*item
	// heldBytes sums heldCost over the entries in stateWaiting (at most
	// MaxHeldBytes). relayedByTime and relayedByBytes count the waiting
	// entries sent because of MaxRelayWait and MaxHeldBytes.
	heldBytes                     int64
	relayedByTime, relayedByBytes int64

	reqs          []*request
	nextID        int64
	inflightBytes int64

	win window
}

func newPipeline(self, remote string, lim Limits, start Position, opened *clientv1.ReplicateOpened) *pipeline {
	p := &pipeline{self: self, remote: remote, lim: lim.withDefaults(), readPos: start, nextID: 1,
		applied: map[string]int64{}, direct: map[string]bool{}, waiting: map[string][]*item{}}
	p.win.init(p.lim.MinWindow, p.lim.MaxWindow)
	p.view(opened.GetApplied(), opened.GetDirect())
	return p
}

// view merges the remote's applied positions and replaces its direct list.
func (p *pipeline) view(applied map[string]int64, direct []string) {
	for o, s := range applied {
		if cur, ok := p.applied[o]; !ok || s > cur {
			p.applied[o] = s
		}
	}
	p.direct = make(map[string]bool, len(direct))
	for _, d := range direct {
		p.direct[d] = true
	}
}

// maxQueuedEntries bounds the entries read ahead of the cursor (waiting
// entries keep only their metadata, about 100 bytes each).
const maxQueuedEntries = 1 << 20

type verdict uint8

const (
	verdictSend verdict = iota
	verdictSkip
	verdictWait
	// verdictNotFor: the entry is not for the remote by its metadata
	// (replicate_to without it, disable_replication): not sent, reported
	// in the request's skipped ranges, done once the request is answered.
	verdictNotFor
)

// classify decides what e needs (see the package doc).
func (p *pipeline) classify(e *Entry) verdict {
	origin := e.Origin
	if origin == "" {
		origin = p.self
	}
	switch {
	case origin == p.remote:
		return verdictSkip
	case e.NoReplicate, len(e.Targets) > 0 && !slices.Contains(e.Targets, p.remote):
		if e.OriginSeq <= 0 {
			return verdictSkip // no origin key to report (an undecodable entry)
		}
		return verdictNotFor
	}
	stream := e.Stream
	if stream == "" {
		stream = origin
	}
	if a, ok := p.applied[stream]; ok && e.OriginSeq <= a {
		return verdictSkip
	}
	if origin != p.self && p.direct[origin] {
		// The origin's own replicator is connected to the remote.
		return verdictWait
	}
	return verdictSend
}

// needsSending reports whether e must be sent now.
func (p *pipeline) needsSending(e *Entry) bool { return p.classify(e) == verdictSend }

// resolveWaiting marks waiting entries the remote has applied done, and
// releases for sending those whose origin it no longer reaches directly
// or that have waited MaxRelayWait by now.
func (p *pipeline) resolveWaiting(now time.Time) {
	for origin, its := range p.waiting {
		n := 0
		for n < len(its) {
			it := its[n]
			if it.state == stateWaiting {
				switch p.classify(&it.e) {
				case verdictSkip, verdictNotFor:
					p.unhold(it, stateDone)
				case verdictSend:
					p.unhold(it, stateUnsent)
					p.release = append(p.release, it)
				default:
					if now.Sub(it.waitSince) >= p.lim.MaxRelayWait {
						// The origin is connected but slow: relay.
						p.unhold(it, stateUnsent)
						p.release = append(p.release, it)
						p.relayedByTime++
					}
				}
			}
			if it.state == stateWaiting {
				break
			}
			n++
		}
		if n == len(its) {
			delete(p.waiting, origin)
		} else {
			clear(its[:n])
			p.waiting[origin] = its[n:]
		}
	}
}

// unhold takes a waiting entry out of stateWaiting.
func (p *pipeline) unhold(it *item, to itemState) {
	p.heldBytes -= it.heldCost()
	it.state = to
}

// hold makes it wait (its data dropped), first sending the oldest waiting
// entries while holding it would pass MaxHeldBytes.
func (p *pipeline) hold(it *item, origin string, now time.Time) {
	cost := it.heldCost()
	for p.heldBytes+cost > p.lim.MaxHeldBytes && p.releaseOldest() {
	}
	it.state, it.waitSince = stateWaiting, now
	p.heldBytes += cost
	p.waiting[origin] = append(p.waiting[origin], it)
	// Keep only its metadata: waiting entries must not fill the read-ahead
	// and hold back the entries behind them.
	p.queueBytes -= int64(len(it.e.Data))
	it.e.Data = nil
}

// releaseOldest releases for sending the first waiting entry of the
// origin whose first waiting entry is the oldest (false: none waits).
// Releasing an origin's entries in order keeps that origin's order.
func (p *pipeline) releaseOldest() bool {
	var best *item
	for _, its := range p.waiting {
		for _, it := range its {
			if it.state == stateWaiting {
				if best == nil || it.waitSince.Before(best.waitSince) {
					best = it
				}
				break
			}
		}
	}
	if best == nil {
		return false
	}
	p.unhold(best, stateUnsent)
	p.release = append(p.release, best)
	p.relayedByBytes++
	return true
}

// hasWaiting reports entries waiting on the remote's applied positions.
func (p *pipeline) hasWaiting() bool { return len(p.waiting) > 0 }

// wantRead reports whether the pipeline has room for more entries: the
// unsent part of the queue is shorter than a request and the window has
// room.
func (p *pipeline) wantRead() bool {
	return len(p.queue)-p.unsent < p.lim.RequestEntries && p.canSend() &&
		p.queueBytes < 2*p.win.size+p.lim.RequestBytes && len(p.queue) < maxQueuedEntries
}

func (p *pipeline) canSend() bool {
	return len(p.reqs) < p.lim.MaxRequests && p.inflightBytes < p.win.size
}

// push appends entries read after readPos (in log order).
func (p *pipeline) push(es []Entry) {
	for _, e := range es {
		p.queue = append(p.queue, &item{e: e, prev: p.readPos})
		p.queueBytes += int64(len(e.Data))
		p.readPos = e.Pos
	}
}

// next builds the next request from the unsent entries, marking entries
// that need no sending done. It returns nil when nothing is to be sent now
// (window full or no unsent entry).
func (p *pipeline) next(now time.Time) *request {
	if !p.canSend() {
		return nil
	}
	p.resolveWaiting(now)
	var r *request
	add := func(it *item) bool {
		n := int64(len(it.e.Data))
		if r != nil && (len(r.items) >= p.lim.RequestEntries || r.bytes+n > p.lim.RequestBytes) {
			return false
		}
		if r == nil {
			r = &request{id: p.nextID, sentAt: now}
			p.nextID++
		}
		it.state = stateInflight
		r.items = append(r.items, it)
		r.bytes += n
		r.msgs += max(it.e.Messages, 1)
		return true
	}
	addSkip := func(it *item) bool {
		if r != nil && len(r.skipped) >= p.lim.RequestSkipped {
			return false
		}
		if r == nil {
			r = &request{id: p.nextID, sentAt: now}
			p.nextID++
		}
		it.state = stateInflight
		r.skipped = append(r.skipped, it)
		return true
	}
	// Released entries first: they precede, per origin, everything unsent
	// (the shell reads their data again first: missingData).
	for len(p.release) > 0 && p.release[0].e.Data != nil && add(p.release[0]) {
		p.release[0] = nil
		p.release = p.release[1:]
	}
	for len(p.release) == 0 && p.unsent < len(p.queue) {
		it := p.queue[p.unsent]
		origin := it.e.Origin
		if origin == "" {
			origin = p.self
		}
		v := p.classify(&it.e)
		if v == verdictSend && len(p.waiting[origin]) > 0 {
			// Earlier entries of this origin wait: keep the origin's order.
			v = verdictWait
		}
		switch v {
		case verdictSkip:
			it.state = stateDone
		case verdictNotFor:
			if it.e.Stream == "" {
				it.e.Stream = origin
			}
			if !addSkip(it) {
				goto done
			}
		case verdictWait:
			p.hold(it, origin, now)
			if len(p.release) > 0 {
				// Holding it released older entries: they go first.
				p.unsent++
				goto done
			}
		case verdictSend:
			if !add(it) {
				goto done
			}
		}
		p.unsent++
	}
done:
	if r != nil {
		p.reqs = append(p.reqs, r)
		p.inflightBytes += r.bytes
	}
	return r
}

// missingData returns the released entries whose data must be read again
// (after item.prev) before they can be sent; fill them with setData.
func (p *pipeline) missingData() []*item {
	var out []*item
	for _, it := range p.release {
		if it.e.Data == nil {
			out = append(out, it)
		}
	}
	return out
}

// setData gives a released entry its data back.
func (p *pipeline) setData(it *item, data []byte) {
	it.e.Data = data
	p.queueBytes += int64(len(data))
}

// probe returns an empty request, which the remote answers with its
// current applied positions and direct origins: waiting entries resolve
// even when nothing else is sent, and an idle stream shows it is alive.
// nil when requests are in flight (their acks carry the same news) or,
// unless idle is set, when no entry waits.
func (p *pipeline) probe(now time.Time, idle bool) *request {
	if len(p.reqs) > 0 || !idle && !p.hasWaiting() {
		return nil
	}
	r := &request{id: p.nextID, sentAt: now}
	p.nextID++
	p.reqs = append(p.reqs, r)
	return r
}

// ack applies the remote's answer to the oldest request in flight. A
// rejection returns an error wrapping ErrRejected: every entry from the
// first rejected one on is not replicated, and the session must end (the
// next one starts again from the cursor).
func (p *pipeline) ack(a *clientv1.ReplicateAck, now time.Time) (Progress, error) {
	var pr Progress
	if len(p.reqs) == 0 || p.reqs[0].id != a.GetRequestId() {
		return pr, fmt.Errorf("%w: ack for request %d, expected %s", ErrProtocol, a.GetRequestId(), p.expected())
	}
	r := p.reqs[0]
	if len(a.GetResults()) != len(r.items) {
		return pr, fmt.Errorf("%w: ack for request %d has %d results for %d entries", ErrProtocol, r.id, len(a.GetResults()), len(r.items))
	}
	p.reqs = p.reqs[1:]
	p.inflightBytes -= r.bytes
	p.win.sample(now.Sub(r.sentAt), r.bytes, now)
	p.view(a.GetApplied(), a.GetDirect())
	// The receiver records the skip reports before it applies the entries,
	// whatever their results.
	for _, it := range r.skipped {
		it.state = stateDone
	}
	pr.NotFor = len(r.skipped)
	for i, res := range a.GetResults() {
		it := r.items[i]
		switch res {
		case clientv1.ReplicateResult_REPLICATE_RESULT_PERSISTED:
			it.state, it.persisted = stateDone, true
			pr.Persisted++
			pr.PersistedBytes += int64(len(it.e.Data))
			pr.PersistedMsgs += max(it.e.Messages, 1)
		case clientv1.ReplicateResult_REPLICATE_RESULT_DUPLICATE, clientv1.ReplicateResult_REPLICATE_RESULT_GAP:
			it.state = stateDone
			pr.Skipped++
		case clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED:
			msg := a.GetError().GetMessage()
			if msg == "" {
				msg = "no reason given"
			}
			return pr, fmt.Errorf("%w: entry %s (origin %s seq %d): %s", ErrRejected, it.e.Pos, it.e.Origin, it.e.OriginSeq, msg)
		default:
			return pr, fmt.Errorf("%w: result %v for entry %s", ErrProtocol, res, it.e.Pos)
		}
	}
	return pr, nil
}

func (p *pipeline) expected() string {
	if len(p.reqs) == 0 {
		return "none"
	}
	return fmt.Sprint(p.reqs[0].id)
}

// advance drops the done prefix of the queue and returns the position of
// the last entry dropped (ok=false when nothing moved): the new
// mark-delete position.
func (p *pipeline) advance() (Position, bool) {
	n := 0
	for n < len(p.queue) && p.queue[n].state == stateDone {
		n++
	}
	if n == 0 {
		return Position{}, false
	}
	last := p.queue[n-1].e.Pos
	for _, it := range p.queue[:n] {
		p.queueBytes -= int64(len(it.e.Data))
	}
	clear(p.queue[:n])
	p.queue = p.queue[n:]
	p.unsent -= n
	return last, true
}

// oldest returns the publish time of the first entry not done (ok=false
// when the queue is empty).
func (p *pipeline) oldest() (int64, bool) {
	if len(p.queue) == 0 {
		return 0, false
	}
	return p.queue[0].e.PublishMs, true
}

// toProto renders a request.
func (r *request) toProto() *clientv1.ReplicateRequest {
	es := make([][]byte, len(r.items))
	for i, it := range r.items {
		es[i] = it.e.Data
	}
	return &clientv1.ReplicateRequest{Kind: &clientv1.ReplicateRequest_Entries{Entries: &clientv1.ReplicateEntries{RequestId: r.id, Entries: es,
		Skipped: skippedRanges(r.skipped)}}}
}

// skippedRanges renders entries not for the remote as origin_seq ranges,
// merging consecutive values of a stream (they come in log order, so per
// stream in origin order).
func skippedRanges(its []*item) []*clientv1.SkippedSeqs {
	var out []*clientv1.SkippedSeqs
	last := map[string]*clientv1.SkippedSeqs{}
	for _, it := range its {
		stream := it.e.Stream // set by next
		if r := last[stream]; r != nil && r.Last+1 == it.e.OriginSeq {
			r.Last = it.e.OriginSeq
			continue
		}
		r := &clientv1.SkippedSeqs{Stream: stream, First: it.e.OriginSeq, Last: it.e.OriginSeq}
		last[stream] = r
		out = append(out, r)
	}
	return out
}

// window sizes the bytes in flight to twice the bandwidth-delay product
// (BBR's cwnd gain): the delivery rate is the highest seen over the last
// rateSamples intervals, the delay the lowest round trip of the last
// minRTTWindow. Twice the product keeps the link busy while acks travel
// back and lets the window double per round trip while the link has room.
type window struct {
	minW, maxW int64
	size       int64

	minRTT   time.Duration
	minRTTAt time.Time

	intervalStart time.Time
	intervalBytes int64
	rates         [rateSamples]float64 // bytes/s
	rateIdx       int
}

const (
	rateSamples    = 8
	rateInterval   = 100 * time.Millisecond
	minRTTLifetime = 10 * time.Second
)

func (w *window) init(minW, maxW int64) {
	w.minW, w.maxW, w.size = minW, maxW, minW
}

func (w *window) sample(rtt time.Duration, bytes int64, now time.Time) {
	if rtt <= 0 {
		rtt = time.Microsecond
	}
	if w.minRTT == 0 || rtt <= w.minRTT || now.Sub(w.minRTTAt) > minRTTLifetime {
		w.minRTT, w.minRTTAt = rtt, now
	}
	if w.intervalStart.IsZero() {
		w.intervalStart = now.Add(-rtt)
	}
	w.intervalBytes += bytes
	if d := now.Sub(w.intervalStart); d >= rateInterval {
		w.rates[w.rateIdx%rateSamples] = float64(w.intervalBytes) / d.Seconds()
		w.rateIdx++
		w.intervalStart, w.intervalBytes = now, 0
	}
	var bw float64
	for _, r := range w.rates {
		bw = max(bw, r)
	}
	target := int64(2 * bw * w.minRTT.Seconds())
	w.size = min(max(target, w.minW), w.maxW)
}

// RTT returns the lowest recent round trip (0 before the first ack).
func (w *window) RTT() time.Duration { return w.minRTT }
