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
	last, err := c.recoverTail(ctx, md, seg, lac)
	if err != nil {
		return nil, "error", err
	}

	for {
		closed := md.clone()
		closed.version = md.version
		closed.State = StateClosed
		closed.LastEntry = last
		closed.Length = -1
		err := c.meta.cas(ctx, closed)
		if err == nil {
			log.Info("ledger recovered and closed", "last_entry", last, "fenced_lac", lac)
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
func (c *Client) recoverTail(ctx context.Context, md *Metadata, seg Segment, lac int64) (int64, error) {
	need := md.WriteQuorum - md.AckQuorum + 1
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		addErr  error
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
				return -1, fmt.Errorf("%w: ledger %d: re-replicating entry: %w", ErrLedgerRecovering, md.ID, addErr)
			}
			return -1, err
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
		c.recoveryAdd(md, seg, e, lac, data, func(err error) {
			if err != nil {
				setFail(err)
			}
			<-window
			wg.Done()
		})
		e++
	}
	wg.Wait()
	if addErr != nil {
		return -1, fmt.Errorf("%w: ledger %d: re-replicating entry: %w", ErrLedgerRecovering, md.ID, addErr)
	}
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	return e - 1, nil
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
// and calls done once every replica answered: nil if at least Qa confirmed.
func (c *Client) recoveryAdd(md *Metadata, seg Segment, e, lac int64, data []byte, done func(error)) {
	ws := writeSet(e, md.Ensemble, md.WriteQuorum)
	var (
		mu       sync.Mutex
		left     = len(ws)
		ok       int
		errs     []error
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
			done(nil)
			return
		}
		done(fmt.Errorf("entry %d: %d of %d replicas confirmed, need %d: %w", e, ok, len(ws), md.AckQuorum, errors.Join(errs...)))
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
