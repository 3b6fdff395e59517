package bookie_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bookiev1 "github.com/meridianmq/meridian/api/bookie/v1"
	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/bookietest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
)

const childEnv = "MERIDIAN_BOOKIE_TEST_CHILD_DIR"

// TestMain lets the test binary double as a bookie process for the kill -9
// test: with childEnv set it runs a bookie on that directory and prints its
// address.
func TestMain(m *testing.M) {
	// The bookie's non-zeroing pool for gRPC's global (de)serialization
	// buffers, as `meridian bookie` sets it (see bookie.BufferPool).
	experimental.SetDefaultBufferPool(bookie.BufferPool())
	if dir := os.Getenv(childEnv); dir != "" {
		runChild(dir)
		return
	}
	os.Exit(m.Run())
}

func runChild(dir string) {
	cfg := bookie.DefaultConfig()
	cfg.ID = "child"
	cfg.JournalDir = dir
	cfg.HTTPAddr = ""
	cfg.CheckpointInterval = 300 * time.Millisecond // checkpoints race the kill too
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := bookie.NewServer(cfg)
	if err == nil {
		err = srv.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	fmt.Printf("ADDR %s %s\n", srv.Addr(), srv.InstanceID())
	select {}
}

type child struct {
	cmd  *exec.Cmd
	addr string
	conn *grpc.ClientConn
}

func startChild(t *testing.T, dir string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		t.Fatalf("child did not start: %q %v", line, err)
	}
	addr, instance, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "ADDR ")), " ")
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		bookie.WithExpectedIdentity(bookie.FixedIdentity("child", instance))...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &child{cmd: cmd, addr: addr, conn: conn}
}

// kill -9 a bookie process in the middle of a stream of adds; after a
// restart (journal replay) every acknowledged entry reads back intact.
func TestKill9RecoversAcknowledgedEntries(t *testing.T) {
	dir := t.TempDir()
	ctx, cancelAll := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelAll()
	all := map[[2]int64]int{} // acknowledged in every round so far
	rounds := 2
	if os.Getenv("MERIDIAN_LONG") != "" {
		rounds = 10 // make test-long / soak
	}
	for round := 0; round < rounds; round++ {
		ch := startChild(t, dir)
		cl := bookiev1.NewBookieClient(ch.conn)
		var mu sync.Mutex
		acked := map[[2]int64]int{}
		var wg sync.WaitGroup
		sctx, cancel := context.WithCancel(ctx)
		for s := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ledger := int64(round*10 + s)
				st, err := cl.AddEntries(sctx)
				if err != nil {
					return
				}
				go func() {
					for e := int64(0); sctx.Err() == nil; e++ {
						size := 100 + int(e%7)*900
						if st.Send(&bookiev1.AddEntriesRequest{Entries: []*bookiev1.AddEntryRequest{{LedgerId: ledger, EntryId: e, Payload: payloadFor(ledger, e, size), LastAddConfirmed: e - 1}}}) != nil {
							return
						}
						if e%64 == 0 {
							time.Sleep(time.Millisecond) // keep the window bounded
						}
					}
				}()
				for {
					m, err := st.Recv()
					if err != nil {
						return
					}
					mu.Lock()
					for _, r := range m.Results {
						if r.Code == 0 {
							acked[[2]int64{r.LedgerId, r.EntryId}] = 100 + int(r.EntryId%7)*900
						}
					}
					mu.Unlock()
				}
			}()
		}
		waitFor(t, 60*time.Second, "acknowledged adds", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(acked) >= 3000
		})
		if err := ch.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		ch.cmd.Wait()
		cancel()
		wg.Wait()
		mu.Lock()
		for k, v := range acked {
			all[k] = v
		}
		snapshot := all
		mu.Unlock()

		ch2 := startChild(t, dir)
		cl2 := bookiev1.NewBookieClient(ch2.conn)
		lost := 0
		for k, size := range snapshot {
			r, err := cl2.ReadEntry(ctx, &bookiev1.ReadEntryRequest{LedgerId: k[0], EntryId: k[1]})
			if err != nil || !bytes.Equal(r.Payload, payloadFor(k[0], k[1], size)) {
				lost++
				if lost < 10 {
					t.Errorf("round %d: acknowledged entry %v lost after kill -9: %v", round, k, bookie.FromStatus(err))
				}
			}
		}
		t.Logf("round %d: %d acknowledged entries before SIGKILL, %d lost", round, len(snapshot), lost)
		if lost > 0 {
			t.FailNow()
		}
		ch2.cmd.Process.Signal(syscall.SIGKILL)
		ch2.cmd.Wait()
	}
}

// In-process crash (Kill) with many ledgers and a checkpoint in between:
// replay from the checkpoint restores everything.
func TestRestartReplaysAfterCheckpoint(t *testing.T) {
	c := bookietest.StartCluster(t, 1)
	ctx := ctxT(t)
	cl := c.Client(0)
	for e := int64(0); e < 100; e++ {
		if err := add(ctx, cl, e%5, e/5, payloadFor(e%5, e/5, 300)); err != nil {
			t.Fatal(err)
		}
		if e == 50 {
			if err := c.Server(0).Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	c.Kill(0)
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}
	cl = c.Client(0)
	for e := int64(0); e < 100; e++ {
		got, err := read(ctx, cl, e%5, e/5)
		if err != nil || !bytes.Equal(got, payloadFor(e%5, e/5, 300)) {
			t.Fatalf("entry %d/%d after restart: %v", e%5, e/5, err)
		}
	}
	r, err := cl.ReadLastAddConfirmed(ctx, &bookiev1.ReadLastAddConfirmedRequest{LedgerId: 3})
	if err != nil || r.LastEntryId != 19 || r.LastAddConfirmed != 18 {
		t.Fatalf("lac after restart: %v %+v", err, r)
	}
}
