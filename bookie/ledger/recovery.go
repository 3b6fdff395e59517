package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
)

// OpenRecover opens ledger id for reading after making sure no writer can
// add to it any more: it marks the ledger in-recovery (CAS), fences it on
// the last segment's bookies, finds the last entry that can have been
// reported added, re-replicates the tail with recovery adds and closes the
// ledger there (CAS). If the ledger is (or gets, by a concurrent recovery)
// closed, it returns the closed view. ErrLedgerRecovering means too few
// bookies answered to decide; the ledger stays in-recovery and the call
// can be retried.
func (c *Client) OpenRecover(ctx context.Context, id int64) (*Reader, error) {
	r, result, err := c.recoverLedger(ctx, id)
	c.m.recoveries.WithLabelValues(result).Inc()
	return r, err
}

func (c *Client) recoverLedger(ctx context.Context, id int64) (*Reader, string, error) {
	log := c.log.With("ledger", id)
	md, err := c.meta.get(ctx, id)
	if err != nil {
		return nil, "error", err
	}
	for md.State == StateOpen {
		next := md.clone()
		next.version = md.version
		next.State = StateInRecovery
		err := c.meta.cas(ctx, next)
		if err == nil {
			md = next
			break
		}
		if !errors.Is(err, metadata.ErrVersionMismatch) {
			return nil, "error", fmt.Errorf("ledger: mark %d in-recovery: %w", id, err)
		}
		if md, err = c.meta.get(ctx, id); err != nil {
			return nil, "error", err
		}
	}
	if md.State == StateClosed {
		return newReader(c, md), "already_closed", nil
	}
	c.refreshRegistry(ctx)

	seg := md.Segments[len(md.Segments)-1]
	lac, err := c.fenceSegment(ctx, md, seg)
	if err != nil {
		return nil, "error", err
	}
	if f := seg.FirstEntry - 1; f > lac {
		lac = f
	}
	last, moved, err := c.recoverTail(ctx, md, seg, lac)
	if err != nil {
		return nil, "error", err
	}

	for {
		closed := md.clone()
		closed.version = md.version
		closed.State = StateClosed
		closed.LastEntry = last
		closed.Length = -1
		if moved != nil {
			// The tail was copied to a new ensemble: record it in the same
			// write that closes the ledger (see recoverTail).
			cur := closed.Segments[len(closed.Segments)-1]
			if cur.FirstEntry != seg.FirstEntry || !sameEnsemble(cur.Ensemble, seg.Ensemble) {
				return nil, "error", fmt.Errorf("%w: ledger %d: last segment changed during recovery", ErrLedgerRecovering, id)
			}
			if moved.FirstEntry == cur.FirstEntry {
				closed.Segments[len(closed.Segments)-1] = *moved
			} else {
				closed.Segments = append(closed.Segments, *moved)
			}
		}
		err := c.meta.cas(ctx, closed)
		if err == nil {
			log.Info("ledger recovered and closed", "last_entry", last, "fenced_lac", lac, "tail_moved", moved != nil)
			return newReader(c, closed), "recovered", nil
		}
		if !errors.Is(err, metadata.ErrVersionMismatch) {
			return nil, "error", fmt.Errorf("ledger: close recovered %d: %w", id, err)
		}
		if md, err = c.meta.get(ctx, id); err != nil {
			return nil, "error", err
		}
		if md.State == StateClosed {
			if md.LastEntry != last {
				log.Warn("concurrent recovery closed the ledger at another entry", "ours", last, "theirs", md.LastEntry)
			}
			return newReader(c, md), "already_closed", nil
		}
		if md.State == StateOpen {
			// Cannot happen (no client reopens a ledger); refuse to guess.
			return nil, "error", fmt.Errorf("ledger: %d went back to open during recovery", id)
		}
	}
}

// fenceSegment fences the ledger on the segment's bookies and returns the
// highest last-add-confirmed they report. It needs, for every write set,
// at least Qw-Qa+1 bookies to have answered: then no write set can still
// collect Qa confirmations without a fenced bookie, so the old writer can
// report nothing more.
func (c *Client) fenceSegment(ctx context.Context, md *Metadata, seg Segment) (int64, error) {
	type res struct {
		pos int
		lac int64
		err error
	}
	ch := make(chan res, len(seg.Ensemble))
	for pos, b := range seg.Ensemble {
		go func(pos int, b topology.BookieInfo) {
			bc, err := c.conn(b)
			if err != nil {
				ch <- res{pos, -1, err}
				return
			}
			rctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
			defer cancel()
			resp, err := bc.client.Fence(rctx, &bookiev1.FenceRequest{LedgerId: md.ID})
			if err != nil {
				ch <- res{pos, -1, asBookieError(b.ID, err)}
				return
			}
			ch <- res{pos, resp.LastAddConfirmed, nil}
		}(pos, b)
	}
	fenced := make([]bool, len(seg.Ensemble))
	lac := int64(-1)
	var errs []error
	need := md.WriteQuorum - md.AckQuorum + 1
	for range seg.Ensemble {
		x := <-ch
		if x.err != nil {
			errs = append(errs, x.err)
			continue
		}
		fenced[x.pos] = true
		lac = max(lac, x.lac)
		// Enough fenced: go on without waiting for slow bookies (the LAC
		// is only where reading forward starts; the tail is found by
		// fencing reads anyway).
		if ok, _, _ := fenceCovers(fenced, md, need); ok {
			return lac, nil
		}
	}
	if ok, start, n := fenceCovers(fenced, md, need); !ok {
		return -1, fmt.Errorf("%w: ledger %d: fenced %d of the write set at position %d, need %d: %w",
			ErrLedgerRecovering, md.ID, n, start, need, errors.Join(errs...))
	}
	return lac, nil
}

// fenceCovers reports whether every write set has at least need fenced
// bookies, else the first write set (by start position) that has not.
func fenceCovers(fenced []bool, md *Metadata, need int) (bool, int, int) {
	for start := 0; start < md.Ensemble; start++ {
		n := 0
		for _, pos := range writeSet(int64(start), md.Ensemble, md.WriteQuorum) {
			if fenced[pos] {
				n++
			}
		}
		if n < need {
			return false, start, n
		}
	}
	return true, 0, 0
}

// recoverTail reads forward from lac+1 with fencing reads. An entry is
// recoverable if any replica has it; the ledger ends before the first entry
// that at least Qw-Qa+1 replicas of its write set positively do not store
// (then it cannot have reached Qa). Anything else (corrupt, unreachable)
// leaves the end undecided. Recovered entries are re-added to their write
// set with the recovery flag; each needs Qa confirmations.
//
// When a re-add cannot reach Qa because bookies of the segment failed (a
// bookie gone for good with Qw = Qa), the tail moves: moveTail copies
// lac+1..end to an ensemble with the failed bookies replaced and returns
// that segment, which the caller records in the same compare-and-set that
// closes the ledger. Until then the metadata never names a bookie that
// lacks the tail, so a recovery that crashes half-way can never read the
// replacement's "not found" as the end of the ledger.
func (c *Client) recoverTail(ctx context.Context, md *Metadata, seg Segment, lac int64) (int64, *Segment, error) {
	need := md.WriteQuorum - md.AckQuorum + 1
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		addErr  error
		failed  = map[string]bool{} // bookies whose failure left a re-add short of Qa
		window  = make(chan struct{}, c.cfg.MaxInFlight)
		setFail = func(err error) {
			errMu.Lock()
			if addErr == nil {
				addErr = err
				cancel()
			}
			errMu.Unlock()
		}
	)
	e := lac + 1
	for {
		data, missing, err := c.recoveryRead(ctx, md, seg, e, need)
		if err != nil {
			wg.Wait()
			if addErr != nil {
				// A failed re-add cancelled ctx: report it, not the
				// cancellation it caused.
				return -1, nil, fmt.Errorf("%w: ledger %d: re-replicating entry: %w", ErrLedgerRecovering, md.ID, addErr)
			}
			return -1, nil, err
		}
		if missing {
			break
		}
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		c.recoveryAdd(md, seg, e, lac, data, func(bad []string, err error) {
			if err != nil {
				if len(bad) == 0 {
					setFail(err)
				} else {
					errMu.Lock()
					for _, id := range bad {
						failed[id] = true
					}
					errMu.Unlock()
				}
			}
			<-window
			wg.Done()
		})
		e++
	}
	wg.Wait()
	if addErr != nil {
		return -1, nil, fmt.Errorf("%w: ledger %d: re-replicating entry: %w", ErrLedgerRecovering, md.ID, addErr)
	}
	if err := ctx.Err(); err != nil {
		return -1, nil, err
	}
	last := e - 1
	if len(failed) == 0 {
		return last, nil, nil
	}
	moved, err := c.moveTail(ctx, md, seg, lac, last, failed)
	if err != nil {
		return -1, nil, err
	}
	return last, moved, nil
}

// moveTail copies entries lac+1..last (read from the current segments) to
// seg's ensemble with every failed bookie replaced, with recovery adds
// that each need Qa confirmations, and returns the new segment starting
// at lac+1. A replacement that fails too is replaced in turn, up to
// MaxEnsembleChanges times.
func (c *Client) moveTail(ctx context.Context, md *Metadata, seg Segment, lac, last int64, failed map[string]bool) (*Segment, error) {
	log := c.log.With("ledger", md.ID)
	ens := append([]topology.BookieInfo(nil), seg.Ensemble...)
	exclude := make(map[string]bool, len(ens)+len(failed))
	for _, b := range ens {
		exclude[b.ID] = true
	}
	for attempt := 0; ; attempt++ {
		if attempt > max(c.cfg.MaxEnsembleChanges, 1) {
			return nil, fmt.Errorf("%w: ledger %d: gave up moving the tail after %d ensemble changes", ErrLedgerRecovering, md.ID, attempt-1)
		}
		candidates, err := c.writableBookies(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w: ledger %d: list bookies: %w", ErrLedgerRecovering, md.ID, err)
		}
		var replaced []string
		for pos, b := range ens {
			if !failed[b.ID] {
				continue
			}
			for id := range failed {
				exclude[id] = true
			}
			nb, err := c.cfg.Placement.ReplaceBookie(ens, md.WriteQuorum, pos, candidates, exclude)
			if err != nil {
				return nil, fmt.Errorf("%w: ledger %d: replace bookie %s for the recovered tail: %w", ErrLedgerRecovering, md.ID, b.ID, wrapPlacement(err))
			}
			replaced = append(replaced, b.ID+"->"+nb.ID)
			ens[pos] = nb
			exclude[nb.ID] = true
		}
		c.m.ensembleChanges.Inc()
		log.Warn("recovery moves the tail away from failed bookies", "first_entry", lac+1, "last_entry", last,
			"replaced", replaced, "ensemble", bookieIDs(ens))
		bad, err := c.copyTail(ctx, md, Segment{FirstEntry: lac + 1, Ensemble: ens}, lac, last)
		if err != nil {
			return nil, err
		}
		if len(bad) == 0 {
			return &Segment{FirstEntry: lac + 1, Ensemble: ens}, nil
		}
		failed = bad
	}
}

// copyTail reads first..last from md's segments in batches and re-adds
// them to to's write sets with recovery adds. It returns the bookies whose
// failures left an entry short of Qa (nil: all reached Qa), or an error
// that another ensemble would not cure.
func (c *Client) copyTail(ctx context.Context, md *Metadata, to Segment, lac, last int64) (map[string]bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		hard   error
		failed = map[string]bool{}
		window = make(chan struct{}, c.cfg.MaxInFlight)
	)
	batch := int64(max(1, min(c.cfg.MaxInFlight, 256)))
	for first := lac + 1; first <= last && ctx.Err() == nil; first += batch {
		ents, err := c.readEntries(ctx, md, first, min(first+batch-1, last))
		if err != nil {
			cancel()
			wg.Wait()
			return nil, fmt.Errorf("%w: ledger %d: read tail to move it: %w", ErrLedgerRecovering, md.ID, err)
		}
		for _, en := range ents {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
			wg.Add(1)
			c.recoveryAdd(md, to, en.EntryID, lac, en.Data, func(bad []string, err error) {
				mu.Lock()
				if err != nil {
					if len(bad) == 0 && hard == nil {
						hard = err
						cancel()
					}
					for _, id := range bad {
						failed[id] = true
					}
				}
				mu.Unlock()
				<-window
				wg.Done()
			})
		}
	}
	wg.Wait()
	if hard != nil {
		return nil, fmt.Errorf("%w: ledger %d: re-replicating entry: %w", ErrLedgerRecovering, md.ID, hard)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(failed) == 0 {
		return nil, nil
	}
	return failed, nil
}

// recoveryRead reads entry e from its whole write set with fencing reads.
func (c *Client) recoveryRead(ctx context.Context, md *Metadata, seg Segment, e int64, need int) ([]byte, bool, error) {
	ws := writeSet(e, md.Ensemble, md.WriteQuorum)
	type res struct {
		data []byte
		err  error
	}
	ch := make(chan res, len(ws))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, pos := range ws {
		go func(b topology.BookieInfo) {
			data, err := c.readFrom(rctx, b, md.ID, e, true)
			ch <- res{data, err}
		}(seg.Ensemble[pos])
	}
	notFound := 0
	var errs []error
	for range ws {
		x := <-ch
		if x.err == nil {
			return x.data, false, nil
		}
		errs = append(errs, x.err)
		// Only a positive "not found" counts as absence. "ledger unknown"
		// (a re-formatted bookie in limbo), "wrong bookie", corrupt and
		// unreachable leave the entry undecided.
		if classify(x.err) == kindNotFound {
			notFound++
		}
	}
	if notFound >= need {
		return nil, true, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	return nil, false, fmt.Errorf("%w: ledger %d: cannot decide entry %d: %d of %d replicas say not found, need %d: %w",
		ErrLedgerRecovering, md.ID, e, notFound, len(ws), need, errors.Join(errs...))
}

// recoveryAdd writes entry e to its whole write set with the recovery flag
// and calls done once every replica answered: a nil error if at least Qa
// confirmed. Otherwise bad names the bookies that failed, unless one
// refused the entry as invalid (then bad is nil: another bookie would
// refuse it too).
func (c *Client) recoveryAdd(md *Metadata, seg Segment, e, lac int64, data []byte, done func(bad []string, err error)) {
	ws := writeSet(e, md.Ensemble, md.WriteQuorum)
	var (
		mu       sync.Mutex
		left     = len(ws)
		ok       int
		errs     []error
		bad      []string
		invalid  bool
		answered = make([]bool, len(ws))
		timer    *time.Timer
	)
	finish := func(i int, err error) {
		mu.Lock()
		if answered[i] {
			mu.Unlock()
			return
		}
		answered[i] = true
		if err == nil {
			ok++
		} else {
			errs = append(errs, err)
			bad = append(bad, seg.Ensemble[ws[i]].ID)
			if classify(err) == kindInvalid {
				invalid = true
			}
		}
		left--
		last := left == 0
		mu.Unlock()
		if !last {
			return
		}
		if timer != nil {
			timer.Stop()
		}
		if ok >= md.AckQuorum {
			done(nil, nil)
			return
		}
		if invalid {
			bad = nil
		}
		done(bad, fmt.Errorf("entry %d: %d of %d replicas confirmed, need %d: %w", e, ok, len(ws), md.AckQuorum, errors.Join(errs...)))
	}
	// A bookie that keeps its stream open but never answers must not hang
	// recovery: after AddTimeout its answer counts as a failure.
	mu.Lock()
	timer = time.AfterFunc(c.cfg.AddTimeout, func() {
		for i := range ws {
			finish(i, fmt.Errorf("recovery add to %s: no answer after %v", seg.Ensemble[ws[i]].ID, c.cfg.AddTimeout))
		}
	})
	mu.Unlock()
	for i, pos := range ws {
		b := seg.Ensemble[pos]
		bc, err := c.conn(b)
		if err != nil {
			finish(i, err)
			continue
		}
		// Back-pressure ("too many in flight") is retried on the same
		// bookie after a backoff, until the AddTimeout timer gives up.
		var send func(attempt int)
		send = func(attempt int) {
			bc.add(&bookiev1.AddEntryRequest{
				LedgerId:         md.ID,
				EntryId:          e,
				Payload:          data,
				LastAddConfirmed: lac,
				RecoveryAdd:      true,
			}, func(err error) {
				if err != nil && classify(err) == kindBusy {
					mu.Lock()
					gaveUp := answered[i] // the AddTimeout timer fired
					mu.Unlock()
					if gaveUp {
						return
					}
					c.m.busyRetries.Inc()
					time.AfterFunc(min(busyBackoffMin<<min(attempt, 6), busyBackoffMax), func() { send(attempt + 1) })
					return
				}
				finish(i, err)
			})
		}
		send(0)
	}
}

// sameEnsemble reports whether a and b name the same bookies in order.
func sameEnsemble(a, b []topology.BookieInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID {
			return false
		}
	}
	return true
}
