package broker_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/metadata"
)

// TestAutorecoveryStatusShowsMarkKinds: a mark that names corrupt and
// incomplete replicas (not only lost bookies) shows them in the admin
// status, so an operator sees why a ledger with every bookie alive is
// under-replicated.
func TestAutorecoveryStatusShowsMarkKinds(t *testing.T) {
	_, adm, rc := oneBroker(t, nil)
	ctx := context.Background()
	// Paused: no worker takes the mark while the test reads it.
	if err := autorecovery.Pause(ctx, rc.Regional, "test"); err != nil {
		t.Fatal(err)
	}
	const id = 4242
	m := autorecovery.Mark{LedgerID: id, Missing: []string{"bookie-9"}, MarkedUnixMs: 1, Corrupt: []string{"bookie-1"}, Incomplete: []string{"bookie-2"}}
	val, _ := json.Marshal(&m)
	if _, err := rc.Regional.Put(ctx, autorecovery.UnderReplicatedKey(id), val, metadata.AnyVersion, 0); err != nil {
		t.Fatal(err)
	}
	st, err := adm.GetAutorecoveryStatus(ctx, &clientv1.GetAutorecoveryStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var u *clientv1.UnderReplicatedLedger
	for _, x := range st.GetUnderReplicated() {
		if x.GetLedgerId() == id {
			u = x
		}
	}
	if u == nil {
		t.Fatalf("mark %d not in status %v", id, st)
	}
	if !slices.Equal(u.GetMissing(), m.Missing) || !slices.Equal(u.GetCorrupt(), m.Corrupt) || !slices.Equal(u.GetIncomplete(), m.Incomplete) {
		t.Fatalf("status shows %v, want missing %v corrupt %v incomplete %v", u, m.Missing, m.Corrupt, m.Incomplete)
	}
}

// TestListBookiesShowsInstance: every bookie of the region is listed with
// the instance its cookie names, and none is in limbo.
func TestListBookiesShowsInstance(t *testing.T) {
	_, adm, _ := oneBroker(t, nil)
	r, err := adm.ListBookies(context.Background(), &clientv1.ListBookiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetBookies()) == 0 {
		t.Fatal("no bookies listed")
	}
	for _, b := range r.GetBookies() {
		if b.GetInstanceId() == "" || b.GetLimboBelowLedger() != 0 || b.GetLimboReason() != "" {
			t.Errorf("bookie %s: instance %q limbo below %d %q, want an instance and no limbo", b.GetBookieId(), b.GetInstanceId(), b.GetLimboBelowLedger(), b.GetLimboReason())
		}
	}
}
