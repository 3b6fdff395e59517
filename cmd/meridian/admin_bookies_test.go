package main

import (
	"strings"
	"testing"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// TestUnderReplicatedLine: `admin bookies status` names every kind of
// damage a mark records: lost bookies, corrupt and incomplete replicas.
func TestUnderReplicatedLine(t *testing.T) {
	u := &clientv1.UnderReplicatedLedger{LedgerId: 7, Missing: []string{"b0"}, Corrupt: []string{"b1", "b2"}, Incomplete: []string{"b3"},
		MarkedUnixMs: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli(), Worker: "w1"}
	got := underReplicatedLine(u)
	for _, want := range []string{"ledger 7 ", "missing=b0", "corrupt=b1,b2", "incomplete=b3", "marked=2026-01-02T03:04:05Z", "worker=w1"} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q lacks %q", got, want)
		}
	}
}

// TestAdminNamesEveryResource: `meridian admin` without a resource, and
// its help, name every resource command, metadata and ledgers included.
func TestAdminNamesEveryResource(t *testing.T) {
	cmd := newAdminCmd()
	cmd.SetArgs(nil)
	cmd.SetOut(&strings.Builder{})
	cmd.SetErr(&strings.Builder{})
	err := cmd.Execute()
	if err == nil {
		t.Fatal("admin without a resource succeeded")
	}
	for _, sub := range cmd.Commands() {
		if sub.Name() == "help" || sub.Name() == "completion" {
			continue
		}
		if !strings.Contains(err.Error(), sub.Name()) {
			t.Errorf("missing-resource error %q does not name %q", err, sub.Name())
		}
		if !strings.Contains(cmd.Short, sub.Name()) {
			t.Errorf("admin help %q does not name %q", cmd.Short, sub.Name())
		}
	}
}

// TestBookieLineShowsInstanceAndLimbo: `admin bookies list` names the
// instance and, for a bookie in limbo, the bound and why it lasts.
func TestBookieLineShowsInstanceAndLimbo(t *testing.T) {
	b := &clientv1.BookieStatus{BookieId: "bookie-1", Address: "h:1", Rack: "r", Live: true, Decommissioned: true,
		InstanceId: "inst-9", LimboBelowLedger: 10, LimboReason: "2 ledger(s) below 10 still list it"}
	got := bookieLine(b)
	for _, want := range []string{"bookie-1 read-write,decommissioned,limbo ", "instance=inst-9", "limbo_below_ledger=10", `limbo_reason="2 ledger(s) below 10 still list it"`} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q lacks %q", got, want)
		}
	}
	b = &clientv1.BookieStatus{BookieId: "bookie-0", Live: true, InstanceId: "inst-0"}
	if got := bookieLine(b); strings.Contains(got, "limbo") || !strings.Contains(got, "instance=inst-0") {
		t.Errorf("line %q of a bookie out of limbo", got)
	}
}
