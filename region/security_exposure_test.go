package region

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/metadata/metadatatest"
	"github.com/meridianmq/meridian/security"
)

// warnLog records Warn messages.
type warnLog struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnLog) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, r.Message)
	return nil
}
func (w *warnLog) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnLog) WithGroup(string) slog.Handler      { return w }

func (w *warnLog) insecureWarned() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.msgs {
		if strings.Contains(m, "INSECURE") {
			return true
		}
	}
	return false
}

// TestSecurityExposure: a broker, bookie or metadata node listening on a
// non-loopback address without TLS and auth refuses to start, naming the
// field; security.insecure starts it with a warning.
func TestSecurityExposure(t *testing.T) {
	store := metadatatest.Start(t)
	bcfg := broker.DefaultConfig()
	bcfg.Region = "test"
	bcfg.GRPCAddress = "0.0.0.0:0"
	bcfg.Global, bcfg.Regional, bcfg.Ledgers = store, store, broker.NewLedgerStore(nil)
	b, err := broker.NewServer(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Start(ctx); !errors.Is(err, security.ErrExposed) || !strings.Contains(err.Error(), "broker.grpc_address") {
		t.Fatalf("broker on 0.0.0.0 without security: %v", err)
	}

	bk := bookie.DefaultConfig()
	bk.ID = "b1"
	dir := t.TempDir()
	bk.JournalDir, bk.LedgerDir = filepath.Join(dir, "j"), filepath.Join(dir, "l")
	bk.ListenAddr = "0.0.0.0:0"
	s, err := bookie.NewServer(bk)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); !errors.Is(err, security.ErrExposed) || !strings.Contains(err.Error(), "bookie.listen_addr") {
		t.Fatalf("bookie on 0.0.0.0 without security: %v", err)
	}
	warns := &warnLog{}
	bk.Security.Insecure = true
	bk.Logger = slog.New(warns)
	s, err = bookie.NewServer(bk)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("bookie with security.insecure: %v", err)
	}
	s.Stop()
	if !warns.insecureWarned() {
		t.Fatal("no INSECURE warning at start")
	}

	mcfg := metadata.SingleNodeConfig(t.TempDir(), "127.0.0.1:0", metadata.GlobalShard)
	mcfg.GRPCAddress = "0.0.0.0:0"
	n, err := metadata.NewNode(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(ctx); !errors.Is(err, security.ErrExposed) || !strings.Contains(err.Error(), "metadata.grpc_address") {
		t.Fatalf("metadata node on 0.0.0.0 without security: %v", err)
	}
}
