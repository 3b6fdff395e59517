package main

import (
	"time"

	"github.com/meridianmq/meridian/internal/faultfs"
)

// powerLossGrace is how long a bookie lives on after a "powerloss" fault
// command, so that /debug/faults can answer; its file layer fails every
// operation meanwhile, so nothing more reaches the disk.
const powerLossGrace = 200 * time.Millisecond

// newChaosFaultFS is the file layer of a bookie run with fault_injection:
// a power loss kills the process shortly after the files are cut, as a
// real one would (no graceful shutdown step runs).
func newChaosFaultFS() *faultfs.FaultFS {
	ffs := faultfs.New(nil)
	ffs.SetPowerLossHook(func() {
		go func() {
			time.Sleep(powerLossGrace)
			faultfs.KillSelf()
		}()
	})
	return ffs
}
