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
