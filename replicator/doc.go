// Package replicator streams locally produced entries of a topic to each
// remote region, one durable cursor per remote, and applies entries from
// other regions idempotently by origin position. (Not built yet.)
package replicator
