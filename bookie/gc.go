package bookie

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
)

// GCStats reports one garbage-collection run.
type GCStats struct {
	// FilesDeleted journal files removed because nothing live was left.
	FilesDeleted int
	// FilesCompacted journal files whose live entries were copied forward.
	FilesCompacted int
	// EntriesRelocated live entries copied forward by compaction.
	EntriesRelocated int
	// BytesReclaimed is the size of the deleted files.
	BytesReclaimed int64
}

// liveBytes returns, per journal file, the bytes of index entries in it.
// Computed from the index each time: it cannot drift.
func (s *storage) liveBytesLocked() map[uint64]int64 {
	live := map[uint64]int64{}
	for _, ls := range s.ledgers {
		for _, l := range ls.entries {
			live[l.file] += int64(l.size)
		}
	}
	return live
}

// gc runs one garbage collection:
//  1. checkpoint (so every sealed file's records are reflected in it);
//  2. compact sealed files whose live fraction is below
//     CompactionThreshold: copy their live records to the journal head
//     (through the journal goroutine, as ordinary durable records);
//  3. checkpoint again, so no durable state references the old files;
//  4. delete every file before the checkpoint position with nothing live.
//
// Deleted ledgers only need step 4: their entries vanished from the index
// when the delete record was decided.
func (s *storage) gc(ctx context.Context) (GCStats, error) {
	s.maintMu.Lock()
	defer s.maintMu.Unlock()
	var st GCStats
	pos, err := s.checkpointLocked(ctx)
	if err != nil {
		return st, err
	}
	type mv struct {
		ledger, entry int64
		l             loc
	}
	var moves []mv
	s.mu.RLock()
	live := s.liveBytesLocked()
	compact := map[uint64]bool{}
	for seq, size := range s.files {
		if seq >= pos || size == 0 || live[seq] == 0 {
			continue
		}
		if float64(live[seq]) < s.cfg.CompactionThreshold*float64(size) {
			compact[seq] = true
		}
	}
	if len(compact) > 0 {
		for id, ls := range s.ledgers {
			for e, l := range ls.entries {
				// A corrupt entry stays where it is (copying it would make
				// untrusted bytes look good) until a repair replaces it.
				if compact[l.file] && !l.corrupt {
					moves = append(moves, mv{id, e, l})
				}
			}
		}
	}
	s.mu.RUnlock()
	sort.Slice(moves, func(i, j int) bool {
		if moves[i].l.file != moves[j].l.file {
			return moves[i].l.file < moves[j].l.file
		}
		return moves[i].l.off < moves[j].l.off
	})
	st.FilesCompacted = len(compact)

	// Relocate in bounded waves so GC never floods the journal queue.
	const wave = 256
	for i := 0; i < len(moves); i += wave {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		end := min(i+wave, len(moves))
		results := make(chan opResult, end-i)
		sent := 0
		for _, m := range moves[i:end] {
			rec := make([]byte, m.l.size)
			if err := s.readAt(m.l.file, rec, m.l.off); err != nil {
				continue // moved or deleted meanwhile; checked again below
			}
			o := &op{kind: opRelocate, ledger: m.ledger, entry: m.entry, rec: rec, oldLoc: m.l,
				done: func(r opResult) { results <- r }}
			if err := s.submit(ctx, o); err != nil {
				return st, err
			}
			sent++
		}
		for range sent {
			r := <-results
			switch {
			case r.err == nil:
				st.EntriesRelocated++
				s.m.gcRelocated.Inc()
			case errors.Is(r.err, errRelocateSkipped):
			default:
				return st, r.err
			}
		}
	}

	if len(moves) > 0 {
		if pos, err = s.checkpointLocked(ctx); err != nil {
			return st, err
		}
	}
	s.mu.Lock()
	live = s.liveBytesLocked()
	var dead []uint64
	for seq, size := range s.files {
		if seq < pos && live[seq] == 0 {
			dead = append(dead, seq)
			st.BytesReclaimed += size
			delete(s.files, seq)
		}
	}
	if len(dead) > 0 {
		s.damage = slices.DeleteFunc(s.damage, func(d damagedRange) bool { return slices.Contains(dead, d.file) })
	}
	s.mu.Unlock()
	sort.Slice(dead, func(i, j int) bool { return dead[i] < dead[j] })
	for _, seq := range dead {
		s.readersMu.Lock()
		if f := s.readers[seq]; f != nil {
			f.Close()
			delete(s.readers, seq)
		}
		s.readersMu.Unlock()
		p := filepath.Join(s.jdir, journalFileName(seq))
		if err := s.fs.Remove(p); err != nil {
			err = fmt.Errorf("%w: remove %s: %v", ErrIO, p, err)
			s.setIOFailed(err)
			return st, err
		}
		st.FilesDeleted++
	}
	if len(dead) > 0 {
		if err := s.fs.SyncDir(s.jdir); err != nil {
			err = fmt.Errorf("%w: sync dir %s: %v", ErrIO, s.jdir, err)
			s.setIOFailed(err)
			return st, err
		}
	}
	s.m.gcReclaimed.Add(float64(st.BytesReclaimed))
	s.log.Info("bookie gc done", "files_deleted", st.FilesDeleted, "files_compacted", st.FilesCompacted,
		"entries_relocated", st.EntriesRelocated, "bytes_reclaimed", st.BytesReclaimed)
	return st, nil
}
