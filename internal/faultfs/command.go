package faultfs

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
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
//	slow <op|any> [path-substring|*] <duration> [count]
//	                                           e.g. "slow sync journal 50ms"
//	full on|off                                disk full (ENOSPC, no free space)
//	usage <fraction 0..1>|off                  report this used fraction
//	corrupt <path-substring>                   flip one bit (see Corrupt)
//	truncate <path-substring> <bytes>          cut the tail (see TruncateTail)
//	powerloss                                  lose unsynced bytes (see PowerLoss)
//	clear                                      disarm everything
//
// count 0 or absent means until cleared. It returns the fault id for fail,
// drop and slow (0 otherwise). Exec does the same and answers in text.
func (f *FaultFS) Command(cmd string) (int, error) {
	id, _, err := f.exec(cmd)
	return id, err
}

// Exec applies a Command and answers in one line of text: "id N" for
// fail, drop and slow; "corrupt PATH offset=N bit=B"; "truncate PATH
// size=N"; "powerloss files=N" followed by one line per file that lost
// bytes ("PATH synced=N lost=M"); "ok" otherwise.
func (f *FaultFS) Exec(cmd string) (string, error) {
	_, ans, err := f.exec(cmd)
	return ans, err
}

func (f *FaultFS) exec(cmd string) (int, string, error) {
	w := strings.Fields(cmd)
	if len(w) == 0 {
		return 0, "", fmt.Errorf("%w: empty", ErrBadCommand)
	}
	switch w[0] {
	case "slow":
		if len(w) < 3 || len(w) > 5 {
			return 0, "", fmt.Errorf("%w: usage: slow <op> [path] <duration> [count]", ErrBadCommand)
		}
		op := Op(w[1])
		if !knownOps[op] {
			return 0, "", fmt.Errorf("%w: unknown op %q", ErrBadCommand, w[1])
		}
		if op == "any" {
			op = ""
		}
		rest := w[2:]
		ft := Fault{Op: op}
		if _, err := time.ParseDuration(rest[0]); err != nil {
			// The first word is the path.
			if rest[0] != "*" {
				ft.PathContains = rest[0]
			}
			rest = rest[1:]
		}
		if len(rest) == 0 || len(rest) > 2 {
			return 0, "", fmt.Errorf("%w: usage: slow <op> [path] <duration> [count]", ErrBadCommand)
		}
		d, err := time.ParseDuration(rest[0])
		if err != nil || d <= 0 || d > time.Minute {
			return 0, "", fmt.Errorf("%w: duration must be in (0, 1m], got %q", ErrBadCommand, rest[0])
		}
		ft.Delay = d
		if len(rest) == 2 {
			n, err := strconv.Atoi(rest[1])
			if err != nil || n < 0 {
				return 0, "", fmt.Errorf("%w: count must be a non-negative integer, got %q", ErrBadCommand, rest[1])
			}
			ft.Count = n
		}
		id := f.Inject(ft)
		return id, fmt.Sprintf("id %d", id), nil
	case "corrupt":
		if len(w) != 2 {
			return 0, "", fmt.Errorf("%w: usage: corrupt <path-substring>", ErrBadCommand)
		}
		path, off, bit, err := f.Corrupt(w[1])
		if err != nil {
			return 0, "", err
		}
		return 0, fmt.Sprintf("corrupt %s offset=%d bit=%d", path, off, bit), nil
	case "truncate":
		if len(w) != 3 {
			return 0, "", fmt.Errorf("%w: usage: truncate <path-substring> <bytes>", ErrBadCommand)
		}
		n, err := strconv.ParseInt(w[2], 10, 64)
		if err != nil || n <= 0 {
			return 0, "", fmt.Errorf("%w: bytes must be a positive integer, got %q", ErrBadCommand, w[2])
		}
		path, size, err := f.TruncateTail(w[1], n)
		if err != nil {
			return 0, "", err
		}
		return 0, fmt.Sprintf("truncate %s size=%d", path, size), nil
	case "powerloss":
		if len(w) != 1 {
			return 0, "", fmt.Errorf("%w: usage: powerloss", ErrBadCommand)
		}
		lines, err := f.PowerLoss()
		ans := strings.Join(append([]string{fmt.Sprintf("powerloss files=%d", len(lines))}, lines...), "\n")
		return 0, ans, err
	case "fail", "drop":
		if len(w) < 2 || len(w) > 4 {
			return 0, "", fmt.Errorf("%w: usage: %s <op> [path] [count]", ErrBadCommand, w[0])
		}
		op := Op(w[1])
		if !knownOps[op] {
			return 0, "", fmt.Errorf("%w: unknown op %q", ErrBadCommand, w[1])
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
				return 0, "", fmt.Errorf("%w: count must be a non-negative integer, got %q", ErrBadCommand, w[3])
			}
			ft.Count = n
		}
		id := f.Inject(ft)
		return id, fmt.Sprintf("id %d", id), nil
	case "full":
		if len(w) != 2 || (w[1] != "on" && w[1] != "off") {
			return 0, "", fmt.Errorf("%w: usage: full on|off", ErrBadCommand)
		}
		f.SetDiskFull(w[1] == "on")
		return 0, "ok", nil
	case "usage":
		if len(w) != 2 {
			return 0, "", fmt.Errorf("%w: usage: usage <fraction>|off", ErrBadCommand)
		}
		if w[1] == "off" {
			f.SetUsage(nil)
			return 0, "ok", nil
		}
		fr, err := strconv.ParseFloat(w[1], 64)
		if err != nil || fr < 0 || fr > 1 {
			return 0, "", fmt.Errorf("%w: fraction must be in [0, 1], got %q", ErrBadCommand, w[1])
		}
		const total = 1 << 40
		f.SetUsage(&Usage{Total: total, Free: uint64((1 - fr) * total)})
		return 0, "ok", nil
	case "clear":
		f.ClearAll()
		return 0, "ok", nil
	}
	return 0, "", fmt.Errorf("%w: unknown verb %q", ErrBadCommand, w[0])
}
