package bookie

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meridianmq/meridian/internal/budget"
	"github.com/meridianmq/meridian/internal/faultfs"
)

// loc is where an entry's record lives in the journal.
type loc struct {
	file uint64 // journal file sequence number
	off  int64  // record offset in the file
	size uint32 // record length (header + payload)
	// corrupt: the record is known damaged or untrusted (found after damage
	// in its file, or failed a scrub); reads answer ErrEntryCorrupt until a
	// good copy (a recovery add) replaces it.
	corrupt bool
}

// ledgerState is the index of one ledger.
type ledgerState struct {
	fenced  bool
	lac     int64 // highest last-add-confirmed piggybacked on a stored add
	last    int64 // highest entry id stored (-1 = none)
	entries map[int64]loc
}

func newLedgerState() *ledgerState {
	return &ledgerState{lac: -1, last: -1, entries: map[int64]loc{}}
}

// journalFileName formats a journal file's name from its sequence number.
func journalFileName(seq uint64) string { return fmt.Sprintf("%016x.log", seq) }

func parseJournalFileName(name string) (uint64, bool) {
	if !strings.HasSuffix(name, ".log") || len(name) != 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSuffix(name, ".log"), 16, 64)
	return v, err == nil
}

// storage is the bookie's storage engine: the journal (which is also the
// entry log), the in-memory index with its checkpoint, fencing, reads, GC
// and the read-only state.
type storage struct {
	cfg  Config
	fs   faultfs.FS
	log  *slog.Logger
	m    *metrics
	jdir string
	idir string

	mu      sync.RWMutex // guards ledgers, files, damage and truncations
	ledgers map[int64]*ledgerState
	files   map[uint64]int64 // journal file seq -> valid bytes
	// damage lists the journal ranges whose records could not be identified
	// or trusted (replay rules in replay.go); kept in the checkpoint until
	// GC deletes the file.
	damage []damagedRange
	// truncations lists the torn tails this process's recovery cut off.
	truncations []tornTail

	corruptLog  logLimiter // rate-limits the log line per corrupt read
	corruptSeen chan int64 // ledgers of corrupt reads, for marking (dropped when full)

	readersMu sync.RWMutex // guards readers; held (R) during ReadAt
	readers   map[uint64]faultfs.File

	queue chan *op
	// queued bounds the bytes of the entry and relocation records in queue
	// and in the journal pipeline until answered (MaxQueuedAddBytes).
	queued   *budget.Budget
	closeMu  sync.RWMutex // guards closed
	closed   bool
	stopCh   chan struct{}
	abortCh  chan struct{}
	loopDone chan struct{}
	syncCh   chan *syncGroup // written groups to the syncer (syncQueueGroups): bounds unsynced data
	syncDone chan struct{}

	// journal state, owned by the journal goroutine
	cur     faultfs.File
	curSeq  uint64
	curSize int64
	wbuf    []byte

	roMu       sync.Mutex // guards the fields below
	roDisk     bool
	roIO       bool
	roReason   string
	roNotify   chan struct{}
	lastUsage  faultfs.Usage
	maintMu    sync.Mutex // serializes checkpoints and GC
	ckptSeq    uint64     // journal position of the last durable checkpoint
	lastCkptAt time.Time
}

// op is one request to the journal goroutine.
type op struct {
	kind     byte // recEntry, recFence, recDelete, opRelocate, opSnapshot
	ledger   int64
	entry    int64
	lac      int64
	recovery bool
	rec      []byte
	// body, when set, follows rec in the journal: an entry's rec is just
	// its header (hdr) and body its payload, so the payload is copied once,
	// into the group's write buffer.
	body    []byte
	hdr     [recHeaderSize]byte
	oldLoc  loc
	start   time.Time
	payload int
	done    func(opResult)

	newLoc loc          // set by the journal goroutine
	ls     *ledgerState // the ledger state decided on (journal goroutine)
	failed error
}

const (
	opRelocate byte = 100
	opSnapshot byte = 101
)

// opResult is what the journal goroutine reports for an op.
type opResult struct {
	err  error
	last int64 // fence: the ledger's last entry
	lac  int64 // fence: the ledger's LAC
	snap *snapshot
}

// syncQueueGroups is how many written groups may wait for the syncer. While
// an fdatasync runs the journal goroutine keeps writing up to this many
// groups (≤ syncQueueGroups × GroupMaxBytes unsynced bytes), and the next
// fdatasync covers them all: with 64 KiB entries 2 groups of 512 KiB capped
// a sync at ~1 MiB (15–20 entries), 8 groups of 2 MiB let it grow to what
// the disk can absorb (40–60 entries; bookie benchmark 64 KiB +15–25%).
const syncQueueGroups = 8

func openStorage(cfg Config, fsys faultfs.FS, log *slog.Logger, m *metrics) (*storage, error) {
	s := &storage{
		cfg:      cfg,
		fs:       fsys,
		log:      log,
		m:        m,
		jdir:     cfg.JournalDir,
		idir:     cfg.LedgerDir,
		ledgers:  map[int64]*ledgerState{},
		files:    map[uint64]int64{},
		readers:  map[uint64]faultfs.File{},
		queue:    make(chan *op, cfg.MaxQueuedAdds),
		queued:   budget.New(cfg.MaxQueuedAddBytes),
		stopCh:   make(chan struct{}),
		abortCh:  make(chan struct{}),
		loopDone: make(chan struct{}),
		syncCh:   make(chan *syncGroup, syncQueueGroups),
		syncDone: make(chan struct{}),
		roNotify: make(chan struct{}, 1),

		corruptSeen: make(chan int64, 64),
	}
	if s.idir == "" {
		s.idir = filepath.Join(s.jdir, "index")
	}
	for _, d := range []string{s.jdir, s.idir} {
		if err := fsys.MkdirAll(d); err != nil {
			return nil, fmt.Errorf("%w: mkdir %s: %v", ErrIO, d, err)
		}
	}
	if err := s.recover(); err != nil {
		s.closeReaders()
		return nil, err
	}
	go s.syncer()
	go s.loop()
	return s, nil
}

// openJournalFile creates journal file seq, makes its directory entry
// durable and makes it current.
func (s *storage) openJournalFile(seq uint64) error {
	p := filepath.Join(s.jdir, journalFileName(seq))
	f, err := s.fs.Create(p)
	if err != nil {
		return fmt.Errorf("%w: create %s: %v", ErrIO, p, err)
	}
	if err := s.fs.SyncDir(s.jdir); err != nil {
		f.Close()
		return fmt.Errorf("%w: sync dir %s: %v", ErrIO, s.jdir, err)
	}
	if s.cur != nil {
		s.cur.Close()
	}
	s.cur, s.curSeq, s.curSize = f, seq, 0
	s.mu.Lock()
	s.files[seq] = 0
	s.mu.Unlock()
	return nil
}

// submit queues an op for the journal goroutine, waiting while the bounded
// queue is full (back-pressure: a stream stops reading requests, and gRPC
// flow control then slows the client) until ctx ends. An entry or a
// relocation first takes its record's bytes from s.queued
// (MaxQueuedAddBytes) and gives them back just before it is answered:
// until then the payload is held (the request, the write buffer).
func (s *storage) submit(ctx context.Context, o *op) error {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return ErrStopping
	}
	var n int64
	if o.kind == recEntry || o.kind == opRelocate {
		n = int64(len(o.rec) + len(o.body))
		if err := s.queued.Acquire(ctx, n); err != nil {
			return fmt.Errorf("%w: journal queue full (max_queued_add_bytes=%d, %d bytes queued, this record %d): %w",
				ErrTooManyInFlight, s.cfg.MaxQueuedAddBytes, s.queued.InUse(), n, err)
		}
		s.m.queuedAddBytes.Add(float64(n))
		done := o.done
		o.done = func(r opResult) {
			s.m.queuedAddBytes.Sub(float64(n))
			s.queued.Release(n)
			done(r)
		}
	}
	select {
	case s.queue <- o:
		return nil
	default:
	}
	select {
	case s.queue <- o:
		return nil
	case <-ctx.Done():
		if n > 0 {
			s.m.queuedAddBytes.Sub(float64(n))
			s.queued.Release(n)
		}
		return fmt.Errorf("%w: journal queue full (MaxQueuedAdds=%d): %w", ErrTooManyInFlight, s.cfg.MaxQueuedAdds, ctx.Err())
	}
}

// submitWait submits an op and waits for its result or for ctx to end (the
// op may then still be applied: outcome unknown).
func (s *storage) submitWait(ctx context.Context, o *op) opResult {
	ch := make(chan opResult, 1)
	o.done = func(r opResult) { ch <- r }
	if err := s.submit(ctx, o); err != nil {
		return opResult{err: err}
	}
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		return opResult{err: ctx.Err()}
	}
}

// loop is the journal goroutine: it gathers queued ops into groups, writes
// each group with one write and one fdatasync, then applies and answers it.
func (s *storage) loop() {
	defer func() {
		close(s.syncCh)
		<-s.syncDone
		close(s.loopDone)
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var batch []*op
	for {
		var first *op
		select {
		case first = <-s.queue:
		case <-s.stopCh:
			s.drain()
			return
		case <-s.abortCh:
			s.failQueued(ErrStopping)
			return
		}
		batch = append(batch[:0], first)
		bytes := len(first.rec) + len(first.body)
		if first.kind != opSnapshot {
			timer.Reset(s.cfg.GroupMaxWait)
		gather:
			for len(batch) < s.cfg.GroupMaxEntries && bytes < s.cfg.GroupMaxBytes {
				var o *op
				select {
				case o = <-s.queue:
				default:
					if s.cfg.FlushWhenIdle {
						break gather
					}
					select {
					case o = <-s.queue:
					case <-timer.C:
						break gather
					case <-s.abortCh:
						break gather
					}
				}
				batch = append(batch, o)
				bytes += len(o.rec) + len(o.body)
				if o.kind == opSnapshot {
					break
				}
			}
			timer.Stop()
		}
		s.processGroup(batch)
		clear(batch)
	}
}

func (s *storage) drain() {
	var batch []*op
	for {
		select {
		case o := <-s.queue:
			batch = append(batch, o)
			if len(batch) >= s.cfg.GroupMaxEntries || o.kind == opSnapshot {
				s.processGroup(batch)
				batch = batch[:0]
			}
		default:
			if len(batch) > 0 {
				s.processGroup(batch)
			}
			return
		}
	}
}

func (s *storage) failQueued(err error) {
	for {
		select {
		case o := <-s.queue:
			o.done(opResult{err: err})
		default:
			return
		}
	}
}

// processGroup decides and writes one group and hands it to the syncer,
// which fsyncs, applies and answers it. Every
// decision that depends on the index (fenced? ledger still there?) is made
// here, in queue order, by the one journal goroutine: a fence answered
// before an add was decided makes that add fail.
func (s *storage) processGroup(batch []*op) {
	var snapOp *op
	if last := batch[len(batch)-1]; last.kind == opSnapshot {
		snapOp = last
		batch = batch[:len(batch)-1]
	}
	roDisk, roIO := s.readOnlyFlags()
	buf := s.wbuf[:0]
	var written []*op
	s.mu.Lock()
	for _, o := range batch {
		o.failed = nil
		ls := s.ledgers[o.ledger]
		switch o.kind {
		case recEntry:
			if roIO || roDisk {
				o.failed = ErrReadOnly
			} else if ls != nil && ls.fenced && !o.recovery {
				o.failed = fmt.Errorf("%w: ledger %d", ErrLedgerFenced, o.ledger)
			} else if ls == nil {
				ls = newLedgerState()
				s.ledgers[o.ledger] = ls
			}
		case recFence, recDelete:
			// Fences and deletes are tiny and are allowed while read-only
			// for disk usage (the threshold leaves room); after an I/O
			// error nothing is written.
			if roIO {
				o.failed = ErrReadOnly
				break
			}
			if o.kind == recFence {
				if ls == nil {
					ls = newLedgerState()
					s.ledgers[o.ledger] = ls
				}
				// Fenced in memory now so that every later add in queue
				// order is refused; durable before the fence is answered.
				ls.fenced = true
			} else {
				delete(s.ledgers, o.ledger)
			}
			o.rec = encodeRecord(o.rec[:0], o.kind, o.ledger, -1, -1, nil)
		case opRelocate:
			if roIO {
				o.failed = ErrReadOnly
			} else if ls == nil || ls.entries[o.entry] != o.oldLoc {
				o.failed = errRelocateSkipped
			}
		}
		// Apply into the state decided on, even if a later op in this
		// group deletes the ledger: the result then matches replay order.
		o.ls = ls
		if o.failed != nil {
			continue
		}
		o.newLoc = loc{file: s.curSeq, off: s.curSize + int64(len(buf)), size: uint32(len(o.rec) + len(o.body))}
		buf = append(buf, o.rec...)
		buf = append(buf, o.body...)
		written = append(written, o)
	}
	s.mu.Unlock()

	g := &syncGroup{batch: slices.Clone(batch), file: s.cur, seq: s.curSeq, entries: len(written), bytes: len(buf)}
	if len(buf) > 0 {
		if _, err := s.cur.Write(buf); err != nil {
			// Never acknowledge what may not be persisted: the whole group
			// fails and the bookie stops taking writes until restarted.
			g.werr = fmt.Errorf("%w: journal write %s: %v", ErrIO, journalFileName(s.curSeq), err)
			s.setIOFailed(g.werr)
		} else {
			s.curSize += int64(len(buf))
		}
	}
	g.end = s.curSize
	if cap(buf) <= 4*s.cfg.GroupMaxBytes {
		s.wbuf = buf[:0]
	}
	for _, o := range batch {
		o.rec, o.body = nil, nil
	}
	if len(g.batch) > 0 {
		s.syncCh <- g
	}
	if g.werr == nil && s.curSize >= s.cfg.MaxJournalFileBytes {
		s.waitSynced()
		if err := s.openJournalFile(s.curSeq + 1); err != nil {
			s.setIOFailed(err)
		}
	}
	if snapOp != nil {
		s.waitSynced()
		snapOp.done(s.takeSnapshot())
	}
}

// syncGroup is a group written to the journal (not yet synced) on its way
// to the syncer, or a barrier.
type syncGroup struct {
	batch   []*op
	file    faultfs.File
	seq     uint64
	end     int64 // file size after the group
	entries int   // records written
	bytes   int
	werr    error         // the write itself failed
	barrier chan struct{} // set on a barrier: closed once every earlier group is answered
}

// waitSynced returns once every group handed to the syncer so far is
// synced and answered. Journal goroutine only (before rolling the file or
// snapshotting the index).
func (s *storage) waitSynced() {
	b := make(chan struct{})
	s.syncCh <- &syncGroup{barrier: b}
	<-b
}

// syncer is the force-write goroutine: it fdatasyncs the journal once for
// all the groups written since its last fsync (the journal goroutine keeps
// writing the next groups meanwhile), then applies them to the index and
// answers them, in order. After one failed fsync nothing more is
// acknowledged: Linux may report later fsyncs as successful although the
// failed pages are lost.
func (s *storage) syncer() {
	defer close(s.syncDone)
	var failed error
	var pending []*syncGroup
	var unsynced faultfs.File // UnsafeAckBeforeSync: answered, not yet synced
	var unsyncedSeq uint64
	for g := range s.syncCh {
		pending = append(pending[:0], g)
	gather:
		for g.barrier == nil && len(pending) < 64 {
			select {
			case g2, ok := <-s.syncCh:
				if !ok {
					break gather
				}
				pending = append(pending, g2)
				if g2.barrier != nil {
					break gather
				}
			default:
				break gather
			}
		}
		// Every group in pending is in one file: the journal goroutine
		// waits on a barrier before it switches files.
		var file faultfs.File
		var seq uint64
		entries, bytes := 0, 0
		for _, p := range pending {
			if p.barrier == nil && p.bytes > 0 && p.werr == nil {
				file, seq = p.file, p.seq
				entries += p.entries
				bytes += p.bytes
			}
		}
		// Unsafe test mode: answer without an fsync, except at a barrier
		// (a journal roll or a checkpoint needs what precedes it durable).
		if s.cfg.Testing.UnsafeAckBeforeSync {
			if pending[len(pending)-1].barrier == nil {
				if file != nil {
					unsynced, unsyncedSeq = file, seq
				}
				file = nil
			} else if file == nil {
				file, seq = unsynced, unsyncedSeq
			}
			if file != nil {
				unsynced = nil
			}
		}
		if file != nil && failed == nil {
			t0 := time.Now()
			err := file.Sync()
			s.m.fsyncLatency.Observe(time.Since(t0).Seconds())
			s.m.fsyncs.Inc()
			if err != nil {
				failed = fmt.Errorf("%w: journal fdatasync %s: %v", ErrIO, journalFileName(seq), err)
				s.setIOFailed(failed)
			} else {
				s.m.groupEntries.Observe(float64(entries))
				s.m.groupBytes.Observe(float64(bytes))
			}
		}
		for _, p := range pending {
			switch {
			case p.barrier != nil:
				close(p.barrier)
			case p.werr != nil:
				s.complete(p, p.werr)
			case p.bytes > 0 && failed != nil:
				s.complete(p, failed)
			default:
				s.complete(p, nil)
			}
		}
		clear(pending)
	}
}

// complete applies a synced group to the index and answers its ops; werr
// non-nil fails every op that was written.
func (s *storage) complete(g *syncGroup, werr error) {
	results := make([]opResult, len(g.batch))
	s.mu.Lock()
	if werr == nil && g.bytes > 0 {
		s.files[g.seq] = max(s.files[g.seq], g.end)
	}
	for i, o := range g.batch {
		if o.failed != nil {
			results[i].err = o.failed
			continue
		}
		if werr != nil {
			results[i].err = werr
			continue
		}
		ls := o.ls
		switch o.kind {
		case recEntry:
			ls.entries[o.entry] = o.newLoc
			ls.last = max(ls.last, o.entry)
			ls.lac = max(ls.lac, o.lac)
		case recFence:
			results[i].last, results[i].lac = ls.last, ls.lac
		case opRelocate:
			if ls.entries[o.entry] == o.oldLoc {
				ls.entries[o.entry] = o.newLoc
			}
		}
	}
	s.mu.Unlock()

	now := time.Now()
	for i, o := range g.batch {
		if o.kind == recEntry {
			if results[i].err == nil {
				s.m.addEntries.Inc()
				s.m.addBytes.Add(float64(o.payload))
				s.m.addLatency.Observe(now.Sub(o.start).Seconds())
			} else {
				c, _ := ToStatus(results[i].err)
				s.m.addErrors.WithLabelValues(c.String()).Inc()
			}
		}
		o.done(results[i])
	}
}

var errRelocateSkipped = errors.New("bookie: relocation skipped (entry moved or ledger deleted)")

// takeSnapshot rolls the journal to a fresh file (if the current one is not
// empty) and copies the index; the copy covers exactly the journal files
// before the new current file. Runs on the journal goroutine.
func (s *storage) takeSnapshot() opResult {
	if _, roIO := s.readOnlyFlags(); roIO {
		return opResult{err: ErrReadOnly}
	}
	if s.curSize > 0 {
		if err := s.openJournalFile(s.curSeq + 1); err != nil {
			s.setIOFailed(err)
			return opResult{err: err}
		}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	snap := &snapshot{pos: s.curSeq, ledgers: make([]snapLedger, 0, len(s.ledgers)), damage: slices.Clone(s.damage)}
	for id, ls := range s.ledgers {
		sl := snapLedger{id: id, fenced: ls.fenced, lac: ls.lac, last: ls.last, entries: make([]snapEntry, 0, len(ls.entries))}
		for e, l := range ls.entries {
			sl.entries = append(sl.entries, snapEntry{entry: e, loc: l})
		}
		snap.ledgers = append(snap.ledgers, sl)
	}
	return opResult{snap: snap}
}

// reader returns a read handle for journal file seq; call with readersMu
// held for reading. It upgrades internally to open a missing handle.
func (s *storage) readAt(seq uint64, p []byte, off int64) error {
	s.readersMu.RLock()
	f := s.readers[seq]
	if f != nil {
		err := faultfs.ReadFull(f, p, off)
		s.readersMu.RUnlock()
		return err
	}
	s.readersMu.RUnlock()
	s.readersMu.Lock()
	f = s.readers[seq]
	if f == nil {
		var err error
		f, err = s.fs.Open(filepath.Join(s.jdir, journalFileName(seq)))
		if err != nil {
			s.readersMu.Unlock()
			return err
		}
		s.readers[seq] = f
	}
	s.readersMu.Unlock()
	s.readersMu.RLock()
	defer s.readersMu.RUnlock()
	if f = s.readers[seq]; f == nil {
		return fs.ErrNotExist
	}
	return faultfs.ReadFull(f, p, off)
}

func (s *storage) closeReaders() {
	s.readersMu.Lock()
	defer s.readersMu.Unlock()
	for k, f := range s.readers {
		f.Close()
		delete(s.readers, k)
	}
}

// entryInfo is what a read returns besides the payload.
type entryInfo struct {
	entry  int64
	lac    int64
	fenced bool
}

// read returns entry's payload (entry -1 = the last stored entry). A
// damaged entry answers ErrEntryCorrupt (logged, rate-limited) and is
// flagged in the index; it never turns the bookie read-only: the damage is
// in that range, not in the disk's ability to take writes.
func (s *storage) read(ledger, entry int64) ([]byte, entryInfo, error) {
	for attempt := 0; ; attempt++ {
		s.mu.RLock()
		ls := s.ledgers[ledger]
		if ls == nil {
			d, damaged := s.damagedForLocked(ledger)
			s.mu.RUnlock()
			if damaged {
				return nil, entryInfo{}, s.corruptErr(ledger, entry, fmt.Sprintf("ledger may have records in damaged journal range %s@%d-%d", journalFileName(d.file), d.from, d.to))
			}
			return nil, entryInfo{}, fmt.Errorf("%w: ledger %d", ErrNoSuchLedger, ledger)
		}
		info := entryInfo{entry: entry, lac: ls.lac, fenced: ls.fenced}
		if entry == -1 {
			info.entry = ls.last
		}
		l, ok := ls.entries[info.entry]
		var d damagedRange
		damaged := false
		if !ok {
			d, damaged = s.damagedForLocked(ledger)
		}
		s.mu.RUnlock()
		if !ok {
			if damaged {
				return nil, info, s.corruptErr(ledger, info.entry, fmt.Sprintf("entry may have been in damaged journal range %s@%d-%d", journalFileName(d.file), d.from, d.to))
			}
			return nil, info, fmt.Errorf("%w: ledger %d entry %d", ErrNoSuchEntry, ledger, info.entry)
		}
		if l.corrupt {
			return nil, info, s.corruptErr(ledger, info.entry, fmt.Sprintf("record at %s@%d is damaged or untrusted", journalFileName(l.file), l.off))
		}
		buf := make([]byte, l.size)
		err := s.readAt(l.file, buf, l.off)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && attempt < 3 {
				continue // moved by compaction; look it up again
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				s.flagCorrupt(ledger, info.entry, l)
				return nil, info, s.corruptErr(ledger, info.entry, fmt.Sprintf("journal file %s ends before the record at %d (%d bytes)", journalFileName(l.file), l.off, l.size))
			}
			if !errors.Is(err, fs.ErrNotExist) {
				s.setIOFailed(fmt.Errorf("read %s: %w", journalFileName(l.file), err))
			}
			return nil, info, fmt.Errorf("%w: read ledger %d entry %d: %v", ErrIO, ledger, info.entry, err)
		}
		if why := checkRecord(buf, ledger, info.entry, l); why != "" {
			s.flagCorrupt(ledger, info.entry, l)
			return nil, info, s.corruptErr(ledger, info.entry, why)
		}
		return buf[recHeaderSize:], info, nil
	}
}

// maxRunBytes bounds the records one coalesced range read fetches with a
// single pread, and so the buffer one ReadRange holds at a time.
const maxRunBytes = 4 << 20

// readRun reads with one pread the run of entries first, first+1, ... (at
// most last) of ledger whose records lie back to back in one journal file
// and are not flagged corrupt, stopping after the entry whose payload
// brings the total to maxPayload, and before the records would pass
// maxRunBytes. The payloads share one new buffer (it is not reused: gRPC
// does not promise to be done with a sent message when Send returns). info holds the ledger's
// LAC and fence state at the lookup. The run ends early, at no error, on
// anything unusual — a missing or flagged entry, a read error, a record that
// fails its header or CRC32C check — and a run of fewer than two entries is
// not read at all: the caller reads the next entry with read, which reports,
// flags and retries exactly as for a single read.
func (s *storage) readRun(ledger, first, last, maxPayload int64) (payloads [][]byte, info entryInfo) {
	s.mu.RLock()
	ls := s.ledgers[ledger]
	if ls == nil {
		s.mu.RUnlock()
		return nil, info
	}
	info = entryInfo{entry: first, lac: ls.lac, fenced: ls.fenced}
	var locs []loc
	var start, end, pay int64
	for e := first; e <= last; e++ {
		l, ok := ls.entries[e]
		if !ok || l.corrupt {
			break
		}
		if len(locs) == 0 {
			start, end = l.off, l.off
		} else if l.file != locs[0].file || l.off != end || end+int64(l.size)-start > maxRunBytes {
			break
		}
		locs = append(locs, l)
		end += int64(l.size)
		pay += int64(l.size) - recHeaderSize
		if pay >= maxPayload {
			break
		}
	}
	s.mu.RUnlock()
	if len(locs) < 2 {
		return nil, info
	}
	buf := make([]byte, end-start)
	if err := s.readAt(locs[0].file, buf, start); err != nil {
		return nil, info // read reports it (or retries after a compaction)
	}
	payloads = make([][]byte, 0, len(locs))
	for i, l := range locs {
		rec := buf[l.off-start : l.off-start+int64(l.size)]
		if checkRecord(rec, ledger, first+int64(i), l) != "" {
			break // read flags and reports it
		}
		payloads = append(payloads, rec[recHeaderSize:])
	}
	return payloads, info
}

// checkRecord verifies a record read at l for (ledger, entry): "" when it
// is intact, else what is wrong.
func checkRecord(buf []byte, ledger, entry int64, l loc) string {
	h, ok := decodeHeader(buf)
	if !ok || h.typ != recEntry || h.ledger != ledger || h.entry != entry || h.length != l.size {
		return fmt.Sprintf("bad record header at %s@%d", journalFileName(l.file), l.off)
	}
	if crc32.Checksum(buf[recHeaderSize:], castagnoli) != h.dataCRC {
		return fmt.Sprintf("payload CRC32C mismatch at %s@%d", journalFileName(l.file), l.off)
	}
	return ""
}

// flagCorrupt marks the entry corrupt in the index if it is still at l.
func (s *storage) flagCorrupt(ledger, entry int64, l loc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ls := s.ledgers[ledger]; ls != nil && ls.entries[entry] == l {
		l.corrupt = true
		ls.entries[entry] = l
	}
}

// corruptErr logs a corrupt read (rate-limited), reports the ledger for
// marking and returns ErrEntryCorrupt.
func (s *storage) corruptErr(ledger, entry int64, why string) error {
	select {
	case s.corruptSeen <- ledger:
	default:
	}
	if ok, suppressed := s.corruptLog.allow(time.Now()); ok {
		s.log.Error("read of a corrupt entry (answered DATA_LOSS; autorecovery repairs it from other replicas)",
			"ledger", ledger, "entry", entry, "reason", why, "suppressed_since_last", suppressed)
	}
	return fmt.Errorf("%w: ledger %d entry %d: %s", ErrEntryCorrupt, ledger, entry, why)
}

// logLimiter allows logBurst lines per logWindow and counts the rest.
type logLimiter struct {
	mu         sync.Mutex // guards the fields below
	windowFrom time.Time
	n          int
	suppressed int
}

const (
	logBurst  = 5
	logWindow = 10 * time.Second
)

// allow reports whether a line may be logged now and how many were
// suppressed since the last one logged.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.windowFrom) >= logWindow {
		l.windowFrom, l.n = now, 0
	}
	if l.n >= logBurst {
		l.suppressed++
		return false, 0
	}
	l.n++
	s := l.suppressed
	l.suppressed = 0
	return true, s
}

// ledgerInfo returns the ledger's LAC, last entry and fenced flag.
func (s *storage) ledgerInfo(ledger int64) (lac, last int64, fenced bool, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ls := s.ledgers[ledger]
	if ls == nil {
		return -1, -1, false, fmt.Errorf("%w: ledger %d", ErrNoSuchLedger, ledger)
	}
	return ls.lac, ls.last, ls.fenced, nil
}

func (s *storage) ledgerCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.ledgers)
}

// --- read-only state ---

func (s *storage) readOnlyFlags() (disk, io bool) {
	s.roMu.Lock()
	defer s.roMu.Unlock()
	return s.roDisk, s.roIO
}

// readOnly reports whether adds are refused and why.
func (s *storage) readOnly() (bool, string) {
	s.roMu.Lock()
	defer s.roMu.Unlock()
	return s.roDisk || s.roIO, s.roReason
}

func (s *storage) setIOFailed(err error) {
	s.roMu.Lock()
	first := !s.roIO
	s.roIO = true
	s.roReason = err.Error()
	s.roMu.Unlock()
	if first {
		s.log.Error("bookie going read-only after an I/O error", "err", err)
		s.m.readOnly.Set(1)
		s.notifyRO()
	}
}

func (s *storage) setDiskRO(ro bool, u faultfs.Usage) {
	s.roMu.Lock()
	changed := s.roDisk != ro
	s.roDisk = ro
	s.lastUsage = u
	if !s.roIO {
		if ro {
			s.roReason = fmt.Sprintf("disk usage %.1f%% >= threshold %.1f%%", 100*u.Fraction(), 100*s.cfg.DiskUsageThreshold)
		} else {
			s.roReason = ""
		}
	}
	now := s.roDisk || s.roIO
	s.roMu.Unlock()
	if changed {
		s.log.Warn("bookie read-only state changed (disk usage)", "read_only", now, "used_fraction", u.Fraction())
		if now {
			s.m.readOnly.Set(1)
		} else {
			s.m.readOnly.Set(0)
		}
		s.notifyRO()
	}
}

func (s *storage) notifyRO() {
	select {
	case s.roNotify <- struct{}{}:
	default:
	}
}

// checkDisk measures the data disks and updates the read-only state.
func (s *storage) checkDisk() faultfs.Usage {
	var worst faultfs.Usage
	for _, d := range []string{s.jdir, s.idir} {
		u, err := s.fs.DiskUsage(d)
		if err != nil {
			s.log.Warn("disk usage check failed", "dir", d, "err", err)
			continue
		}
		if u.Fraction() >= worst.Fraction() {
			worst = u
		}
	}
	s.m.diskUsed.Set(float64(worst.Used()))
	s.m.diskTotal.Set(float64(worst.Total))
	disk, _ := s.readOnlyFlags()
	f := worst.Fraction()
	switch {
	case f >= s.cfg.DiskUsageThreshold:
		s.setDiskRO(true, worst)
	case disk && f < s.cfg.DiskUsageLowWater:
		s.setDiskRO(false, worst)
	default:
		s.roMu.Lock()
		s.lastUsage = worst
		s.roMu.Unlock()
	}
	s.mu.RLock()
	var jb int64
	for _, sz := range s.files {
		jb += sz
	}
	n := len(s.ledgers)
	s.mu.RUnlock()
	s.m.journalBytes.Set(float64(jb))
	s.m.ledgers.Set(float64(n))
	return worst
}

func (s *storage) usage() faultfs.Usage {
	s.roMu.Lock()
	defer s.roMu.Unlock()
	return s.lastUsage
}

// close stops the journal goroutine. Graceful: queued ops are written and a
// final checkpoint taken. Abrupt (crash-like): queued ops fail, no checkpoint.
func (s *storage) close(graceful bool) {
	s.closeMu.Lock()
	already := s.closed
	s.closed = true
	s.closeMu.Unlock()
	if already {
		<-s.loopDone
		return
	}
	if graceful {
		close(s.stopCh)
	} else {
		close(s.abortCh)
	}
	<-s.loopDone
	if graceful {
		if _, roIO := s.readOnlyFlags(); !roIO {
			if err := s.checkpointNow(); err != nil {
				s.log.Warn("final checkpoint failed", "err", err)
			}
		}
	}
	if s.cur != nil {
		s.cur.Close()
	}
	s.closeReaders()
}
