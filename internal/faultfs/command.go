package faultfs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadCommand is returned (wrapped, with the reason) by Command.
var ErrBadCommand = errors.New("faultfs: bad command")

var knownOps = map[Op]bool{OpCreate: true, OpOpen: true, OpWrite: true, OpSync: true, OpRead: true,
	OpTruncate: true, OpRename: true, OpRemove: true, OpMkdir: true, OpReadDir: true, OpStat: true,
	OpSyncDir: true, "any": true}

// Command applies a textual fault command, for chaos tools and admin
// endpoints that cannot call methods:
//
//	fail <op|any> [path-substring|*] [count]   e.g. "fail sync journal"
//	drop <op|any> [path-substring|*] [count]   e.g. "drop rename checkpoint 1"
//	full on|off                                disk full (ENOSPC, no free space)
//	usage <fraction 0..1>|off                  report this used fraction
//	clear                                      disarm everything
//
// count 0 or absent means until cleared. It returns the fault id for fail
// and drop (0 otherwise).
func (f *FaultFS) Command(cmd string) (int, error) {
	w := strings.Fields(cmd)
	if len(w) == 0 {
		return 0, fmt.Errorf("%w: empty", ErrBadCommand)
	}
	switch w[0] {
	case "fail", "drop":
		if len(w) < 2 || len(w) > 4 {
			return 0, fmt.Errorf("%w: usage: %s <op> [path] [count]", ErrBadCommand, w[0])
		}
		op := Op(w[1])
		if !knownOps[op] {
			return 0, fmt.Errorf("%w: unknown op %q", ErrBadCommand, w[1])
		}
		if op == "any" {
			op = ""
		}
		ft := Fault{Op: op, Drop: w[0] == "drop"}
		if len(w) >= 3 && w[2] != "*" {
			ft.PathContains = w[2]
		}
		if len(w) == 4 {
			n, err := strconv.Atoi(w[3])
			if err != nil || n < 0 {
				return 0, fmt.Errorf("%w: count must be a non-negative integer, got %q", ErrBadCommand, w[3])
			}
			ft.Count = n
		}
		return f.Inject(ft), nil
	case "full":
		if len(w) != 2 || (w[1] != "on" && w[1] != "off") {
			return 0, fmt.Errorf("%w: usage: full on|off", ErrBadCommand)
		}
		f.SetDiskFull(w[1] == "on")
		return 0, nil
	case "usage":
		if len(w) != 2 {
			return 0, fmt.Errorf("%w: usage: usage <fraction>|off", ErrBadCommand)
		}
		if w[1] == "off" {
			f.SetUsage(nil)
			return 0, nil
		}
		fr, err := strconv.ParseFloat(w[1], 64)
		if err != nil || fr < 0 || fr > 1 {
			return 0, fmt.Errorf("%w: fraction must be in [0, 1], got %q", ErrBadCommand, w[1])
		}
		const total = 1 << 40
		f.SetUsage(&Usage{Total: total, Free: uint64((1 - fr) * total)})
		return 0, nil
	case "clear":
		f.ClearAll()
		return 0, nil
	}
	return 0, fmt.Errorf("%w: unknown verb %q", ErrBadCommand, w[0])
}
