package wire

import "hash/fnv"

// KeySlots is the size of the key hash space that Key_Shared subscriptions
// split among consumers: slots 0..KeySlots-1.
const KeySlots = 65536

// KeyHash is the stable 32-bit hash of a message key (FNV-1a). It is part
// of the protocol: Key_Shared dispatch and partition routing use it in
// every region and every client, so it never changes.
func KeyHash(key string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return h.Sum32()
}

// KeySlot is the Key_Shared slot of a key, 0..KeySlots-1.
func KeySlot(key string) int32 { return int32(KeyHash(key) % KeySlots) }

// KeyPartition is the partition of a key in a topic of n partitions (n > 0).
func KeyPartition(key string, n int) int { return int(KeyHash(key) % uint32(n)) }
