//go:build linux

package faultfs

import (
	"os"
	"syscall"
)

// fdatasync flushes file data (and the metadata needed to read it back,
// such as its size) without forcing unrelated metadata such as mtime.
func fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}
