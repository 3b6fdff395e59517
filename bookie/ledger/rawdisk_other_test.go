//go:build !linux

package ledger_test

import "os"

func fdatasync(f *os.File) error { return f.Sync() }
