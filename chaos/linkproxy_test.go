package chaos

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return lis.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, deadline time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	_ = c.SetDeadline(time.Now().Add(deadline))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		t.Fatalf("echo = %q", line)
	}
	return time.Since(start), nil
}

func TestProxyLatencyCutHeal(t *testing.T) {
	n := NewNetwork(nil)
	t.Cleanup(n.Close)
	p, err := n.Proxy("a", "b", "127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.SetLatency("a", "b", 30*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	rtt, err := roundTrip(t, c, r, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Two one-way delays of 30 ms: the round trip can be no shorter.
	if rtt < 60*time.Millisecond {
		t.Fatalf("round trip %v with 30 ms each way", rtt)
	}

	// A one-way cut stalls the request; the heal delivers it (not lost).
	n.Cut("a", "b", true)
	if !n.IsCut("a", "b") || n.IsCut("b", "a") {
		t.Fatal("oneway cut marks the wrong directions")
	}
	if _, err := roundTrip(t, c, r, 300*time.Millisecond); err == nil {
		t.Fatal("round trip through a cut link succeeded")
	}
	n.Heal("a", "b")
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil || line != "ping\n" {
		t.Fatalf("stalled bytes after heal: %q, %v", line, err)
	}

	// A connection opened during a cut reaches the target only after heal.
	n.Cut("a", "b", false)
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if _, err := roundTrip(t, c2, r2, 300*time.Millisecond); err == nil {
		t.Fatal("new connection through a cut link got an answer")
	}
	n.Heal("a", "b")
	_ = c2.SetDeadline(time.Now().Add(5 * time.Second))
	if line, err := r2.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("after heal: %q, %v", line, err)
	}
}

func TestNegativeLatencyRefused(t *testing.T) {
	n := NewNetwork(nil)
	if err := n.SetLatency("a", "b", -time.Millisecond, 0); err == nil {
		t.Fatal("negative latency accepted")
	}
}
