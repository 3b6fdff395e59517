package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/meridianmq/meridian/client"
)

// retainsNothingNote explains what a topic with no subscription and a
// retention of 0 does with its messages, and how to keep them.
func retainsNothingNote(topic string) string {
	return fmt.Sprintf("topic %s has no subscription and its namespace retains nothing (retention 0): "+
		"its messages are deleted once their ledger closes, and a later subscription from earliest finds nothing; "+
		"create a subscription first or set a retention with `meridian admin namespaces set-policies`", topic)
}

// warnIfRetainsNothing prints one warning on w when topic retains nothing
// (see TopicStats.retains_nothing). Best effort: a failed stats call is
// not the user's problem and prints nothing.
func warnIfRetainsNothing(ctx context.Context, c *client.Client, topic string, w io.Writer) {
	a, err := c.Admin()
	if err != nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := a.TopicStats(sctx, topic)
	if err != nil || !st.GetRetainsNothing() {
		return
	}
	fmt.Fprintln(w, "warning: "+retainsNothingNote(topic))
}
