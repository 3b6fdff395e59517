package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/meridianmq/meridian/topology"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
)

// Entry is one ledger entry.
type Entry struct {
	LedgerID int64
	EntryID  int64
	Data     []byte
}

// maxReadEntries bounds one Read call so a caller cannot ask for an
// unbounded result in memory.
const maxReadEntries = 1 << 16

// Reader reads one ledger without writing it. Safe for concurrent use.
type Reader struct {
	c   *Client
	id  int64
	log *slog.Logger

	// mu guards the fields below.
	mu     sync.Mutex
	md     *Metadata
	lac    int64
	closed bool
}

func newReader(c *Client, md *Metadata) *Reader {
	r := &Reader{c: c, id: md.ID, log: c.log.With("ledger", md.ID), md: md, lac: -1}
	r.learnLocked(md)
	return r
}

// learnLocked adopts newer metadata: a closed ledger is readable to its
// last entry; an open one at least up to its last segment's start - 1
// (an ensemble change starts a segment only after every earlier entry
// was reported added).
func (r *Reader) learnLocked(md *Metadata) {
	r.md = md
	if md.State == StateClosed {
		r.lac = md.LastEntry
		return
	}
	if f := md.Segments[len(md.Segments)-1].FirstEntry - 1; f > r.lac {
		r.lac = f
	}
}

// ID returns the ledger ID.
func (r *Reader) ID() int64 { return r.id }

// LastAddConfirmed returns the last entry known readable (-1 if none).
func (r *Reader) LastAddConfirmed() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lac
}

// IsClosed reports whether the ledger was closed when last seen.
func (r *Reader) IsClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.md.State == StateClosed
}

// Metadata returns a copy of the metadata the Reader works from.
func (r *Reader) Metadata() *Metadata {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.md.clone()
}

// Close releases the Reader; later calls fail with ErrLedgerClosed.
func (r *Reader) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}

// ReadLastAddConfirmed refreshes the metadata and, for an open ledger, asks
// the last segment's bookies for the highest last-add-confirmed they hold;
// it returns the new readable limit. It needs one bookie to answer for an
// open ledger.
func (r *Reader) ReadLastAddConfirmed(ctx context.Context) (int64, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return -1, fmt.Errorf("%w: reader of ledger %d", ErrLedgerClosed, r.id)
	}
	r.mu.Unlock()
	md, err := r.c.meta.get(ctx, r.id)
	if err != nil {
		return r.LastAddConfirmed(), err
	}
	r.mu.Lock()
	r.learnLocked(md)
	lac := r.lac
	r.mu.Unlock()
	if md.State == StateClosed {
		return lac, nil
	}
	ens := md.Segments[len(md.Segments)-1].Ensemble
	type res struct {
		lac int64
		err error
	}
	ch := make(chan res, len(ens))
	for _, b := range ens {
		go func(b topology.BookieInfo) {
			l, err := r.c.bookieLAC(ctx, b, r.id)
			ch <- res{l, err}
		}(b)
	}
	got := 0
	var errs []error
	for range ens {
		x := <-ch
		if x.err != nil {
			errs = append(errs, x.err)
			continue
		}
		got++
		if x.lac > lac {
			lac = x.lac
		}
	}
	r.mu.Lock()
	if lac > r.lac {
		r.lac = lac
	}
	lac = r.lac
	r.mu.Unlock()
	if got == 0 {
		return lac, fmt.Errorf("%w: no bookie answered last-add-confirmed of ledger %d: %w", ErrReadFailed, r.id, errors.Join(errs...))
	}
	return lac, nil
}

// bookieLAC asks one bookie for its last-add-confirmed of a ledger; a
// bookie that never saw the ledger answers -1.
func (c *Client) bookieLAC(ctx context.Context, b topology.BookieInfo, id int64) (int64, error) {
	bc, err := c.conn(b)
	if err != nil {
		return -1, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
	defer cancel()
	resp, err := bc.client.ReadLastAddConfirmed(rctx, &bookiev1.ReadLastAddConfirmedRequest{LedgerId: id})
	if err != nil {
		err = asBookieError(b.ID, err)
		if classify(err) == kindNotFound {
			return -1, nil
		}
		return -1, err
	}
	return resp.LastAddConfirmed, nil
}

// Read returns entries first..last (inclusive, in order). last must not be
// beyond LastAddConfirmed; each entry is read from one replica of its write
// set, trying the next replica when one fails, is corrupt or is slow.
//
// When an entry cannot be read from any replica, Read returns the entries
// before it (first..k-1, possibly none) together with the error for entry
// k: one unreadable entry never holds back the readable ones before it.
// The error wraps ErrNoSuchEntry (every replica said not found),
// ErrEntryCorrupt (every replica that answered holds it damaged) or
// ErrReadFailed (some replica could not be asked); the entry's ID is
// first+len(entries).
func (r *Reader) Read(ctx context.Context, first, last int64) ([]Entry, error) {
	r.mu.Lock()
	md, lac, closed := r.md, r.lac, r.closed
	r.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: reader of ledger %d", ErrLedgerClosed, r.id)
	}
	if first < 0 || last < first {
		return nil, invalidf("read range first=%d last=%d: need 0 <= first <= last", first, last)
	}
	if last-first+1 > maxReadEntries {
		return nil, invalidf("read range of %d entries exceeds the limit %d", last-first+1, maxReadEntries)
	}
	if last > lac {
		return nil, fmt.Errorf("%w: entry %d of ledger %d is beyond last-add-confirmed %d", ErrNoSuchEntry, last, r.id, lac)
	}
	return r.c.readEntries(ctx, md, first, last)
}

// readEntries reads first..last. When every bookie of a segment stores
// every entry (E == Qw) it streams ranges from one replica; entries it
// could not get that way are read one by one, in parallel, from any replica.
// On error it returns the entries before the first one it could not read.
func (c *Client) readEntries(ctx context.Context, md *Metadata, first, last int64) ([]Entry, error) {
	out := make([]Entry, int(last-first+1))
	got := make([]bool, len(out))
	if md.Ensemble == md.WriteQuorum {
		c.readRanges(ctx, md, first, last, out, got)
	}
	if err := c.readEach(ctx, md, first, out, got); err != nil {
		k := 0
		for k < len(got) && got[k] {
			k++
		}
		return out[:k:k], err
	}
	return out, nil
}

// readRanges fills out/got with ReadRange streams, one segment part at a
// time, from the segment's bookies in turn; it stops a part at the first
// error (the caller reads what is missing entry by entry).
func (c *Client) readRanges(ctx context.Context, md *Metadata, first, last int64, out []Entry, got []bool) {
	for i, seg := range md.Segments {
		lo := max(first, seg.FirstEntry)
		hi := last
		if i+1 < len(md.Segments) {
			hi = min(hi, md.Segments[i+1].FirstEntry-1)
		}
		if lo > hi {
			continue
		}
		b := seg.Ensemble[int(lo%int64(len(seg.Ensemble)))]
		next := lo
		for next <= hi {
			n, err := c.readRangeFrom(ctx, b, md.ID, next, hi, func(e Entry) {
				out[e.EntryID-first] = e
				got[e.EntryID-first] = true
			})
			next += n
			if err != nil || n == 0 {
				break
			}
		}
	}
}

// readRangeFrom streams first..last from bookie b and returns how many
// consecutive entries from first it delivered.
func (c *Client) readRangeFrom(ctx context.Context, b topology.BookieInfo, id, first, last int64, put func(Entry)) (int64, error) {
	bc, err := c.conn(b)
	if err != nil {
		return 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A replica that stalls (no message for stall) is abandoned; the
	// caller reads the rest entry by entry, with speculation.
	stall := c.cfg.ReadTimeout
	if d := 10 * c.cfg.SpeculativeReadDelay; d > 0 && d < stall {
		stall = d
	}
	watchdog := time.AfterFunc(stall, cancel)
	defer watchdog.Stop()
	st, err := bc.client.ReadRange(rctx, &bookiev1.ReadRangeRequest{LedgerId: id, FirstEntryId: first, LastEntryId: last})
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		watchdog.Reset(stall)
		resp, err := st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
		if resp.LedgerId != id || resp.EntryId != first+n {
			return n, fmt.Errorf("bookie %s answered entry %d/%d, want %d/%d", b.ID, resp.LedgerId, resp.EntryId, id, first+n)
		}
		data := resp.Payload
		if data == nil {
			data = []byte{}
		}
		put(Entry{LedgerID: id, EntryID: resp.EntryId, Data: data})
		c.m.reads.WithLabelValues("ok").Inc()
		n++
	}
}

// readEach reads the entries not yet got, one by one with bounded
// parallelism, and marks them got. It returns the error of the first
// (lowest) entry it could not read; entries after that one are not
// needed any more and may be left unread.
func (c *Client) readEach(ctx context.Context, md *Metadata, first int64, out []Entry, got []bool) error {
	var todo []int
	for i, ok := range got {
		if !ok {
			todo = append(todo, i)
		}
	}
	n := len(todo)
	if n == 0 {
		return nil
	}
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		// errAt is the lowest index that failed so far, errs its error.
		errAt = len(out)
		errs  error
	)
	failedBefore := func(i int) bool {
		errMu.Lock()
		defer errMu.Unlock()
		return errAt < i
	}
	idx := make(chan int)
	workers := min(c.cfg.ReadConcurrency, n)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				if failedBefore(i) {
					continue // a lower entry is unreadable: this one cannot be returned
				}
				e := first + int64(i)
				data, err := c.readEntry(ctx, md, e)
				if err != nil {
					errMu.Lock()
					if i < errAt {
						errAt, errs = i, err
					}
					errMu.Unlock()
					continue
				}
				out[i] = Entry{LedgerID: md.ID, EntryID: e, Data: data}
				got[i] = true
			}
		}()
	}
feed:
	for _, i := range todo {
		if failedBefore(i) {
			break
		}
		select {
		case idx <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(idx)
	wg.Wait()
	if errs != nil {
		return errs
	}
	return ctx.Err()
}

// readEntry reads entry e, retrying once with a refreshed bookie registry
// when no replica could be reached (a bookie may have restarted elsewhere).
func (c *Client) readEntry(ctx context.Context, md *Metadata, e int64) ([]byte, error) {
	start := time.Now()
	data, err := c.readEntryOnce(ctx, md, e)
	if errors.Is(err, ErrReadFailed) && ctx.Err() == nil {
		c.refreshRegistry(ctx)
		data, err = c.readEntryOnce(ctx, md, e)
	}
	if err != nil {
		c.m.reads.WithLabelValues("error").Inc()
		return nil, err
	}
	c.m.reads.WithLabelValues("ok").Inc()
	c.m.readLatency.Observe(time.Since(start).Seconds())
	return data, nil
}

// readEntryOnce asks the write set's replicas one after the other: the next
// one when the previous failed, or (speculatively) after
// SpeculativeReadDelay without an answer. The first good answer wins.
func (c *Client) readEntryOnce(ctx context.Context, md *Metadata, e int64) ([]byte, error) {
	seg := md.segmentFor(e)
	ws := writeSet(e, md.Ensemble, md.WriteQuorum)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type res struct {
		data []byte
		err  error
	}
	results := make(chan res, len(ws))
	launched := 0
	launch := func() {
		b := seg.Ensemble[ws[launched]]
		launched++
		go func() {
			data, err := c.readFrom(ctx, b, md.ID, e, false)
			results <- res{data, err}
		}()
	}
	launch()
	outstanding := 1
	var spec <-chan time.Time
	if c.cfg.SpeculativeReadDelay > 0 {
		t := time.NewTicker(c.cfg.SpeculativeReadDelay)
		defer t.Stop()
		spec = t.C
	}
	var errs []error
	for {
		select {
		case x := <-results:
			outstanding--
			if x.err == nil {
				return x.data, nil
			}
			errs = append(errs, x.err)
			if launched < len(ws) {
				launch()
				outstanding++
			} else if outstanding == 0 {
				return nil, readError(md.ID, e, errs)
			}
		case <-spec:
			if launched < len(ws) {
				c.m.speculative.Inc()
				launch()
				outstanding++
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("ledger: read %d/%d: %w", md.ID, e, ctx.Err())
		}
	}
}

// readError summarises the replicas' failures: all "not found" means the
// entry is missing; any corrupt (and no unreachable) means corrupt.
func readError(id, e int64, errs []error) error {
	notFound, corrupt := 0, 0
	for _, err := range errs {
		switch classify(err) {
		case kindNotFound:
			notFound++
		case kindCorrupt:
			corrupt++
		}
	}
	joined := errors.Join(errs...)
	switch {
	case notFound == len(errs):
		return fmt.Errorf("%w: %d/%d: %w", ErrNoSuchEntry, id, e, joined)
	case notFound+corrupt == len(errs):
		return fmt.Errorf("%w: %d/%d: %w", ErrEntryCorrupt, id, e, joined)
	}
	return fmt.Errorf("%w: %d/%d: %w", ErrReadFailed, id, e, joined)
}

// readFrom reads one entry from one bookie (fence = read for recovery).
func (c *Client) readFrom(ctx context.Context, b topology.BookieInfo, id, e int64, fence bool) ([]byte, error) {
	bc, err := c.conn(b)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ReadTimeout)
	defer cancel()
	resp, err := bc.client.ReadEntry(rctx, &bookiev1.ReadEntryRequest{LedgerId: id, EntryId: e, Fence: fence})
	if err != nil {
		return nil, asBookieError(b.ID, err)
	}
	if resp.EntryId != e || resp.LedgerId != id {
		return nil, &bookieError{bookie: b.ID, code: codes.Internal, msg: fmt.Sprintf("answered entry %d/%d for %d/%d", resp.LedgerId, resp.EntryId, id, e)}
	}
	if resp.Payload == nil {
		resp.Payload = []byte{}
	}
	return resp.Payload, nil
}
