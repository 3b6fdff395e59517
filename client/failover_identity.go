package client

import (
	"crypto/rand"
	"encoding/hex"
)

// newFailoverIdentity returns a producer instance's failover identity
// (OpenProducer.failover_identity) for a multi-region client, "" for a
// single-region one. It is random, so it names this Producer only: its
// sequence IDs only grow and are never reused under it, which lets every
// region store one copy of each of its messages, whichever region stored
// it first (a resend in the region failed over to and the stalled original
// replicated from the region left). A new Producer of the same name gets a
// new identity: a restarted application may start its sequence IDs again.
func (c *Client) newFailoverIdentity() string {
	if !c.multiRegion() {
		return ""
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "p-" + hex.EncodeToString(b[:])
}
