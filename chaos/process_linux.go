package chaos

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts the child in its own process group and has the kernel
// kill it when the thread that started it dies. Go never ends a thread of
// its pool unless a goroutine locked to it exits, so in practice the child
// dies with this process, even by SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func startLocked(cmd *exec.Cmd) error { return cmd.Start() }
