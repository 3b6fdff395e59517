package client_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meridianmq/meridian/client"
)

// buildMeridian builds the meridian binary into a temp dir.
func buildMeridian(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "meridian")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/meridianmq/meridian/cmd/meridian")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}
	return bin
}

// freeAddr returns a loopback address with a port that was free.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// standaloneProc is `meridian standalone` running as a child process.
type standaloneProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startStandaloneProc(t *testing.T, bin, dir, grpcAddr, httpAddr string) *standaloneProc {
	t.Helper()
	cmd := exec.Command(bin, "standalone", "--data-dir", dir, "--grpc", grpcAddr, "--http", httpAddr)
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(dir), "standalone.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &standaloneProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(filepath.Join(filepath.Dir(dir), "standalone.log"))
			t.Fatalf("standalone exited before ready:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("standalone not ready within 90s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *standaloneProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// TestStandaloneKill9KeepsAckedMessages produces through a `kill -9` of
// the standalone process and its restart on the same data dir: every
// acknowledged message must be readable afterwards. Duplicates (resends
// whose first copy was stored before the crash) are counted and logged.
func TestStandaloneKill9KeepsAckedMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and restarts a region (-short)")
	}
	bin := buildMeridian(t)
	base := t.TempDir()
	dir := filepath.Join(base, "data")
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	proc := startStandaloneProc(t, bin, dir, grpcAddr, httpAddr)

	ctx := tctx(t, 240*time.Second)
	c := newClient(t, grpcAddr)
	const topic = "public/default/crash"
	p, err := c.NewProducer(ctx, client.ProducerOptions{Topic: topic, BatchingMaxMessages: 20, BatchingMaxDelay: 2 * time.Millisecond,
		MaxPendingMessages: 500, BlockIfQueueFull: true, SendTimeout: 120 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]client.MessageID{}
	failed := 0
	var firstErr error
	ackedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }

	stop := make(chan struct{})
	prodDone := make(chan int)
	go func() {
		i := 0
		for {
			select {
			case <-stop:
				prodDone <- i
				return
			default:
			}
			payload := fmt.Sprintf("m%06d", i)
			i++
			p.SendAsync(ctx, &client.Message{Payload: []byte(payload)}, func(id client.MessageID, _ *client.Message, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				acked[payload] = id
			})
		}
	}()

	waitFor := func(n int, what string) {
		deadline := time.Now().Add(120 * time.Second)
		for ackedCount() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: only %d acknowledged", what, ackedCount())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor(2000, "before the crash")
	proc.kill() // kill -9 mid-stream
	atKill := ackedCount()
	t.Logf("SIGKILL with %d messages acknowledged", atKill)
	proc = startStandaloneProc(t, bin, dir, grpcAddr, httpAddr)
	waitFor(atKill+2000, "after the restart")
	close(stop)
	sent := <-prodDone
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	nAcked := len(acked)
	if failed > 0 {
		t.Logf("%d sends failed (not acknowledged, allowed): first %v", failed, firstErr)
	}
	mu.Unlock()
	st := p.Stats()
	t.Logf("sent %d, acknowledged %d; producer reconnects %d, batches resent %d, reported duplicate %d",
		sent, nAcked, st.Reconnects, st.Resent, st.Duplicates)

	// Read everything back from the earliest position.
	co, err := c.Subscribe(ctx, client.ConsumerOptions{Topic: topic, Subscription: "verify", InitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	received := map[string]int{}
	missing := nAcked
	deadline := time.Now().Add(120 * time.Second)
	for missing > 0 {
		if time.Now().After(deadline) {
			break
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := co.Receive(rctx)
		cancel()
		if err != nil {
			continue
		}
		pl := string(m.Payload)
		received[pl]++
		if _, ok := acked[pl]; ok && received[pl] == 1 {
			missing--
		}
		_ = co.Ack(ctx, m.ID)
	}
	var lost []string
	for pl := range acked {
		if received[pl] == 0 {
			lost = append(lost, pl)
		}
	}
	dups := 0
	for _, n := range received {
		dups += n - 1
	}
	t.Logf("read back %d distinct messages, %d duplicates", len(received), dups)
	if len(lost) > 0 {
		if len(lost) > 10 {
			lost = lost[:10]
		}
		t.Fatalf("%d acknowledged messages lost after kill -9, e.g. %v", missing, lost)
	}
	_ = proc
}
