package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// childPorts hands out loopback ports for child processes, which bind
// them long after the pick. A port picked by listening on :0 comes from
// the kernel's ephemeral range, and once released it can be taken by any
// outbound connection before the child binds it ("address already in use"
// in TestDeploySmoke). These come from below the ephemeral range, where
// neither outbound connections nor :0 listeners go, and each is handed
// out once per test process.
var childPorts = &portPool{used: map[int]bool{}}

type portPool struct {
	mu   sync.Mutex
	used map[int]bool
	lo   int // first port of the ephemeral range (0: not read yet)
}

// pick returns a free 127.0.0.1 host:port below the ephemeral range,
// falling back to the kernel's pick when that range starts too low.
func (pp *portPool) pick(t *testing.T) string {
	t.Helper()
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.lo == 0 {
		pp.lo = ephemeralLow()
	}
	const base = 10000
	if span := pp.lo - base; span >= 1000 {
		for range 200 {
			port := base + rand.IntN(span)
			if pp.used[port] {
				continue
			}
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				continue
			}
			_ = l.Close()
			pp.used[port] = true
			return l.Addr().String()
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// ephemeralLow reads the first port of Linux's ephemeral range (32768
// when it cannot).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}
