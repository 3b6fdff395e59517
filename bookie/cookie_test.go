package bookie_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func metaCookie(t *testing.T, store metadata.Store, id string) bookie.Cookie {
	t.Helper()
	kv, err := store.Get(ctxT(t), bookie.CookieKey(id), metadata.ReadOptions{})
	if err != nil {
		t.Fatalf("metadata cookie of %s: %v", id, err)
	}
	var c bookie.Cookie
	if err := json.Unmarshal(kv.Value, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func dirCookie(t *testing.T, dir string) bookie.Cookie {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, bookie.CookieFileName))
	if err != nil {
		t.Fatalf("cookie in %s: %v", dir, err)
	}
	var c bookie.Cookie
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// A new bookie writes the same cookie to every data directory and to the
// metadata; a restart on the same directories keeps its instance.
func TestCookieCreatedOnceAndKeptOnRestart(t *testing.T) {
	store := metadatatest.Start(t)
	c := bookietest.StartCluster(t, 1, bookietest.WithMetadata(store))
	inst := c.Server(0).InstanceID()
	if inst == "" {
		t.Fatal("no instance ID")
	}
	j, l := c.Dirs(0)
	for _, ck := range []bookie.Cookie{dirCookie(t, j), dirCookie(t, l), metaCookie(t, store, c.ID(0))} {
		if ck.InstanceID != inst || ck.BookieID != c.ID(0) || ck.LimboBelowLedger != 0 {
			t.Fatalf("cookie %+v, want instance %s of %s, no limbo", ck, inst, c.ID(0))
		}
	}
	if got := registry(t, store)[c.ID(0)].InstanceID; got != inst {
		t.Fatalf("registry instance %q, want %q", got, inst)
	}
	ctx := ctxT(t)
	if err := add(ctx, c.Client(0), 1, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	c.Kill(0)
	if err := c.Restart(0); err != nil {
		t.Fatalf("restart on the same dirs: %v", err)
	}
	if got := c.Server(0).InstanceID(); got != inst {
		t.Fatalf("instance after restart %s, want %s", got, inst)
	}
	if _, err := read(ctx, c.Client(0), 1, 0); err != nil {
		t.Fatal(err)
	}
}

// A bookie whose data directories were wiped, and which skips the format
// step, refuses to start; the error names the directory and the fix.
// (Before cookies it started empty and answered "not found" for entries
// it had acknowledged.)
func TestWipedBookieRefusesToStart(t *testing.T) {
	store := metadatatest.Start(t)
	c := bookietest.StartCluster(t, 1, bookietest.WithMetadata(store))
	if err := add(ctxT(t), c.Client(0), 1, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	c.Wipe(0)
	err := c.Restart(0)
	if !errors.Is(err, bookie.ErrCookie) {
		t.Fatalf("restart of a wiped bookie: %v, want ErrCookie", err)
	}
	j, _ := c.Dirs(0)
	for _, want := range []string{j, "meridian bookie format --force", bookie.CookieKey(c.ID(0))} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	t.Logf("refused as expected: %v", err)
	if c.Running(0) {
		t.Fatal("wiped bookie is serving")
	}
}

// Without metadata the directory cookies still catch a wiped or swapped
// directory.
func TestCookieMismatchRefusesToStart(t *testing.T) {
	c := bookietest.StartCluster(t, 2)
	j0, l0 := c.Dirs(0)
	j1, _ := c.Dirs(1)
	c.Stop(0)
	c.Stop(1)

	// Journal wiped, ledger dir kept.
	if err := os.RemoveAll(j0); err != nil {
		t.Fatal(err)
	}
	err := c.Restart(0)
	if !errors.Is(err, bookie.ErrCookie) || !strings.Contains(err.Error(), j0) {
		t.Fatalf("restart with a wiped journal dir: %v, want ErrCookie naming %s", err, j0)
	}

	// Another bookie's cookie in the ledger dir.
	data, err := os.ReadFile(filepath.Join(j1, bookie.CookieFileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l0, bookie.CookieFileName), data, 0o644); err != nil {
		t.Fatal(err)
	}
	err = c.Restart(0)
	if !errors.Is(err, bookie.ErrCookie) || !strings.Contains(err.Error(), "bookie-1") {
		t.Fatalf("restart with another bookie's cookie: %v, want ErrCookie naming bookie-1", err)
	}
	if err := c.Restart(1); err != nil {
		t.Fatalf("untouched bookie: %v", err)
	}
}

// A bookie answers only requests that name it and its instance.
func TestWrongBookieRejected(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	if err := add(ctx, c.Client(0), 3, 0, []byte("x")); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.Addr(0), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw := bookiev1.NewBookieClient(conn)
	inst := c.Server(0).InstanceID()
	for _, tc := range []struct{ name, id, inst string }{
		{"no identity", "", ""},
		{"other bookie", "bookie-9", inst},
		{"other instance", c.ID(0), "00000000-0000-4000-8000-000000000000"},
	} {
		_, err := raw.ReadEntry(ctx, &bookiev1.ReadEntryRequest{LedgerId: 3, EntryId: 0, ExpectedBookieId: tc.id, ExpectedInstanceId: tc.inst})
		if status.Code(err) != codes.FailedPrecondition || !errors.Is(bookie.FromStatus(err), bookie.ErrWrongBookie) {
			t.Errorf("%s: read answered %v, want FAILED_PRECONDITION wrong bookie", tc.name, err)
		}
		_, err = raw.Fence(ctx, &bookiev1.FenceRequest{LedgerId: 3, ExpectedBookieId: tc.id, ExpectedInstanceId: tc.inst})
		if !errors.Is(bookie.FromStatus(err), bookie.ErrWrongBookie) {
			t.Errorf("%s: fence answered %v, want wrong bookie", tc.name, err)
		}
		st, err := raw.AddEntries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&bookiev1.AddEntriesRequest{ExpectedBookieId: tc.id, ExpectedInstanceId: tc.inst,
			Entries: []*bookiev1.AddEntryRequest{{LedgerId: 3, EntryId: 1, Payload: []byte("y"), LastAddConfirmed: 0}}}); err != nil {
			t.Fatal(err)
		}
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r := resp.Results[0]; !errors.Is(bookie.FromCode(codes.Code(r.Code), r.Message), bookie.ErrWrongBookie) {
			t.Errorf("%s: streamed add answered %d %q, want wrong bookie", tc.name, r.Code, r.Message)
		}
		_ = st.CloseSend()
	}
	// Nothing was fenced or added by the refused requests.
	lac, err := c.Client(0).ReadLastAddConfirmed(ctx, &bookiev1.ReadLastAddConfirmedRequest{LedgerId: 3})
	if err != nil || lac.Fenced || lac.LastEntryId != 0 {
		t.Fatalf("after refused requests: %+v %v, want unfenced, last entry 0", lac, err)
	}
	// GetInfo discovers the identity without naming one.
	info, err := raw.GetInfo(ctx, &bookiev1.GetInfoRequest{})
	if err != nil || info.BookieId != c.ID(0) || info.InstanceId != inst {
		t.Fatalf("GetInfo: %+v %v", info, err)
	}
}

// After a forced re-format the bookie is in limbo for the ledgers its old
// instance may have held (IDs below the ledger ID counter): "ledger
// unknown", never "not found", and no normal adds. It leaves limbo once no
// such ledger names it any more.
func TestFormatLimbo(t *testing.T) {
	store := metadatatest.Start(t)
	c := bookietest.StartCluster(t, 1, bookietest.WithMetadata(store), bookietest.WithConfig(func(_ int, cfg *bookie.Config) {
		cfg.LimboCheckInterval = 50 * time.Millisecond
	}))
	ctx := ctxT(t)
	id := c.ID(0)
	put := func(key string, v any) int64 {
		data, _ := json.Marshal(v)
		kv, err := store.Put(ctx, key, data, metadata.AnyVersion, 0)
		if err != nil {
			t.Fatal(err)
		}
		return kv.Version
	}
	prefix, counter := bookie.LedgerKeys()
	put(counter, map[string]int64{"next": 100})
	// Ledger 5 lives on this bookie (metadata names it).
	ledgerKey := prefix + "00000000000000000005"
	put(ledgerKey, map[string]any{"id": 5, "segments": []any{map[string]any{"first_entry": 0, "ensemble": []any{map[string]string{"id": id}}}}})
	for e := range int64(3) {
		if err := add(ctx, c.Client(0), 5, e, payloadFor(5, e, 10)); err != nil {
			t.Fatal(err)
		}
	}
	old := c.Server(0).InstanceID()
	c.Wipe(0)
	ck, err := c.Format(0)
	if err != nil {
		t.Fatal(err)
	}
	if ck.InstanceID == old || ck.LimboBelowLedger != 100 {
		t.Fatalf("format: %+v, want a new instance and limbo below 100", ck)
	}
	if _, err := store.Get(ctx, bookie.DecommissionKeyPrefix+id, metadata.ReadOptions{}); err != nil {
		t.Fatalf("format did not decommission the bookie: %v", err)
	}
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	if !c.Server(0).InLimbo() || c.Server(0).InstanceID() != ck.InstanceID {
		t.Fatal("re-formatted bookie not in limbo / wrong instance")
	}
	if got := metaCookie(t, store, id).InstanceID; got != ck.InstanceID {
		t.Fatalf("metadata cookie instance %s, want %s", got, ck.InstanceID)
	}
	if _, err := read(ctx, c.Client(0), 5, 1); !errors.Is(err, bookie.ErrLedgerUnknown) || bookie.IsNotFound(err) {
		t.Fatalf("read of a limbo ledger: %v, want ledger unknown", err)
	}
	if _, err := c.Client(0).ReadLastAddConfirmed(ctx, &bookiev1.ReadLastAddConfirmedRequest{LedgerId: 5}); !errors.Is(bookie.FromStatus(err), bookie.ErrLedgerUnknown) {
		t.Fatalf("LAC of a limbo ledger: %v, want ledger unknown", err)
	}
	if err := add(ctx, c.Client(0), 5, 3, []byte("z")); !errors.Is(err, bookie.ErrLedgerUnknown) {
		t.Fatalf("normal add to a limbo ledger: %v, want ledger unknown", err)
	}
	// A recovery add is accepted and served; what is still missing stays unknown.
	if _, err := c.Client(0).AddEntry(ctx, &bookiev1.AddEntryRequest{LedgerId: 5, EntryId: 2, Payload: payloadFor(5, 2, 10), LastAddConfirmed: 1, RecoveryAdd: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := read(ctx, c.Client(0), 5, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := read(ctx, c.Client(0), 5, 0); !errors.Is(err, bookie.ErrLedgerUnknown) {
		t.Fatalf("read of a lost entry of a held limbo ledger: %v, want ledger unknown", err)
	}
	// A ledger created after the format is not in limbo.
	if _, err := read(ctx, c.Client(0), 150, 0); !bookie.IsNotFound(err) {
		t.Fatalf("read of a new ledger: %v, want not found", err)
	}
	if err := add(ctx, c.Client(0), 150, 0, []byte("n")); err != nil {
		t.Fatal(err)
	}
	// A restart keeps the limbo.
	c.Kill(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	if !c.Server(0).InLimbo() {
		t.Fatal("limbo lost on restart")
	}
	// Autorecovery moved ledger 5 elsewhere: limbo ends.
	put(ledgerKey, map[string]any{"id": 5, "segments": []any{map[string]any{"first_entry": 0, "ensemble": []any{map[string]string{"id": "other"}}}}})
	waitFor(t, 30*time.Second, "limbo to end", func() bool { return !c.Server(0).InLimbo() })
	if _, err := read(ctx, c.Client(0), 5, 0); !bookie.IsNotFound(err) {
		t.Fatalf("read after limbo: %v, want not found", err)
	}
	if ck := metaCookie(t, store, id); ck.LimboBelowLedger != 0 || ck.InstanceID != c.Server(0).InstanceID() {
		t.Fatalf("metadata cookie after limbo: %+v", ck)
	}
	j, _ := c.Dirs(0)
	waitFor(t, 10*time.Second, "directory cookie limbo cleared", func() bool { return dirCookie(t, j).LimboBelowLedger == 0 })
	waitFor(t, 10*time.Second, "decommission withdrawn", func() bool {
		_, err := store.Get(ctx, bookie.DecommissionKeyPrefix+id, metadata.ReadOptions{})
		return errors.Is(err, metadata.ErrNotFound)
	})
}

// Format without Force refuses directories that hold data or a cookie.
func TestFormatNeedsForce(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	c.Stop(0)
	j, l := c.Dirs(0)
	cfg := bookie.DefaultConfig()
	cfg.ID, cfg.JournalDir, cfg.LedgerDir = c.ID(0), j, l
	if _, err := bookie.Format(context.Background(), cfg, bookie.FormatOptions{}); !errors.Is(err, bookie.ErrNotEmpty) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("format without force: %v, want ErrNotEmpty naming --force", err)
	}
}

// With the default ledger directory (inside the journal directory) a
// forced format wipes both and the bookie starts again as a new instance.
func TestFormatDefaultLedgerDir(t *testing.T) {
	dir := t.TempDir()
	cfg := bookie.DefaultConfig()
	cfg.ID, cfg.JournalDir, cfg.HTTPAddr = "b", filepath.Join(dir, "journal"), ""
	start := func() *bookie.Server {
		t.Helper()
		s, err := bookie.NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := start()
	old := s.InstanceID()
	s.Stop() // final checkpoint: JournalDir/index/checkpoint exists
	ck, err := bookie.Format(ctxT(t), cfg, bookie.FormatOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if ck.InstanceID == old {
		t.Fatal("format kept the instance ID")
	}
	names, _ := os.ReadDir(cfg.JournalDir)
	for _, n := range names {
		if n.Name() != bookie.CookieFileName && n.Name() != "index" {
			t.Errorf("left after format: %s", n.Name())
		}
	}
	s = start()
	defer s.Stop()
	if s.InstanceID() != ck.InstanceID || s.InLimbo() {
		t.Fatalf("after format: instance %s limbo %v, want %s and no limbo (no metadata)", s.InstanceID(), s.InLimbo(), ck.InstanceID)
	}
}
