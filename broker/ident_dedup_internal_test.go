package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// TestEntryIdent: only entries with a well-formed failover identity and a
// producer name have an identity key, with their batch.
func TestEntryIdent(t *testing.T) {
	md := &clientv1.EntryMetadata{ProducerName: "p", SequenceId: 4, NumMessages: 3, OriginRegion: "b", ProducerIdentity: "id1"}
	name, first, hs, ok := entryIdent(md)
	if !ok || name != "meridian.from.=id1/p" || first != 4 || hs != 6 {
		t.Fatalf("entryIdent: %q [%d, %d] %v", name, first, hs, ok)
	}
	for _, bad := range []*clientv1.EntryMetadata{
		{ProducerName: "p", SequenceId: 4, NumMessages: 1},
		{ProducerName: "", SequenceId: 4, NumMessages: 1, ProducerIdentity: "id1"},
		{ProducerName: "p", SequenceId: 4, NumMessages: 1, ProducerIdentity: "a/b"},
	} {
		if _, _, _, ok := entryIdent(bad); ok {
			t.Fatalf("entryIdent(%v) has a key", bad)
		}
	}
	if err := validateFailoverIdentity(string(make([]byte, 129))); err == nil {
		t.Fatal("a 129-byte identity is accepted")
	}
	if err := validateFailoverIdentity("p-0123abcd"); err != nil {
		t.Fatal(err)
	}
}

// TestCheckDupIdent: a local send whose every message is stored under the
// producer's identity (replicated from the region it failed over to) is a
// stored duplicate, and the producer's key is raised over it; a partial
// cover, or an earlier batch of the producer still in flight, stores it.
func TestCheckDupIdent(t *testing.T) {
	ml := &managedLedger{dedup: newDedupTable(100)}
	id := identDedupName("X", "p")
	ml.dedup.storedIdent(id, 10, 19, pos{1, 5}, 1)
	if dup, _ := ml.checkDup("p", 0, 9); dup {
		t.Fatal("0..9 is a duplicate")
	}
	ml.dedup.stored("p", 0, 9, pos{1, 0}, 2)
	dup, r, _ := ml.checkDupIdent(context.Background(), "p", id, 10, 12)
	if !dup || !r.stored || r.known {
		t.Fatalf("covered 10..12: dup=%v %+v, want a stored duplicate at an unknown position", dup, r)
	}
	if dup, r := ml.checkDup("p", 11, 11); !dup || !r.stored {
		t.Fatalf("resend of 11 after the cover: dup=%v %+v", dup, r)
	}
	if dup, _, _ := ml.checkDupIdent(context.Background(), "p", id, 18, 21); dup {
		t.Fatal("partly covered 18..21 is a duplicate")
	}
	// 18..21 is in flight: a covered batch after it is stored, not skipped
	// (raising p over an in-flight batch that fails would lose it).
	if dup, _, _ := ml.checkDupIdent(context.Background(), "p", identDedupName("X", "p"), 22, 22); dup {
		t.Fatal("22 (not covered) is a duplicate")
	}
	ml.dedup.storedIdent(id, 23, 30, pos{1, 9}, 3)
	if dup, _, _ := ml.checkDupIdent(context.Background(), "p", id, 23, 24); dup {
		t.Fatal("covered 23..24 skipped while 18..22 are in flight")
	}
	// A cover still being stored (a replicated copy in the append queue):
	// the send waits for it; stored, the send is a duplicate; failed, it
	// is stored.
	for _, ok := range []bool{true, false} {
		name := fmt.Sprintf("s-%v", ok)
		id2 := identDedupName("Y", name)
		req := &appendReq{ident: id2, identFirst: 0, identLast: 4, done: func(pos, error) {}}
		ml.pendIdent(req)
		go func() {
			time.Sleep(10 * time.Millisecond)
			if ok {
				ml.mu.Lock()
				ml.dedup.storedIdent(id2, 0, 4, pos{1, 1}, 1)
				ml.mu.Unlock()
				req.done(pos{1, 1}, nil)
			} else {
				req.done(pos{}, errors.New("add failed"))
			}
		}()
		if dup, _, _ := ml.checkDupIdent(context.Background(), name, id2, 0, 4); dup != ok {
			t.Fatalf("cover being stored (stored %v): dup=%v", ok, dup)
		}
	}
	// The producer's own earlier batch in flight: a covered batch waits
	// for it; once it is stored the covered one is a duplicate, if it
	// fails the covered one is stored.
	for _, ok := range []bool{true, false} {
		name := fmt.Sprintf("u-%v", ok)
		id3 := identDedupName("Z", name)
		ml.mu.Lock()
		ml.dedup.storedIdent(id3, 2, 3, pos{1, 2}, 1) // replicated copy of 2..3
		ml.mu.Unlock()
		if dup, _, _ := ml.checkDupIdent(context.Background(), name, id3, 0, 1); dup {
			t.Fatal("0..1 is a duplicate")
		}
		own := &appendReq{ident: id3, identFirst: 0, identLast: 1, done: func(pos, error) {}}
		ml.pendIdent(own)
		go func() {
			time.Sleep(10 * time.Millisecond)
			if ok {
				ml.mu.Lock()
				ml.dedup.stored(name, 0, 1, pos{1, 3}, 1)
				ml.dedup.storedIdent(id3, 0, 1, pos{1, 3}, 1)
				ml.mu.Unlock()
				own.done(pos{1, 3}, nil)
			} else {
				ml.unpush(name, 1)
				own.done(pos{}, errors.New("add failed"))
			}
		}()
		if dup, _, _ := ml.checkDupIdent(context.Background(), name, id3, 2, 3); dup != ok {
			t.Fatalf("own batch before (stored %v): dup=%v", ok, dup)
		}
	}
	// The stream ends while the cover is being stored: an error (the
	// caller refuses the send), the batch forgotten as queued.
	idw := identDedupName("W", "w")
	ml.pendIdent(&appendReq{ident: idw, identFirst: 0, identLast: 0, done: func(pos, error) {}})
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if dup, _, err := ml.checkDupIdent(cctx, "w", idw, 0, 0); dup || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("wait ended: dup=%v err=%v", dup, err)
	}
	if ml.lastSequence("w") != -1 {
		t.Fatalf("refused batch still queued: %d", ml.lastSequence("w"))
	}
	if _, err := ml.identCovered(cctx, &clientv1.EntryMetadata{ProducerName: "w", ProducerIdentity: "W", NumMessages: 1}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("replicated entry, wait ended: %v", err)
	}
	// Without an identity: the producer's own dedup only.
	if dup, _, _ := ml.checkDupIdent(context.Background(), "q", "", 0, 0); dup {
		t.Fatal("q/0 is a duplicate")
	}
}

// TestIdentSnapshot: the stored ranges of identity keys survive the dedup
// snapshot exactly (a hole stays a hole).
func TestIdentSnapshot(t *testing.T) {
	d := newDedupTable(100)
	id := identDedupName("X", "p")
	d.storedIdent(id, 101, 200, pos{7, 1}, 1)
	d.storedIdent(id, 1, 50, pos{7, 2}, 2)
	d.stored("p", 0, 3, pos{7, 0}, 3)
	snap, through := d.snapshot([]ledgerInfo{{ID: 7, Seq: 0, Entries: 3}}, 0)
	if through != 0 {
		t.Fatalf("through %d", through)
	}
	if _, ok := snap["p"]; !ok || len(snap["p"].R) != 0 {
		t.Fatalf("producer p in snapshot: %+v", snap["p"])
	}
	d2 := newDedupTable(100)
	d2.restore(snap, nil)
	d2.order()
	if !d2.identCovers(id, 1, 50) || !d2.identCovers(id, 120, 200) || d2.identCovers(id, 40, 120) || d2.identCovers(id, 51, 51) {
		t.Fatalf("restored ranges: %v", d2.byName[id].ranges.intervals())
	}
	// A snapshot of a name that is not an identity key carries no ranges.
	snap["p2"] = dedupSnap{Seq: 5, R: [][2]int64{{0, 5}}}
	d3 := newDedupTable(100)
	d3.restore(snap, nil)
	if d3.byName["p2"].ranges != nil {
		t.Fatal("ranges restored for a plain producer")
	}
}

// TestSkipCoveredOrder: a replicated entry skipped as covered advances its
// origin's progress only once every earlier queued entry of that origin is
// stored; when one of them fails it is REJECTED and progress stays below.
func TestSkipCoveredOrder(t *testing.T) {
	for _, earlierOK := range []bool{true, false} {
		tp := &topic{ml: &managedLedger{dedup: newDedupTable(100)}}
		name := replDedupName("a")
		if v := tp.ml.replCheck(name, 1, false); v != replAppend {
			t.Fatalf("check 1: %v", v)
		}
		f1 := tp.repl.track(name, 1)
		if v := tp.ml.replCheck(name, 2, false); v != replAppend {
			t.Fatalf("check 2: %v", v)
		}
		a := &replAck{results: make([]clientv1.ReplicateResult, 2), errs: make([]error, 2)}
		tp.skipCovered(a, 1, name, 2)
		time.Sleep(20 * time.Millisecond) // the skip must wait for entry 1
		if stored, _ := tp.ml.replProgress(name); stored >= 2 {
			t.Fatalf("progress %d before entry 1 is stored", stored)
		}
		if earlierOK {
			tp.ml.dedup.stored(name, 1, 1, pos{1, 0}, 1)
		} else {
			tp.replUnpush(name, 1)
		}
		tp.repl.finish(name, 1, f1, earlierOK)
		a.wg.Wait()
		stored, pushed := tp.ml.replProgress(name)
		if earlierOK {
			if stored != 2 || a.results[1] != clientv1.ReplicateResult_REPLICATE_RESULT_DUPLICATE {
				t.Fatalf("after 1 stored: progress %d/%d, result %v", stored, pushed, a.results[1])
			}
		} else if stored >= 1 || pushed >= 1 || a.results[1] != clientv1.ReplicateResult_REPLICATE_RESULT_REJECTED || a.errs[1] == nil {
			t.Fatalf("after 1 failed: progress %d/%d, result %v (%v)", stored, pushed, a.results[1], a.errs[1])
		}
	}
}
