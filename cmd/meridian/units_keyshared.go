package main

// A copy of part backlog's parseDurationFlag (cmd/meridian/units.go on
// branch backlog) so that this branch builds alone; the integrator keeps
// one (delete this file when merging).

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// parseDurationFlag parses the value v of the flag named flag (for the
// error message, e.g. "--ttl").
func parseDurationFlag(flag, v string) (time.Duration, error) {
	bad := func() error {
		return fmt.Errorf("%s %q: want a duration such as 10s, 30m, 1h, 7d, 2w, 1h30m, a number of seconds, or -1 (unlimited)", flag, v)
	}
	s := strings.TrimSpace(v)
	if s == "" {
		return 0, bad()
	}
	if s == "-1" {
		return -1, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > math.MaxInt64/int64(time.Second) {
			return 0, bad()
		}
		return time.Duration(n) * time.Second, nil
	}
	unit := map[byte]time.Duration{'d': 24 * time.Hour, 'w': 7 * 24 * time.Hour}
	if u, ok := unit[s[len(s)-1]]; ok {
		n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64/int64(u) {
			return 0, bad()
		}
		return time.Duration(n) * u, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, bad()
	}
	return d, nil
}
