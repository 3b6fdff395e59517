package chaos

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// sysProcAttr puts the child in its own process group and has the kernel
// kill it when the thread that started it dies. Go never ends a thread of
// its pool unless a goroutine locked to it exits, so in practice the child
// dies with this process, even by SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func startLocked(cmd *exec.Cmd) error { return cmd.Start() }

// waitStopped waits until the kernel reports pid stopped (state T in
// /proc/pid/stat): a signal is delivered asynchronously, and a caller of
// Signal(SIGSTOP) expects the process paused when it returns.
func waitStopped(pid int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: pid %d not stopped 5s after SIGSTOP", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
