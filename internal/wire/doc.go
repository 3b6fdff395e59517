// Package wire holds the framing shared by the broker, the client and the
// replicator: the stored entry format (a magic/version header, the
// length-prefixed EntryMetadata and the batch payload), batch compression
// with zstd and s2 (decompression refused above the reader's message size
// limit, and a zstd frame never held beyond its declared size), and the
// "ledger:entry:batch" text form of message IDs.
//
// It does no I/O and keeps no state beyond pooled codecs.
package wire
