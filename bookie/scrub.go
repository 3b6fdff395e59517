package bookie

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sort"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
)

// The scrub reads every indexed entry back from the journal and checks its
// header and payload CRC32C, at a bounded rate (Config.ScrubBytesPerSecond)
// so it never starves adds and reads. An entry that fails is flagged corrupt
// in the index (reads answer ErrEntryCorrupt, GC leaves it in place) and its
// ledger is reported, with the ledgers of the damaged journal ranges, to
// Config.MarkUnderReplicated, which marks them for autorecovery: a worker
// then rewrites this bookie's replica from healthy ones. A damaged range
// never makes the bookie read-only. One scrub runs soon after start (it
// verifies the journal files under the checkpoint, which replay does not
// read), then every ScrubInterval, and on demand (Server.Scrub, the Scrub
// RPC, `meridian admin bookies scrub ID`).

// ScrubResult is what one scrub found.
type ScrubResult struct {
	// EntriesChecked and BytesChecked count the records read and verified.
	EntriesChecked int64
	BytesChecked   int64
	// CorruptEntries counts the entries that answer ErrEntryCorrupt: found
	// by this scrub or flagged before (by replay, a read or a scrub).
	CorruptEntries int64
	// Ranges lists the corrupt entries as runs of consecutive entry IDs per
	// ledger, at most MaxScrubRanges of them (RangesTruncated says more
	// were found).
	Ranges          []CorruptRange
	RangesTruncated bool
	// DamagedJournal lists the journal ranges whose records could not be
	// identified or trusted (see replay.go).
	DamagedJournal []DamagedJournalRange
	// Ledgers lists, sorted, the ledgers with damage on this bookie.
	Ledgers []int64
	// LedgersMarked lists the ledgers marked under-replicated for repair
	// (empty without Config.MarkUnderReplicated).
	LedgersMarked []int64
	// Took is the scrub's duration.
	Took time.Duration
}

// CorruptRange is a run of corrupt entries [FirstEntry, LastEntry] of a ledger.
type CorruptRange struct {
	Ledger, FirstEntry, LastEntry int64
}

// DamagedJournalRange is a byte range [From, To) of journal file File
// whose records are not trusted; Ledgers have records in that file.
type DamagedJournalRange struct {
	File     string
	From, To int64
	Ledgers  []int64
}

// MaxScrubRanges bounds ScrubResult.Ranges.
const MaxScrubRanges = 1000

type scrubItem struct {
	ledger, entry int64
	l             loc
}

// scrub verifies every indexed entry at no more than bytesPerSec.
func (s *storage) scrub(ctx context.Context, bytesPerSec int64) (ScrubResult, error) {
	start := time.Now()
	var res ScrubResult
	s.mu.RLock()
	items := make([]scrubItem, 0, 1024)
	for id, ls := range s.ledgers {
		for e, l := range ls.entries {
			items = append(items, scrubItem{id, e, l})
		}
	}
	damage := slices.Clone(s.damage)
	s.mu.RUnlock()
	// In journal order: sequential reads.
	sort.Slice(items, func(i, j int) bool {
		if items[i].l.file != items[j].l.file {
			return items[i].l.file < items[j].l.file
		}
		return items[i].l.off < items[j].l.off
	})
	var bad []scrubItem
	var buf []byte
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if it.l.corrupt {
			bad = append(bad, it)
			continue
		}
		if cap(buf) < int(it.l.size) {
			buf = make([]byte, it.l.size)
		}
		buf = buf[:it.l.size]
		err := s.readAt(it.l.file, buf, it.l.off)
		res.EntriesChecked++
		res.BytesChecked += int64(it.l.size)
		why := ""
		switch {
		case err == nil:
			why = checkRecord(buf, it.ledger, it.entry, it.l)
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			why = fmt.Sprintf("journal file %s ends before the record at %d", journalFileName(it.l.file), it.l.off)
		case errors.Is(err, fs.ErrNotExist):
			continue // moved by compaction or deleted meanwhile
		default:
			return res, fmt.Errorf("%w: scrub read %s@%d: %v", ErrIO, journalFileName(it.l.file), it.l.off, err)
		}
		if why != "" {
			s.flagCorrupt(it.ledger, it.entry, it.l)
			if ok, suppressed := s.corruptLog.allow(time.Now()); ok {
				s.log.Error("scrub found a corrupt entry", "ledger", it.ledger, "entry", it.entry, "reason", why, "suppressed_since_last", suppressed)
			}
			bad = append(bad, it)
		}
		if err := pace(ctx, start, res.BytesChecked, bytesPerSec); err != nil {
			return res, err
		}
	}
	res.CorruptEntries = int64(len(bad))
	ledgers := map[int64]bool{}
	sort.Slice(bad, func(i, j int) bool {
		if bad[i].ledger != bad[j].ledger {
			return bad[i].ledger < bad[j].ledger
		}
		return bad[i].entry < bad[j].entry
	})
	for _, b := range bad {
		ledgers[b.ledger] = true
		n := len(res.Ranges)
		if n > 0 && res.Ranges[n-1].Ledger == b.ledger && res.Ranges[n-1].LastEntry == b.entry-1 {
			res.Ranges[n-1].LastEntry = b.entry
			continue
		}
		if n == MaxScrubRanges {
			res.RangesTruncated = true
			continue
		}
		res.Ranges = append(res.Ranges, CorruptRange{Ledger: b.ledger, FirstEntry: b.entry, LastEntry: b.entry})
	}
	for _, d := range damage {
		res.DamagedJournal = append(res.DamagedJournal, DamagedJournalRange{File: journalFileName(d.file), From: d.from, To: d.to, Ledgers: d.ledgers})
		for _, id := range d.ledgers {
			ledgers[id] = true
		}
	}
	for id := range ledgers {
		res.Ledgers = append(res.Ledgers, id)
	}
	slices.Sort(res.Ledgers)
	res.Took = time.Since(start)
	return res, nil
}

// pace sleeps until done bytes fit in the rate since start.
func pace(ctx context.Context, start time.Time, done, bytesPerSec int64) error {
	if bytesPerSec <= 0 {
		return nil
	}
	due := start.Add(time.Duration(float64(done) / float64(bytesPerSec) * float64(time.Second)))
	wait := time.Until(due)
	if wait < time.Millisecond {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Scrub verifies every entry this bookie holds now (at
// Config.ScrubBytesPerSecond), flags the damaged ones corrupt and marks
// their ledgers under-replicated through Config.MarkUnderReplicated. Scrubs
// do not overlap: a second call waits for the running one.
func (s *Server) Scrub(ctx context.Context) (ScrubResult, error) {
	if s.st == nil {
		return ScrubResult{}, ErrStopping
	}
	select {
	case s.scrubSem <- struct{}{}:
	case <-ctx.Done():
		return ScrubResult{}, ctx.Err()
	}
	defer func() { <-s.scrubSem }()
	res, err := s.st.scrub(ctx, s.cfg.ScrubBytesPerSecond)
	if err != nil {
		return res, err
	}
	s.metrics.scrubs.Inc()
	s.metrics.scrubCorrupt.Set(float64(res.CorruptEntries))
	for _, id := range res.Ledgers {
		if err := s.markCorrupt(ctx, id, "scrub found corrupt entries"); err != nil {
			s.log.Warn("marking a damaged ledger under-replicated failed", "ledger", id, "err", err)
			continue
		}
		if s.cfg.MarkUnderReplicated != nil {
			res.LedgersMarked = append(res.LedgersMarked, id)
		}
	}
	lvl := "info"
	if res.CorruptEntries > 0 || len(res.DamagedJournal) > 0 {
		lvl = "error"
	}
	args := []any{"entries_checked", res.EntriesChecked, "bytes_checked", res.BytesChecked, "corrupt_entries", res.CorruptEntries,
		"damaged_journal_ranges", len(res.DamagedJournal), "ledgers", res.Ledgers, "ledgers_marked", len(res.LedgersMarked), "took", res.Took}
	if lvl == "error" {
		s.log.Error("bookie scrub found damage", args...)
	} else {
		s.log.Info("bookie scrub done", args...)
	}
	return res, nil
}

// markCorrupt reports a damaged ledger to Config.MarkUnderReplicated.
func (s *Server) markCorrupt(ctx context.Context, ledger int64, reason string) error {
	if s.cfg.MarkUnderReplicated == nil {
		return nil
	}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return s.cfg.MarkUnderReplicated(mctx, ledger, reason)
}

// scrubLoop runs the scrub ScrubStartDelay after start and then every
// ScrubInterval, and marks the ledgers of corrupt reads as they happen
// (each at most once per scrubRemarkAfter).
func (s *Server) scrubLoop(ctx context.Context) {
	defer s.bg.Done()
	var tick <-chan time.Time
	if s.cfg.ScrubInterval > 0 {
		first := time.NewTimer(s.cfg.ScrubStartDelay)
		defer first.Stop()
		tick = first.C
	}
	var periodic *time.Ticker
	marked := map[int64]time.Time{}
	for {
		select {
		case <-ctx.Done():
			if periodic != nil {
				periodic.Stop()
			}
			return
		case <-tick:
			if periodic == nil {
				periodic = time.NewTicker(s.cfg.ScrubInterval)
				tick = periodic.C
			}
			if _, err := s.Scrub(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("background scrub failed", "err", err)
			}
		case id := <-s.st.corruptSeen:
			now := time.Now()
			if at, ok := marked[id]; ok && now.Sub(at) < scrubRemarkAfter {
				continue
			}
			for k, at := range marked {
				if now.Sub(at) >= scrubRemarkAfter {
					delete(marked, k)
				}
			}
			marked[id] = now
			if err := s.markCorrupt(ctx, id, "read found a corrupt entry"); err != nil && ctx.Err() == nil {
				s.log.Warn("marking a damaged ledger under-replicated failed", "ledger", id, "err", err)
			}
		}
	}
}

// scrubRemarkAfter bounds how often one ledger is re-marked after corrupt reads.
const scrubRemarkAfter = time.Minute

// scrubResponse converts a ScrubResult to its wire form.
func scrubResponse(r ScrubResult) *bookiev1.ScrubResponse {
	resp := &bookiev1.ScrubResponse{
		EntriesChecked: r.EntriesChecked, BytesChecked: r.BytesChecked, CorruptEntries: r.CorruptEntries,
		RangesTruncated: r.RangesTruncated, Ledgers: r.Ledgers, LedgersMarked: r.LedgersMarked, TookMs: r.Took.Milliseconds(),
	}
	for _, c := range r.Ranges {
		resp.Ranges = append(resp.Ranges, &bookiev1.ScrubCorruptRange{LedgerId: c.Ledger, FirstEntry: c.FirstEntry, LastEntry: c.LastEntry})
	}
	for _, d := range r.DamagedJournal {
		resp.DamagedJournal = append(resp.DamagedJournal, &bookiev1.ScrubDamagedJournalRange{File: d.File, FromOffset: d.From, ToOffset: d.To, Ledgers: d.Ledgers})
	}
	return resp
}

// Scrub implements the Scrub RPC.
func (svc *service) Scrub(ctx context.Context, req *bookiev1.ScrubRequest) (*bookiev1.ScrubResponse, error) {
	if err := svc.srv.checkIdentity(req, false); err != nil {
		return nil, err
	}
	r, err := svc.srv.Scrub(ctx)
	if err != nil {
		return nil, GRPCError(err)
	}
	return scrubResponse(r), nil
}
