package main

import (
	"bytes"
	"testing"

	"github.com/meridianmq/meridian/client"
)

// TestProduceJSONDuplicate: a duplicate's JSON line carries the ID it was
// first stored under and "duplicate":true; when the broker no longer knows
// the ID, the line still says "duplicate":true; a normal line has no
// duplicate field.
func TestProduceJSONDuplicate(t *testing.T) {
	cases := []struct {
		id   client.MessageID
		dup  bool
		want string
	}{
		{client.MessageID{LedgerID: 7, EntryID: 3, BatchIndex: 1}, false, `{"id":"7:3:1","seq":4,"key":"k","producer":"p","ack_time":"t","origin_region":"r","origin_id":"7:3:1"}`},
		{client.MessageID{LedgerID: 7, EntryID: 3, BatchIndex: 1}, true, `{"id":"7:3:1","seq":4,"key":"k","producer":"p","ack_time":"t","duplicate":true,"origin_region":"r","origin_id":"7:3:1"}`},
		{client.UnknownMessageID, true, `{"id":"-1:-1:-1","seq":4,"key":"k","producer":"p","ack_time":"t","duplicate":true,"origin_region":"r","origin_id":"-1:-1:-1"}`},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		out := &lineWriter{w: &buf}
		m := &client.Message{Key: "k", SequenceID: 4, Duplicate: c.dup}
		out.json(produceRecord{ID: c.id.String(), Seq: m.SequenceID, Key: m.Key, Producer: "p", AckTime: "t", Duplicate: m.Duplicate,
			OriginRegion: "r", OriginID: c.id.String()})
		if got := buf.String(); got != c.want+"\n" {
			t.Errorf("line %q, want %q", got, c.want)
		}
	}
}
