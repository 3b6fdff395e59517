//go:build unix

package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Errors of process control.
var (
	// ErrProcessRunning is returned by Start when the process runs (or is
	// stopped with SIGSTOP: resume it with SIGCONT).
	ErrProcessRunning = errors.New("chaos: process is running")
	// ErrProcessNotRunning is returned by Signal when the process has not
	// been started or has exited.
	ErrProcessNotRunning = errors.New("chaos: process is not running")
)

// ProcessSpec describes an OS process the chaos tools start, kill and
// restart with the same arguments (and so the same config and data).
type ProcessSpec struct {
	// Name identifies the process in logs and status (e.g. "a/broker-0").
	Name string
	// Path is the executable; Args its arguments (without argv[0]).
	Path string
	Args []string
	// Env is the environment (nil = this process's).
	Env []string
	// LogFile receives stdout and stderr, appended across restarts
	// ("" = discarded).
	LogFile string
	// ReadyURL answers HTTP 200 once the process is ready ("" = ready as
	// soon as it runs); see WaitReady.
	ReadyURL string
	// ReadyClient polls ReadyURL (default: plain HTTP, 2s timeout); a
	// secured process's https URL needs one that trusts its CA.
	ReadyClient *http.Client
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL
	// (default 20s).
	StopTimeout time.Duration
}

// ProcessState is what a Process is doing.
type ProcessState string

// Process states.
const (
	StateNew     ProcessState = "new"     // never started
	StateRunning ProcessState = "running" // started and not exited
	StatePaused  ProcessState = "paused"  // sent SIGSTOP (and no SIGCONT since)
	StateExited  ProcessState = "exited"  // exited; see ProcessStatus.Exit
)

// ProcessStatus is a snapshot of a Process.
type ProcessStatus struct {
	Name  string       `json:"name"`
	PID   int          `json:"pid"`
	State ProcessState `json:"state"`
	// Exit is how the last run ended ("exit status 1", "signal: killed").
	Exit string `json:"exit,omitempty"`
	// Starts counts the runs so far.
	Starts int    `json:"starts"`
	Log    string `json:"log,omitempty"`
}

// Process is one OS process of a cluster under test. It runs in its own
// process group (so a terminal's Ctrl-C reaches only its parent, which
// stops it in order) and, on Linux, dies with the thread that started it
// (Pdeathsig), so a parent killed with SIGKILL leaves no orphan behind.
// Its methods are safe for concurrent use.
type Process struct {
	spec ProcessSpec
	log  *slog.Logger

	// mu guards the fields below.
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when the current run exits
	paused bool
	exit   string
	starts int
}

// NewProcess returns a process that is not started; log may be nil.
func NewProcess(spec ProcessSpec, log *slog.Logger) *Process {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if spec.StopTimeout <= 0 {
		spec.StopTimeout = 20 * time.Second
	}
	return &Process{spec: spec, log: log.With("process", spec.Name)}
}

// Spec returns the process's spec.
func (p *Process) Spec() ProcessSpec { return p.spec }

// Start starts the process (again, after an exit) with its spec's
// arguments. It fails with ErrProcessRunning while a run has not exited.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		return fmt.Errorf("%w: %s (pid %d)", ErrProcessRunning, p.spec.Name, p.cmd.Process.Pid)
	}
	cmd := exec.Command(p.spec.Path, p.spec.Args...)
	cmd.Env = p.spec.Env
	cmd.SysProcAttr = sysProcAttr()
	var logf *os.File
	if p.spec.LogFile != "" {
		f, err := os.OpenFile(p.spec.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("chaos: %s: log file: %w", p.spec.Name, err)
		}
		fmt.Fprintf(f, "=== %s: start %d of %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), p.starts+1, p.spec.Path, strings.Join(p.spec.Args, " "))
		cmd.Stdout, cmd.Stderr, logf = f, f, f
	}
	if err := startLocked(cmd); err != nil {
		if logf != nil {
			logf.Close()
		}
		return fmt.Errorf("chaos: start %s: %w", p.spec.Name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.paused, p.exit = cmd, done, false, ""
	p.starts++
	p.log.Info("process started", "pid", cmd.Process.Pid, "start", p.starts)
	go func() {
		err := cmd.Wait()
		if logf != nil {
			logf.Close()
		}
		exit := "exit status 0"
		if err != nil {
			exit = err.Error()
		}
		p.mu.Lock()
		p.exit, p.paused = exit, false
		p.mu.Unlock()
		p.log.Info("process exited", "pid", cmd.Process.Pid, "exit", exit)
		close(done)
	}()
	return nil
}

func (p *Process) runningLocked() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process's group. SIGSTOP pauses it (on Linux
// Signal returns once the kernel reports it stopped) and SIGCONT resumes
// it (see ProcessStatus.State).
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return fmt.Errorf("%w: %s", ErrProcessNotRunning, p.spec.Name)
	}
	pid := p.cmd.Process.Pid
	// The child leads its own group (Setpgid): -pid reaches anything it forked.
	if err := syscall.Kill(-pid, sig); err != nil {
		if err := syscall.Kill(pid, sig); err != nil {
			return fmt.Errorf("chaos: signal %v to %s (pid %d): %w", sig, p.spec.Name, pid, err)
		}
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
		if err := waitStopped(pid); err != nil {
			p.log.Warn("SIGSTOP sent, stop not confirmed", "pid", pid, "err", err)
		}
	case syscall.SIGCONT:
		p.paused = false
	}
	p.log.Info("signal sent", "pid", pid, "signal", SignalName(sig))
	return nil
}

// Done returns a channel closed when the current run exits (nil before
// the first Start).
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Wait waits until the current run exits or ctx ends.
func (p *Process) Wait(ctx context.Context) error {
	done := p.Done()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop ends the current run gracefully: SIGCONT (a paused process cannot
// handle SIGTERM), SIGTERM, then SIGKILL after the spec's StopTimeout or
// once ctx ends. It returns when the process has exited; stopping a
// process that is not running does nothing.
func (p *Process) Stop(ctx context.Context) {
	done := p.Done()
	if done == nil {
		return
	}
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGTERM)
	t := time.NewTimer(p.spec.StopTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
		p.log.Warn("process did not stop after SIGTERM: killing it", "timeout", p.spec.StopTimeout)
	case <-ctx.Done():
	}
	_ = p.Signal(syscall.SIGKILL)
	<-done
}

// Kill sends SIGKILL and waits for the exit.
func (p *Process) Kill() {
	done := p.Done()
	if done == nil {
		return
	}
	_ = p.Signal(syscall.SIGKILL)
	<-done
}

// WaitReady polls the spec's ReadyURL until it answers 200. It fails when
// the run exits first or ctx ends.
func (p *Process) WaitReady(ctx context.Context) error {
	done := p.Done()
	if done == nil {
		return fmt.Errorf("%w: %s", ErrProcessNotRunning, p.spec.Name)
	}
	if p.spec.ReadyURL == "" {
		return nil
	}
	client := p.spec.ReadyClient
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	last := "no answer yet"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.spec.ReadyURL, nil)
		if err != nil {
			return fmt.Errorf("chaos: %s: ready URL: %w", p.spec.Name, err)
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-done:
			return fmt.Errorf("chaos: %s exited (%s) before %s answered 200 (see %s)", p.spec.Name, p.Status().Exit, p.spec.ReadyURL, p.spec.LogFile)
		case <-ctx.Done():
			return fmt.Errorf("chaos: %s: %s not ready: %w (last: %s)", p.spec.Name, p.spec.ReadyURL, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Status returns a snapshot of the process.
func (p *Process) Status() ProcessStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := ProcessStatus{Name: p.spec.Name, State: StateNew, Exit: p.exit, Starts: p.starts, Log: p.spec.LogFile}
	switch {
	case p.runningLocked() && p.paused:
		st.State, st.PID = StatePaused, p.cmd.Process.Pid
	case p.runningLocked():
		st.State, st.PID = StateRunning, p.cmd.Process.Pid
	case p.done != nil:
		st.State = StateExited
	}
	return st
}

// signals are the signals ParseSignal accepts, by name.
var signals = map[string]syscall.Signal{
	"KILL": syscall.SIGKILL,
	"TERM": syscall.SIGTERM,
	"INT":  syscall.SIGINT,
	"STOP": syscall.SIGSTOP,
	"CONT": syscall.SIGCONT,
}

// ParseSignal parses KILL, TERM, INT, STOP or CONT (case-insensitive,
// with or without the SIG prefix).
func ParseSignal(name string) (syscall.Signal, error) {
	n := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "SIG")
	if s, ok := signals[n]; ok {
		return s, nil
	}
	return 0, fmt.Errorf("chaos: signal %q: want KILL, TERM, INT, STOP or CONT", name)
}

// SignalName is the short name of a signal ParseSignal accepts ("KILL").
func SignalName(sig syscall.Signal) string {
	for n, s := range signals {
		if s == sig {
			return n
		}
	}
	return sig.String()
}
