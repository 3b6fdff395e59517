package autorecovery_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/topology"
)

// TestAuditorFindsHolesOnLiveReplicas builds what a Qw > Qa writer leaves
// when one replica missed some adds and no ensemble change followed: a
// closed E3/Qw3/Qa2 ledger whose entries 10..19 reached two bookies only.
// Every bookie stays registered, so the lost-bookie audit sees nothing.
// The replica check must find the holes on the live bookie and mark the
// ledger; a worker must fill them in place (no metadata swap), after which
// every replica of every write set holds every entry.
func TestAuditorFindsHolesOnLiveReplicas(t *testing.T) {
	e := newEnv(t, 3)
	ctx := e.ctx()
	w := e.create(3, 3, 2)
	e.append(w, 10)
	id := w.ID()
	md := e.metadataOf(id)
	holey := md.Segments[0].Ensemble[1].ID
	for i := 10; i < 20; i++ {
		data := payload(id, i)
		for _, b := range md.Segments[0].Ensemble {
			if b.ID == holey {
				continue
			}
			if _, err := e.bk.Client(e.index(b.ID)).AddEntry(ctx, &bookiev1.AddEntryRequest{
				LedgerId: id, EntryId: int64(i), Payload: data, LastAddConfirmed: int64(i - 1)}); err != nil {
				t.Fatal(err)
			}
		}
		e.mu.Lock()
		e.written[id] = append(e.written[id], data)
		e.mu.Unlock()
	}
	// Close the ledger at 19, as the writer would have after Qa=2 adds.
	kv, err := e.store.Get(ctx, ledger.LedgerKey(id), metadata.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	md.State, md.LastEntry, md.Length = ledger.StateClosed, 19, -1
	val, _ := json.Marshal(md)
	if _, err := e.store.Put(ctx, ledger.LedgerKey(id), val, kv.Version, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.bk.Client(e.index(holey)).ReadEntry(ctx, &bookiev1.ReadEntryRequest{LedgerId: id, EntryId: 12}); status.Code(err) != codes.NotFound {
		t.Fatalf("entry 12 on %s: %v, want NotFound (the hole)", holey, err)
	}
	// Another closed ledger without holes must not be marked.
	clean := e.create(3, 3, 2)
	e.append(clean, 20)
	if err := clean.Close(ctx); err != nil {
		t.Fatal(err)
	}

	e.startAuditorWith("auditor", func(c *autorecovery.AuditorConfig) { c.ReplicaCheckInterval = 200 * time.Millisecond })
	e.waitFor("the ledger with holes marked", 30*time.Second, func() (bool, string) {
		marks := e.marks()
		for _, m := range marks {
			if m.LedgerID == id && slices.Contains(m.Incomplete, holey) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("marks: %+v", marks)
	})
	for _, m := range e.marks() {
		if m.LedgerID == clean.ID() {
			t.Fatalf("ledger %d without holes was marked: %+v", clean.ID(), m)
		}
	}
	e.startWorker(e.workerConfig("worker", nil))
	e.waitFor("holes filled and the mark dropped", 30*time.Second, func() (bool, string) {
		marks := e.marks()
		return len(marks) == 0, fmt.Sprintf("marks: %+v", marks)
	})
	after := e.metadataOf(id)
	if !slices.Equal(bookieIDsOf(after.Segments[0].Ensemble), bookieIDsOf(md.Segments[0].Ensemble)) || len(after.Segments) != 1 {
		t.Fatalf("filling holes changed the ensemble: %+v -> %+v", md.Segments, after.Segments)
	}
	e.verifyReplicas()
}

func bookieIDsOf(ens []topology.BookieInfo) []string {
	out := make([]string, len(ens))
	for i, b := range ens {
		out[i] = b.ID
	}
	return out
}
