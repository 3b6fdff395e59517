//go:build unix

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as the child process of the process tests: with
// CHAOS_HELPER set it serves /ready on CHAOS_ADDR until SIGTERM (or, for
// "stubborn", ignores SIGTERM).
func TestMain(m *testing.M) {
	switch os.Getenv("CHAOS_HELPER") {
	case "":
		os.Exit(m.Run())
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
	}
	// A stubborn helper never asks for SIGTERM: signal.Notify would undo
	// the Ignore and let it exit cleanly.
	term := make(chan os.Signal, 1)
	if os.Getenv("CHAOS_HELPER") != "stubborn" {
		signal.Notify(term, syscall.SIGTERM)
	}
	lis, err := net.Listen("tcp", os.Getenv("CHAOS_ADDR"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	fmt.Println("helper serving on", lis.Addr())
	go func() {
		_ = http.Serve(lis, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ready") }))
	}()
	<-term
	fmt.Println("helper got SIGTERM")
	os.Exit(0)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// helperProcess returns a helper child; stopTimeout is short for
// "stubborn" only (a -race binary sleeps 1 s at exit).
func helperProcess(t *testing.T, mode string, stopTimeout time.Duration) (*Process, string) {
	t.Helper()
	addr := freeAddr(t)
	p := NewProcess(ProcessSpec{
		Name:        "helper-" + mode,
		Path:        os.Args[0],
		Args:        []string{"-test.run=^$"},
		Env:         append(os.Environ(), "CHAOS_HELPER="+mode, "CHAOS_ADDR="+addr),
		LogFile:     filepath.Join(t.TempDir(), mode+".log"),
		ReadyURL:    "http://" + addr + "/ready",
		StopTimeout: stopTimeout,
	}, nil)
	t.Cleanup(p.Kill)
	return p, addr
}

// TestProcessLifecycle starts a process, waits for readiness, pauses and
// resumes it, kills it, restarts it with the same spec and stops it.
func TestProcessLifecycle(t *testing.T) {
	p, addr := helperProcess(t, "serve", 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if st := p.Status(); st.State != StateNew || st.PID != 0 {
		t.Fatalf("before start: %+v", st)
	}
	if err := p.Signal(syscall.SIGKILL); !errors.Is(err, ErrProcessNotRunning) {
		t.Fatalf("signal before start: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); !errors.Is(err, ErrProcessRunning) {
		t.Fatalf("second start: %v, want ErrProcessRunning", err)
	}
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	st := p.Status()
	if st.State != StateRunning || st.PID == 0 || st.Starts != 1 {
		t.Fatalf("after start: %+v", st)
	}

	// Paused: the port accepts (kernel backlog) but nothing answers.
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if st := p.Status(); st.State != StatePaused {
		t.Fatalf("after STOP: %+v", st)
	}
	client := &http.Client{Timeout: 500 * time.Millisecond}
	if resp, err := client.Get("http://" + addr + "/ready"); err == nil {
		resp.Body.Close()
		t.Fatal("a paused process answered")
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}

	p.Kill()
	st = p.Status()
	if st.State != StateExited || !strings.Contains(st.Exit, "killed") {
		t.Fatalf("after kill: %+v", st)
	}
	if err := p.WaitReady(ctx); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("WaitReady of an exited process: %v", err)
	}

	// Restart with the same spec; the log file keeps both runs.
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p.Status(); st.Starts != 2 || st.State != StateRunning || st.Exit != "" {
		t.Fatalf("after restart: %+v", st)
	}
	p.Stop(ctx)
	if st := p.Status(); st.State != StateExited || st.Exit != "exit status 0" {
		log, _ := os.ReadFile(p.Spec().LogFile)
		t.Fatalf("after stop: %+v (SIGTERM should end it cleanly)\n%s", st, log)
	}
	log, err := os.ReadFile(p.Spec().LogFile)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "helper serving on"); n != 2 || !strings.Contains(string(log), "start 2 of") || !strings.Contains(string(log), "helper got SIGTERM") {
		t.Fatalf("log file has %d runs:\n%s", n, log)
	}
}

// TestProcessStopKillsStubborn: a process that ignores SIGTERM is killed
// after StopTimeout; a paused one is stopped too.
func TestProcessStopKillsStubborn(t *testing.T) {
	p, _ := helperProcess(t, "stubborn", 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	p.Stop(ctx)
	st := p.Status()
	if st.State != StateExited || !strings.Contains(st.Exit, "killed") {
		t.Fatalf("after stop: %+v", st)
	}
	pid := 0
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	pid = p.Status().PID
	p.Kill()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("pid %d still exists after Kill: %v", pid, err)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]syscall.Signal{"KILL": syscall.SIGKILL, "sigstop": syscall.SIGSTOP, "Cont": syscall.SIGCONT, "TERM": syscall.SIGTERM} {
		got, err := ParseSignal(in)
		if err != nil || got != want {
			t.Fatalf("ParseSignal(%q) = %v, %v", in, got, err)
		}
		if SignalName(got) == "" {
			t.Fatal("no name")
		}
	}
	if _, err := ParseSignal("HUP"); err == nil || !strings.Contains(err.Error(), "KILL, TERM, INT, STOP or CONT") {
		t.Fatalf("ParseSignal(HUP): %v", err)
	}
}
