package check

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// Writer appends records to a history.jsonl stream, one JSON object per
// line. It is safe for concurrent use; records keep the order of Write
// calls.
type Writer struct {
	mu  sync.Mutex
	bw  *bufio.Writer
	enc *json.Encoder
	err error
}

// NewWriter returns a Writer on w. Call Flush before w is closed.
func NewWriter(w io.Writer) *Writer {
	bw := bufio.NewWriterSize(w, 1<<16)
	return &Writer{bw: bw, enc: json.NewEncoder(bw)}
}

// Write appends one record. After the first error every Write returns it.
func (w *Writer) Write(r Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = w.enc.Encode(r)
	}
	return w.err
}

// Flush writes buffered records to the underlying writer.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = w.bw.Flush()
	}
	return w.err
}

// ReadHistory reads a history.jsonl stream. A malformed line is an error
// naming its line number.
func ReadHistory(r io.Reader) (History, error) {
	var h History
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), 16<<20)
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return h, fmt.Errorf("history line %d: %w", line, err)
		}
		h.Records = append(h.Records, rec)
	}
	if err := sc.Err(); err != nil {
		return h, fmt.Errorf("history: %w", err)
	}
	return h, nil
}
