//go:build unix

package metadata_test

import (
	"fmt"
	"syscall"
	"testing"
)

// deadAddr returns a loopback address that refuses connections for the rest
// of the test: its port stays bound but never listens, so no other process
// can take it. metadatatest.FreeAddr's port is free again at once, and under
// load another process's HTTP server once took it mid-test.
func deadAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatalf("dead address: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	// No SO_REUSEADDR: a listener that sets it still cannot bind this port.
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("dead address: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("dead address: getsockname: %v", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
