package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
)

// Writer appends entries to one open ledger. Entry IDs are 0, 1, 2, ...;
// an entry is reported added once AckQuorum bookies of its write set made
// it durable and every earlier entry was reported added. Safe for
// concurrent use; callbacks run on one goroutine, in entry order.
type Writer struct {
	c   *Client
	id  int64
	log *slog.Logger
	qa  int

	// slots is the in-flight window: one token per add sent but not yet
	// reported. AppendAsync blocks while it is full.
	slots chan struct{}
	// completions carries reported adds, in entry order, to the goroutine
	// that runs callbacks. Its capacity equals the window, so sends under
	// mu never block. It is made, and the goroutines started, at the first
	// add (startOnce): a ledger opened and never written (an idle topic's)
	// holds neither the buffer nor the goroutines.
	completions chan *pendingAdd
	startOnce   sync.Once
	stop        chan struct{}
	wg          sync.WaitGroup
	closeMu     sync.Mutex // serialises Close

	// mu guards the fields below.
	mu       sync.Mutex
	md       *Metadata
	ensemble []topology.BookieInfo // current (last) segment's ensemble
	next     int64                 // next entry ID to assign
	lac      int64                 // last entry reported added
	length   int64                 // payload bytes of entries 0..lac
	pending  []*pendingAdd         // entries lac+1.., in order
	failed   map[string]bool       // bookies of the current ensemble that failed (by ID)
	// quarantine records when each bookie last failed; recently failed
	// bookies are avoided as replacements while others are available.
	quarantine map[string]time.Time
	changing   bool // an ensemble change is running; completion is frozen
	changes    int
	err        error // terminal error (fenced, ...); set once
	closing    bool
	closed     bool
}

// pendingAdd is one entry between AppendAsync and its report.
type pendingAdd struct {
	entry  int64
	data   []byte
	cb     func(int64, error)
	start  time.Time
	sentAt time.Time
	ws     []int    // ensemble positions of the write set
	sent   []string // per write-set member: the bookie ID it was sent to ("" = not sent)
	acked  []bool   // per write-set member: the bookie in sent[i] confirmed
	done   bool
	err    error
	busy   int // back-pressure retries so far (for the backoff)
}

func (p *pendingAdd) ackCount() int {
	n := 0
	for _, a := range p.acked {
		if a {
			n++
		}
	}
	return n
}

// sendOp is one add to send once mu is released.
type sendOp struct {
	p     *pendingAdd
	i     int // write-set index
	b     topology.BookieInfo
	lac   int64
	entry int64
}

func newWriter(c *Client, md *Metadata) *Writer {
	w := &Writer{
		c:          c,
		id:         md.ID,
		log:        c.log.With("ledger", md.ID),
		qa:         md.AckQuorum,
		slots:      make(chan struct{}, c.cfg.MaxInFlight),
		stop:       make(chan struct{}),
		md:         md,
		ensemble:   append([]topology.BookieInfo(nil), md.Segments[len(md.Segments)-1].Ensemble...),
		next:       0,
		lac:        -1,
		failed:     make(map[string]bool),
		quarantine: make(map[string]time.Time),
	}
	return w
}

// start makes the completion queue and starts the callback and timeout
// goroutines; once, at the first add (see completions).
func (w *Writer) start() {
	w.startOnce.Do(func() {
		w.completions = make(chan *pendingAdd, w.c.cfg.MaxInFlight)
		w.wg.Add(2)
		go w.completeLoop()
		go w.timeoutLoop()
	})
}

// ID returns the ledger ID.
func (w *Writer) ID() int64 { return w.id }

// LastAddConfirmed returns the last entry reported added (-1 if none).
func (w *Writer) LastAddConfirmed() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lac
}

// Append adds data and waits until it is added. If ctx ends first the
// outcome is unknown: the entry may still be added later.
func (w *Writer) Append(ctx context.Context, data []byte) (int64, error) {
	type result struct {
		id  int64
		err error
	}
	ch := make(chan result, 1)
	if err := w.appendAsync(ctx, data, func(id int64, err error) { ch <- result{id, err} }); err != nil {
		return -1, err
	}
	select {
	case r := <-ch:
		return r.id, r.err
	case <-ctx.Done():
		return -1, fmt.Errorf("ledger: append to %d: outcome unknown: %w", w.id, ctx.Err())
	}
}

// AppendAsync adds data and calls cb with its entry ID once it is added, or
// with an error (entry ID -1 if none was assigned). Callbacks run in entry
// order on the Writer's callback goroutine and must not block for long; a
// callback must not call Append, AppendAsync or Close (the window slot of
// its entry is freed only after it returns). AppendAsync blocks while
// MaxInFlight adds are outstanding. The Writer keeps data until the
// callback; the caller must not modify it.
func (w *Writer) AppendAsync(data []byte, cb func(entryID int64, err error)) {
	if err := w.appendAsync(context.Background(), data, cb); err != nil {
		cb(-1, err)
	}
}

// appendAsync returns an error (without calling cb) when the add was not
// accepted.
func (w *Writer) appendAsync(ctx context.Context, data []byte, cb func(int64, error)) error {
	if len(data) > w.c.cfg.MaxEntryBytes {
		return invalidf("entry of %d bytes exceeds MaxEntryBytes %d", len(data), w.c.cfg.MaxEntryBytes)
	}
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("ledger: append to %d: %w", w.id, ctx.Err())
	}
	// Holding a slot: Close cannot be past taking the whole window, so it
	// has not yet disabled start.
	w.start()
	w.mu.Lock()
	if err := w.unusableLocked(); err != nil {
		if w.closed {
			// Every earlier callback has run (Close drained them).
			w.mu.Unlock()
			<-w.slots
			return err
		}
		// Report through the callback goroutine so this error comes after
		// the callbacks of every earlier entry.
		w.c.m.inFlight.Inc()
		w.completions <- &pendingAdd{entry: -1, data: data, cb: cb, err: err, done: true}
		w.mu.Unlock()
		return nil
	}
	w.c.m.inFlight.Inc()
	now := time.Now()
	ws := writeSet(w.next, w.md.Ensemble, w.md.WriteQuorum)
	p := &pendingAdd{
		entry: w.next,
		data:  data,
		cb:    cb,
		start: now,
		ws:    ws,
		sent:  make([]string, len(ws)),
		acked: make([]bool, len(ws)),
	}
	w.next++
	w.pending = append(w.pending, p)
	var sends []sendOp
	if !w.changing {
		sends = w.sendsForLocked(p, nil)
	}
	w.mu.Unlock()
	w.send(sends)
	return nil
}

func (w *Writer) unusableLocked() error {
	if w.err != nil {
		return w.err
	}
	if w.closing || w.closed {
		return fmt.Errorf("%w: writer of ledger %d", ErrLedgerClosed, w.id)
	}
	return nil
}

// sendsForLocked appends to sends the adds p still needs in the current
// ensemble and marks them sent.
func (w *Writer) sendsForLocked(p *pendingAdd, sends []sendOp) []sendOp {
	for i, pos := range p.ws {
		b := w.ensemble[pos]
		if p.sent[i] == b.ID {
			continue
		}
		p.sent[i] = b.ID
		p.acked[i] = false
		p.sentAt = time.Now()
		sends = append(sends, sendOp{p: p, i: i, b: b, lac: w.lac, entry: p.entry})
	}
	return sends
}

// send issues adds; called without mu (it may block on a bookie's queue).
func (w *Writer) send(sends []sendOp) {
	for _, s := range sends {
		s := s
		bc, err := w.c.conn(s.b)
		if err != nil {
			w.onResult(s.p, s.i, s.b.ID, asBookieError(s.b.ID, err))
			continue
		}
		bc.add(&bookiev1.AddEntryRequest{
			LedgerId:         w.id,
			EntryId:          s.entry,
			Payload:          s.p.data,
			LastAddConfirmed: s.lac,
		}, func(err error) { w.onResult(s.p, s.i, s.b.ID, err) })
	}
}

// onResult handles one bookie's answer for one entry.
func (w *Writer) onResult(p *pendingAdd, i int, bookieID string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.closed || p.sent[i] != bookieID {
		return // writer failed or closed, or a stale answer from a replaced bookie
	}
	if err == nil {
		if !p.done && !w.failed[bookieID] {
			p.acked[i] = true
			w.completeLocked()
		}
		return
	}
	// A failure counts even for an entry already reported (Qa confirmed
	// without this bookie): the bookie must still leave the ensemble, and a
	// fence must still stop the writer.
	switch classify(err) {
	case kindFenced:
		// Never change ensemble around a fence: someone is recovering the ledger.
		w.c.m.fenced.Inc()
		w.failLocked(fmt.Errorf("%w: ledger %d fenced on bookie %s", ErrLedgerFenced, w.id, bookieID))
		return
	case kindInvalid:
		// Another bookie would refuse it too (e.g. its entry size limit is
		// below ours): changing ensemble would not help.
		w.failLocked(fmt.Errorf("%w: bookie %s refused entry %d: %v", ErrInvalidArgument, bookieID, p.entry, err))
		return
	case kindBusy:
		// Back-pressure, not a failure: the bookie did not add it and asks
		// us to slow down. Resend to the same bookie after a backoff; one
		// that stays busy for AddTimeout is replaced by timeoutLoop.
		w.retryBusyLocked(p, i, bookieID)
		return
	}
	if !w.failed[bookieID] {
		w.log.Warn("bookie failed an add; changing ensemble", "bookie", bookieID, "entry", p.entry, "err", err)
	}
	w.bookieFailedLocked(bookieID)
}

// Backoff for adds a bookie refused as "too many in flight".
const (
	busyBackoffMin = 5 * time.Millisecond
	busyBackoffMax = 200 * time.Millisecond
)

// retryBusyLocked resends p's add to write-set member i (bookieID) after a
// backoff, unless by then the writer failed, the member was replaced or it
// confirmed. During an ensemble change it waits another backoff.
func (w *Writer) retryBusyLocked(p *pendingAdd, i int, bookieID string) {
	d := min(busyBackoffMin<<min(p.busy, 6), busyBackoffMax)
	p.busy++
	w.c.m.busyRetries.Inc()
	time.AfterFunc(d, func() {
		w.mu.Lock()
		if w.err != nil || w.closed || p.sent[i] != bookieID || p.acked[i] || w.failed[bookieID] {
			w.mu.Unlock()
			return
		}
		if w.changing {
			w.retryBusyLocked(p, i, bookieID)
			w.mu.Unlock()
			return
		}
		b := w.ensemble[p.ws[i]]
		if b.ID != bookieID {
			w.mu.Unlock()
			return
		}
		s := sendOp{p: p, i: i, b: b, lac: w.lac, entry: p.entry}
		w.mu.Unlock()
		w.send([]sendOp{s})
	})
}

func (w *Writer) bookieFailedLocked(bookieID string) {
	if w.c.isClosed() {
		// Not the bookie's fault: never change ensemble on a closed client.
		w.failLocked(fmt.Errorf("%w: client closed under writer of ledger %d", ErrLedgerClosed, w.id))
		return
	}
	w.failed[bookieID] = true
	w.quarantine[bookieID] = time.Now()
	if !w.changing && w.err == nil {
		w.changing = true
		w.wg.Add(1)
		go w.changeEnsemble()
	}
}

// completeLocked reports, in order, every head entry that reached Qa.
func (w *Writer) completeLocked() {
	if w.changing {
		return // the new segment starts at lac+1: lac must not move meanwhile
	}
	n := 0
	for _, p := range w.pending {
		if p.ackCount() < w.qa {
			break
		}
		p.done = true
		w.lac = p.entry
		w.length += int64(len(p.data))
		w.completions <- p
		n++
	}
	if n > 0 {
		clear(w.pending[:n])
		w.pending = w.pending[n:]
	}
}

// failLocked ends the writer with err and fails every pending add.
func (w *Writer) failLocked(err error) {
	if w.err != nil {
		return
	}
	w.err = err
	w.log.Warn("writer failed", "err", err)
	for _, p := range w.pending {
		p.done = true
		p.err = err
		w.completions <- p
	}
	w.pending = nil
}

// completeLoop runs callbacks in entry order and frees window slots.
func (w *Writer) completeLoop() {
	defer w.wg.Done()
	for p := range w.completions {
		if p.err != nil {
			w.c.m.adds.WithLabelValues("error").Inc()
			p.cb(p.entry, p.err)
		} else {
			w.c.m.adds.WithLabelValues("ok").Inc()
			w.c.m.addBytes.Add(float64(len(p.data)))
			w.c.m.addLatency.Observe(time.Since(p.start).Seconds())
			p.cb(p.entry, nil)
		}
		w.c.m.inFlight.Dec()
		<-w.slots
	}
}

// timeoutLoop treats a bookie that has not answered an add within
// AddTimeout as failed.
func (w *Writer) timeoutLoop() {
	defer w.wg.Done()
	tick := w.c.cfg.AddTimeout / 4
	if tick < 10*time.Millisecond {
		tick = 10 * time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case now := <-t.C:
			w.mu.Lock()
			for _, p := range w.pending {
				if p.sentAt.IsZero() || now.Sub(p.sentAt) < w.c.cfg.AddTimeout {
					continue
				}
				for i, b := range p.sent {
					if b != "" && !p.acked[i] && !w.failed[b] {
						w.log.Warn("bookie add timed out; changing ensemble", "bookie", b, "entry", p.entry)
						w.bookieFailedLocked(b)
					}
				}
			}
			w.mu.Unlock()
		}
	}
}

// changeEnsemble replaces every failed bookie of the current ensemble with
// a new segment starting at lac+1, recorded by CAS, then resends. It runs
// until no failed bookie is left in the ensemble. Completion is frozen
// meanwhile, so lac (and the new segment's first entry) cannot move.
func (w *Writer) changeEnsemble() {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		if w.err != nil || w.closed {
			w.changing = false
			w.mu.Unlock()
			return
		}
		var positions []int
		for pos, b := range w.ensemble {
			if w.failed[b.ID] {
				positions = append(positions, pos)
			}
		}
		if len(positions) == 0 {
			w.changing = false
			var sends []sendOp
			for _, p := range w.pending {
				sends = w.sendsForLocked(p, sends)
			}
			w.completeLocked()
			w.mu.Unlock()
			w.send(sends)
			return
		}
		if w.changes >= w.c.cfg.MaxEnsembleChanges {
			w.failLocked(fmt.Errorf("ledger: ledger %d: gave up after %d ensemble changes", w.id, w.changes))
			w.changing = false
			w.mu.Unlock()
			return
		}
		ensemble := append([]topology.BookieInfo(nil), w.ensemble...)
		exclude := make(map[string]bool, len(w.failed)+len(ensemble))
		for id := range w.failed {
			exclude[id] = true
		}
		for _, b := range ensemble {
			exclude[b.ID] = true
		}
		avoid := make(map[string]bool)
		for id, at := range w.quarantine {
			if time.Since(at) < bookieQuarantine {
				avoid[id] = true
			} else {
				delete(w.quarantine, id)
			}
		}
		first := w.lac + 1
		w.mu.Unlock()

		newEns, md, err := w.recordEnsembleChange(ensemble, positions, exclude, avoid, first)
		w.mu.Lock()
		if err != nil {
			w.failLocked(err)
			w.changing = false
			w.mu.Unlock()
			return
		}
		changed := make(map[int]bool, len(positions))
		for _, pos := range positions {
			changed[pos] = true
		}
		w.md = md
		w.ensemble = newEns
		w.changes++
		// Replaced bookies are out of the ensemble: their late answers are
		// ignored (sent[] no longer names them), and once back they may be
		// chosen again (after the quarantine, or when nothing else is left).
		inEns := make(map[string]bool, len(newEns))
		for _, b := range newEns {
			inEns[b.ID] = true
		}
		for id := range w.failed {
			if !inEns[id] {
				delete(w.failed, id)
			}
		}
		w.c.m.ensembleChanges.Inc()
		for _, p := range w.pending {
			for i, pos := range p.ws {
				if changed[pos] {
					p.sent[i] = ""
					p.acked[i] = false
				}
			}
		}
		w.log.Info("ensemble changed", "first_entry", first, "ensemble", bookieIDs(newEns))
		w.mu.Unlock()
	}
}

// bookieQuarantine is how long a bookie that failed an add is avoided as a
// replacement while other bookies are available: long enough to skip a
// crashed bookie until its registration expires, short enough that a
// restarted one is used again.
const bookieQuarantine = 30 * time.Second

// recordEnsembleChange picks replacements for positions (never one in
// exclude; one in avoid only if nothing else fits) and records the new
// segment by CAS. A ledger no longer open means someone fenced it.
func (w *Writer) recordEnsembleChange(ensemble []topology.BookieInfo, positions []int,
	exclude, avoid map[string]bool, first int64) ([]topology.BookieInfo, *Metadata, error) {
	ctx, cancel := context.WithTimeout(context.Background(), w.c.cfg.MetadataTimeout)
	defer cancel()
	var md *Metadata
	// Re-read first (never decide on a stale copy): if someone started
	// recovering the ledger, the failure may be a fence in disguise, and
	// there is nothing to replace.
	for {
		cur, err := w.c.meta.get(ctx, w.id)
		if err == nil {
			md = cur
			break
		}
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("ledger %d: re-read metadata before ensemble change: %w", w.id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if md.State != StateOpen {
		return nil, nil, fmt.Errorf("%w: ledger %d is %s", ErrLedgerFenced, w.id, md.State)
	}
	// Then ask the ensemble: a bookie that answers fenced means a recovery
	// is under way even if its answer to our add has not arrived yet (or
	// the failed bookie's error overtook it). Never change around a fence.
	if b := w.fencedMember(ctx, ensemble, positions); b != "" {
		return nil, nil, fmt.Errorf("%w: ledger %d fenced on bookie %s", ErrLedgerFenced, w.id, b)
	}
	candidates, err := w.c.writableBookies(ctx)
	if err != nil {
		return nil, nil, err
	}
	newEns := append([]topology.BookieInfo(nil), ensemble...)
	for _, pos := range positions {
		both := make(map[string]bool, len(exclude)+len(avoid))
		for id := range exclude {
			both[id] = true
		}
		for id := range avoid {
			both[id] = true
		}
		b, err := w.c.cfg.Placement.ReplaceBookie(newEns, md.WriteQuorum, pos, candidates, both)
		if errors.Is(err, topology.ErrNotEnoughBookies) && len(avoid) > 0 {
			b, err = w.c.cfg.Placement.ReplaceBookie(newEns, md.WriteQuorum, pos, candidates, exclude)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("ledger %d: replace bookie %s: %w", w.id, ensemble[pos].ID, wrapPlacement(err))
		}
		newEns[pos] = b
		exclude[b.ID] = true
	}
	for {
		if md.State != StateOpen {
			return nil, nil, fmt.Errorf("%w: ledger %d is %s", ErrLedgerFenced, w.id, md.State)
		}
		last := &md.Segments[len(md.Segments)-1]
		if last.FirstEntry == first {
			last.Ensemble = newEns
		} else {
			md.Segments = append(md.Segments, Segment{FirstEntry: first, Ensemble: newEns})
		}
		err := w.c.meta.cas(ctx, md)
		if err == nil {
			return newEns, md, nil
		}
		if !errors.Is(err, metadata.ErrVersionMismatch) {
			if ctx.Err() != nil {
				return nil, nil, fmt.Errorf("ledger %d: record ensemble change: %w", w.id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cur, gerr := w.c.meta.get(ctx, w.id)
		if gerr != nil {
			return nil, nil, fmt.Errorf("ledger %d: record ensemble change: %w (re-read: %v)", w.id, err, gerr)
		}
		md = cur
	}
}

// fencedMember asks the bookies of ensemble except those at the failed
// positions (they just failed; a hung one would only delay the change),
// in parallel, whether the ledger is fenced there; it returns the ID of
// one that says so, or "". Bookies that do not answer within ReadTimeout
// are skipped.
func (w *Writer) fencedMember(ctx context.Context, ensemble []topology.BookieInfo, failed []int) string {
	ctx, cancel := context.WithTimeout(ctx, w.c.cfg.ReadTimeout)
	defer cancel()
	found := make(chan string, len(ensemble))
	asked := 0
	for pos, b := range ensemble {
		if slices.Contains(failed, pos) {
			continue
		}
		asked++
		go func() {
			bc, err := w.c.conn(b)
			if err == nil {
				var r *bookiev1.ReadLastAddConfirmedResponse
				r, err = bc.client.ReadLastAddConfirmed(ctx, &bookiev1.ReadLastAddConfirmedRequest{LedgerId: w.id})
				if err == nil && r.Fenced {
					found <- b.ID
					return
				}
			}
			if err != nil && classify(asBookieError(b.ID, err)) == kindFenced {
				found <- b.ID
				return
			}
			found <- ""
		}()
	}
	for range asked {
		if id := <-found; id != "" {
			return id
		}
	}
	return ""
}

// Close waits for outstanding adds, then records the ledger closed at
// LastAddConfirmed by CAS, and stops the Writer's goroutines (always call
// it). If the Writer failed earlier it returns that error and leaves the
// ledger's metadata alone: after a fence (ErrLedgerFenced) the recoverer
// closes it; after any other failure the owner should OpenRecover it. If
// ctx ends while adds are outstanding, Close returns the ctx error and may
// be called again.
func (w *Writer) Close(ctx context.Context) error {
	// One Close at a time: two would each hold part of the window.
	w.closeMu.Lock()
	defer w.closeMu.Unlock()
	w.mu.Lock()
	if w.closed {
		err := w.err
		w.mu.Unlock()
		return err
	}
	w.closing = true
	w.mu.Unlock()

	// Take every window slot: then every callback has run.
	for i := 0; i < cap(w.slots); i++ {
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			for ; i > 0; i-- {
				<-w.slots
			}
			return fmt.Errorf("ledger: close %d: waiting for adds: %w", w.id, ctx.Err())
		}
	}
	defer func() {
		for i := 0; i < cap(w.slots); i++ {
			<-w.slots
		}
	}()
	w.mu.Lock()
	werr, lac, length, md := w.err, w.lac, w.length, w.md.clone()
	w.mu.Unlock()

	if werr == nil {
		werr = w.recordClose(ctx, md, lac, length)
		if werr != nil && ctx.Err() != nil {
			return werr // retryable
		}
	}
	// Every slot is held, so no add is between its slot and start: a
	// Writer never written is closed without ever starting its goroutines.
	w.startOnce.Do(func() {})
	w.mu.Lock()
	w.closed = true
	if w.err == nil {
		w.err = werr
	}
	w.mu.Unlock()
	close(w.stop)
	if w.completions != nil {
		close(w.completions)
	}
	w.wg.Wait()
	return werr
}

func (w *Writer) recordClose(ctx context.Context, md *Metadata, lac, length int64) error {
	for {
		switch md.State {
		case StateClosed:
			if md.LastEntry < lac {
				w.log.Error("ledger closed by another client before entries this writer reported added",
					"last_entry", md.LastEntry, "lac", lac)
				return fmt.Errorf("%w: ledger %d closed at %d before %d", ErrLedgerFenced, w.id, md.LastEntry, lac)
			}
			return nil
		case StateInRecovery:
			return fmt.Errorf("%w: ledger %d in recovery", ErrLedgerFenced, w.id)
		}
		md.State = StateClosed
		md.LastEntry = lac
		md.Length = length
		err := w.c.meta.cas(ctx, md)
		if err == nil {
			return nil
		}
		if !errors.Is(err, metadata.ErrVersionMismatch) {
			if ctx.Err() != nil {
				return fmt.Errorf("ledger: close %d: %w", w.id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cur, gerr := w.c.meta.get(ctx, w.id)
		if gerr != nil {
			return fmt.Errorf("ledger: close %d: %w (re-read: %v)", w.id, err, gerr)
		}
		md = cur
	}
}
