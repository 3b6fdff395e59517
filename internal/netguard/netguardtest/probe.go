// Package netguardtest probes a running server's listener limits from
// outside, over raw TCP, the way a hostile peer would: the per-IP
// connection limit, slow request bodies, idle keep-alive connections and
// the HTTP/2 settings a gRPC server announces. Every wait polls until a
// generous deadline; nothing asserts a wall-clock bound.
package netguardtest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"
)

// HTTPProbe is what a probe sends to an HTTP listener: a request that
// any Meridian HTTP server answers without credentials.
var HTTPProbe = []byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")

// wait is how long a probe waits for a server's answer or its close.
const wait = 10 * time.Second

// Hold dials addr, writes send (nil for gRPC: its server speaks first)
// and waits for the first byte of the server's answer: proof that the
// connection was accepted. The connection stays open until cleanup.
func Hold(t testing.TB, addr string, send []byte) net.Conn {
	t.Helper()
	c, refused := probe(t, addr, send)
	if refused {
		t.Fatalf("netguardtest: connection to %s refused; want accepted", addr)
	}
	return c
}

// probe dials addr, writes send and reads one byte: refused when the
// server closes the connection before sending anything.
func probe(t testing.TB, addr string, send []byte) (net.Conn, bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatalf("netguardtest: dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if len(send) > 0 {
		if _, err := c.Write(send); err != nil {
			return c, true // reset before the write: refused
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var b [1]byte
	_, err = io.ReadFull(c, b[:])
	_ = c.SetReadDeadline(time.Time{})
	switch {
	case err == nil:
		return c, false
	case closed(err):
		return c, true
	default:
		t.Fatalf("netguardtest: %s neither answered nor closed within %v: %v", addr, wait, err)
		return c, false
	}
}

// closed reports whether err means the peer closed the connection.
func closed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// CheckPerIPLimit checks that addr, limited to n connections per remote
// IP, accepts n connections from this host, refuses the next one, and
// accepts again once one of the n is closed. send is what an accepted
// connection answers to (HTTPProbe, or nil for gRPC). The listener must
// hold no other connection from 127.0.0.1 during the check.
func CheckPerIPLimit(t testing.TB, addr string, n int, send []byte) {
	t.Helper()
	held := make([]net.Conn, n)
	for i := range held {
		held[i] = holdRetry(t, addr, send)
	}
	if _, refused := probe(t, addr, send); !refused {
		t.Fatalf("netguardtest: connection %d to %s accepted; the limit is %d per IP", n+1, addr, n)
	}
	_ = held[0].Close()
	_ = holdRetry(t, addr, send).Close()
}

// holdRetry is Hold, retrying while the server refuses: a connection
// the caller closed just before may not be released yet on the server.
func holdRetry(t testing.TB, addr string, send []byte) net.Conn {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		c, refused := probe(t, addr, send)
		if !refused {
			return c
		}
		_ = c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("netguardtest: %s refuses every connection for %v; want one accepted", addr, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// CheckSlowBodyCut sends a request's headers announcing a 1 MiB body,
// then one byte of it, and holds: the server must close the connection
// (after its read timeout) within the probe's deadline.
func CheckSlowBodyCut(t testing.TB, addr, path string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, c, "a request whose body never arrives")
}

// CheckIdleCut makes one keep-alive request and then stays idle: the
// server must close the connection (after its idle timeout) within the
// probe's deadline.
func CheckIdleCut(t testing.TB, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(HTTPProbe); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("netguardtest: %s: %v", addr, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		t.Fatalf("netguardtest: %s closed the connection after one request; want keep-alive", addr)
	}
	waitClosed(t, readerConn{c, br}, "an idle keep-alive connection")
}

type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// waitClosed reads (and drops) whatever c sends until the server closes
// it; it fails when c is still open at the deadline.
func waitClosed(t testing.TB, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, c)
	if err == nil || closed(err) {
		return
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("netguardtest: the server held %s open for %v", what, wait)
	}
	t.Fatalf("netguardtest: waiting for the server to close %s: %v", what, err)
}

// HTTP/2 settings a gRPC server announces (RFC 9113 §6.5.2).
const (
	SettingMaxConcurrentStreams = 0x3
	SettingInitialWindowSize    = 0x4
	SettingMaxHeaderListSize    = 0x6
)

// GRPCSettings connects to a plaintext gRPC server at addr and returns
// the settings of its first SETTINGS frame (id → value).
func GRPCSettings(t testing.TB, addr string) map[uint16]uint32 {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Client preface, then an empty SETTINGS frame.
	pre := append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 0x4, 0, 0, 0, 0, 0)
	if _, err := c.Write(pre); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	for {
		var h [9]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			t.Fatalf("netguardtest: %s: read frame header: %v", addr, err)
		}
		n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		if n > 1<<16 {
			t.Fatalf("netguardtest: %s: frame of %d bytes", addr, n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(c, body); err != nil {
			t.Fatalf("netguardtest: %s: read frame: %v", addr, err)
		}
		if h[3] != 0x4 || h[4]&0x1 != 0 { // not SETTINGS, or an ACK
			continue
		}
		out := map[uint16]uint32{}
		for i := 0; i+6 <= len(body); i += 6 {
			out[binary.BigEndian.Uint16(body[i:])] = binary.BigEndian.Uint32(body[i+2:])
		}
		return out
	}
}
