//go:build unix && !linux

package chaos

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts the child in its own process group. Without Pdeathsig
// (Linux only) a child outlives a parent killed with SIGKILL.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func startLocked(cmd *exec.Cmd) error { return cmd.Start() }

// waitStopped is a no-op without /proc: SIGSTOP takes effect shortly
// after Signal returns.
func waitStopped(int) error { return nil }
