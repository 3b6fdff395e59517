package bookietest

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
)

// CorruptPayload flips one byte in the middle of every copy of payload
// found in bookie i's journal and ledger directories (payload should be
// unique, e.g. random bytes) and returns how many copies it damaged. It
// stands in for a replica lost to disk damage: the bookie then answers
// reads of that entry as corrupt. Safe while the bookie runs.
func (c *Cluster) CorruptPayload(i int, payload []byte) (int, error) {
	jdir, ldir := c.Dirs(i)
	n := 0
	for _, dir := range []string{jdir, ldir} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var offs []int
			for off := 0; ; {
				j := bytes.Index(data[off:], payload)
				if j < 0 {
					break
				}
				offs = append(offs, off+j+len(payload)/2)
				off += j + len(payload)
			}
			if len(offs) == 0 {
				return nil
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			for _, o := range offs {
				if _, err := f.WriteAt([]byte{data[o] ^ 0x5a}, int64(o)); err != nil {
					return err
				}
				n++
			}
			return f.Sync()
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
