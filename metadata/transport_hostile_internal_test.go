package metadata

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"runtime"
	"testing"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

func testFrame(typ byte, payload []byte) []byte {
	var h [raftFrameHeader]byte
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:5], uint32(len(payload)))
	binary.BigEndian.PutUint32(h[5:9], crc32.Checksum(payload, raftCRC))
	return append(h[:], payload...)
}

// TestRaftFrameAllocatesWhatArrives: a header announcing the largest
// frame, followed by a few bytes, costs about raftReadStep, not the
// announced size (before: 256 MiB at once from a 9-byte header).
func TestRaftFrameAllocatesWhatArrives(t *testing.T) {
	h := testFrame(raftFrameBatch, nil)
	binary.BigEndian.PutUint32(h[1:5], raftMaxFrame)
	in := append(h, []byte("only a few bytes")...)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const runs = 4
	for range runs {
		if _, _, err := readRaftFrame(bytes.NewReader(in), nil); err == nil {
			t.Fatal("a truncated frame was accepted")
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 4*raftReadStep {
		t.Fatalf("a 25-byte input allocated %d bytes per read (limit %d)", per, 4*raftReadStep)
	}

	// A real frame larger than one step still reads whole.
	big := bytes.Repeat([]byte{7}, 3*raftReadStep+17)
	typ, got, err := readRaftFrame(bytes.NewReader(testFrame(raftFrameChunk, big)), nil)
	if err != nil || typ != raftFrameChunk || !bytes.Equal(got, big) {
		t.Fatalf("frame of %d bytes: type %d, %d bytes, %v", len(big), typ, len(got), err)
	}
}

// TestDecodeRaftBatchRefuses names what it refuses and passes a good
// batch with its SourceAddress cleared.
func TestDecodeRaftBatchRefuses(t *testing.T) {
	good := pb.Message{Type: pb.Heartbeat, ShardID: 1, From: 2, To: 1}
	for name, m := range map[string]pb.Message{
		"to 0":       {Type: pb.Heartbeat, ShardID: 1, From: 2},
		"from 0":     {Type: pb.Heartbeat, ShardID: 1, To: 1},
		"shard_id 0": {Type: pb.Heartbeat, From: 2, To: 1},
		"type 99":    {Type: 99, ShardID: 1, From: 2, To: 1},
		"type 16":    {Type: pb.InstallSnapshot, ShardID: 1, From: 2, To: 1},
	} {
		b, _ := (&pb.MessageBatch{Requests: []pb.Message{good, m}}).Marshal()
		if _, err := decodeRaftBatch(b); err == nil {
			t.Errorf("%s: accepted", name)
		} else if want := "request 1: " + name; !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("%s: error %q does not say %q", name, err, want)
		}
	}
	b, _ := (&pb.MessageBatch{SourceAddress: "10.0.0.9:1", Requests: []pb.Message{good}}).Marshal()
	got, err := decodeRaftBatch(b)
	if err != nil || got.SourceAddress != "" || len(got.Requests) != 1 {
		t.Fatalf("good batch: %+v, %v", got, err)
	}
}

// FuzzRaftFrame feeds arbitrary bytes to the receiving side of the Raft
// transport: frame reading, then batch or chunk decoding and validation.
// Nothing may panic, no frame may claim more bytes than arrived, and
// whatever passes validation holds no zero ID and re-encodes to a batch
// that validates again.
func FuzzRaftFrame(f *testing.F) {
	hb, _ := (&pb.MessageBatch{Requests: []pb.Message{{Type: pb.Heartbeat, ShardID: 1, From: 2, To: 1}}}).Marshal()
	zero, _ := (&pb.MessageBatch{Requests: []pb.Message{{Type: pb.Heartbeat, ShardID: 1, From: 2}}}).Marshal()
	ch, _ := (&pb.Chunk{ShardID: 1, ReplicaID: 1, From: 2, ChunkCount: 1, Data: []byte("x")}).Marshal()
	f.Add(testFrame(raftFrameBatch, hb))
	f.Add(testFrame(raftFrameBatch, zero))
	f.Add(testFrame(raftFrameChunk, ch))
	f.Add(testFrame(raftFrameEnd, nil))
	f.Add([]byte{0xAE, 0x7D, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			typ, payload, err := readRaftFrame(r, nil)
			if err != nil {
				return
			}
			if len(payload) > len(data) {
				t.Fatalf("frame of %d bytes from %d bytes of input", len(payload), len(data))
			}
			switch typ {
			case raftFrameBatch:
				b, err := decodeRaftBatch(payload)
				if err != nil {
					continue
				}
				for _, m := range b.Requests {
					if m.To == 0 || m.From == 0 || m.ShardID == 0 || !raftNetworkTypes[m.Type] {
						t.Fatalf("validated batch holds %+v", m)
					}
				}
				again, err := b.Marshal()
				if err != nil {
					t.Fatalf("re-encode: %v", err)
				}
				if _, err := decodeRaftBatch(again); err != nil {
					t.Fatalf("re-encoded batch refused: %v", err)
				}
			case raftFrameChunk:
				c, err := decodeRaftChunk(payload)
				if err != nil {
					continue
				}
				if c.ShardID == 0 || c.ReplicaID == 0 || c.From == 0 || c.ChunkId >= c.ChunkCount {
					t.Fatalf("validated chunk holds %+v", c)
				}
			}
		}
	})
}
