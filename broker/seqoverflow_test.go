package broker_test

import (
	"math"
	"strings"
	"testing"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/meridianmq/meridian/region/regiontest"
)

// A send whose sequence_id + num_messages overflows int64 is refused with
// INVALID_ARGUMENT naming both fields, and it leaves no dedup mark behind:
// the same producer's real stream, from sequence 0, is stored, not answered
// "duplicate".
func TestSendSequenceOverflowRefused(t *testing.T) {
	rc := regiontest.Start(t, regiontest.Options{Brokers: 1, Bookies: 1})
	topic := "public/default/seq-overflow"
	cli := ownerClient(t, rc, 0, topic, "")
	p, _ := openProducer(t, cli, topic, "overflow")
	for _, c := range []struct {
		seq int64
		num int32
	}{{math.MaxInt64, 3}, {math.MaxInt64 - 1, 2}, {math.MaxInt64, 1}} {
		req := sendRequest(c.seq, []byte("forged"))
		req.GetSend().NumMessages = c.num
		if err := p.st.Send(req); err != nil {
			t.Fatal(err)
		}
		r, err := p.st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		e := r.GetReceipt().GetError()
		if e.GetCode() != clientv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT ||
			!strings.Contains(e.GetMessage(), "sequence_id") || !strings.Contains(e.GetMessage(), "num_messages") {
			t.Fatalf("sequence_id %d num_messages %d: receipt %v, want INVALID_ARGUMENT naming sequence_id and num_messages", c.seq, c.num, r.GetReceipt())
		}
	}
	for seq := range int64(3) {
		r := p.send(seq, []byte("real"))
		if r.GetError() != nil || r.GetDuplicate() || r.GetMessageId() == nil {
			t.Fatalf("real send %d after the refused overflow: %v", seq, r)
		}
	}
}
