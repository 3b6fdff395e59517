package broker

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCursorRecordRoundTrip(t *testing.T) {
	acked := map[pos]struct{}{{5, 3}: {}, {5, 4}: {}, {5, 5}: {}, {5, 9}: {}, {7, 0}: {}, {7, 1}: {}}
	b := encodeCursor(pos{5, 1}, acked, 42, 100)
	md, got, created, err := decodeCursor(b, 100)
	if err != nil || md != (pos{5, 1}) || created != 42 || !reflect.DeepEqual(got, acked) {
		t.Fatalf("round trip: md=%v acked=%v created=%d err=%v", md, got, created, err)
	}
	want := [][3]int64{{5, 3, 5}, {5, 9, 9}, {7, 0, 1}}
	if r := ackRanges(acked, 100); !reflect.DeepEqual(r, want) {
		t.Fatalf("ranges %v, want %v", r, want)
	}
	// The cap keeps the earliest positions: later ones are redelivered
	// after a restart, never lost.
	if r := ackRanges(acked, 2); !reflect.DeepEqual(r, [][3]int64{{5, 3, 4}}) {
		t.Fatalf("capped ranges %v", r)
	}
	if _, _, _, err := decodeCursor([]byte("{"), 100); err == nil {
		t.Fatal("corrupt cursor accepted")
	}
}

func TestNames(t *testing.T) {
	for _, ok := range []string{"public/default/t", "a-b/c_d/e.f-1", strings.Repeat("x", 128) + "/n/t",
		"a/b/c/d", "t/ns/video/uploaded/v1", "t/ns/" + strings.Repeat("s/", 7) + "s"} {
		if _, err := ParseTopic(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []struct{ in, want string }{
		{"", "tenant/namespace/topic"},
		{"a/b", "tenant/namespace/topic"},
		{"a/b/c//d", "topic segment 2 is empty"},
		{"a/b/c/", "topic segment 2 is empty"},
		{"a/b/" + strings.Repeat("s/", 8) + "s", "9 segments below the namespace, limit 8"},
		{"a/b/" + strings.Repeat("x", 128) + "/" + strings.Repeat("y", 128), "257 bytes below the namespace, limit 255"},
		{"a//c", "namespace is empty"},
		{"a/b/c d", "character ' '"},
		{"a/b/ü", "allowed"},
		{"a/../c", "reserved"},
		{strings.Repeat("x", 129) + "/n/t", "limit 128"},
	} {
		_, err := ParseTopic(bad.in)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.in, err, bad.want)
		}
	}
	if _, _, err := ParseNamespace("t/n/x"); err == nil {
		t.Error("3-part namespace accepted")
	}
}

func TestErrorMapping(t *testing.T) {
	for _, e := range []error{ErrInvalidArgument, ErrNotFound, ErrMessageTooLarge, ErrConsumerBusy, ErrNotAllowed, ErrStorage, ErrUnavailable} {
		back := FromGRPC(GRPCError(e))
		if !errors.Is(back, e) {
			t.Errorf("%v did not survive the gRPC edge: %v", e, back)
		}
	}
	no := FromGRPC(GRPCError(&notOwnedError{owner: "h:1"}))
	var n *notOwnedError
	if !errors.As(no, &n) || n.owner != "h:1" || !errors.Is(no, ErrTopicNotOwned) {
		t.Errorf("redirect lost: %v", no)
	}
}

// TestDecodeCursorBounded: a stored record's ranges cost at most maxAcks
// positions (the old decoder kept up to 2^20 per range, whatever their
// number: a 40-byte record held a million positions), and a range ending
// at math.MaxInt64 does not wrap into negative entries.
func TestDecodeCursorBounded(t *testing.T) {
	_, acked, _, err := decodeCursor([]byte(`{"md":[1,0],"acked":[[2,0,99999999],[3,0,99999999],[4,0,99999999]]}`), 1000)
	if err != nil || len(acked) != 1000 {
		t.Fatalf("wide ranges: %d positions kept, bound 1000 (err %v)", len(acked), err)
	}
	for p := range acked {
		if p.L != 2 || p.E < 0 || p.E >= 1000 {
			t.Fatalf("kept %v: want the first 1000 positions in record order", p)
		}
	}
	_, acked, _, err = decodeCursor([]byte(`{"md":[1,0],"acked":[[2,9223372036854775806,9223372036854775807],[5,3,1]]}`), 1000)
	want := map[pos]struct{}{{2, 9223372036854775806}: {}, {2, 9223372036854775807}: {}}
	if err != nil || !reflect.DeepEqual(acked, want) {
		t.Fatalf("range to MaxInt64: %d positions %v (err %v), want %v", len(acked), acked, err, want)
	}
}
