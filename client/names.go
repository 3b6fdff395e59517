package client

import (
	"fmt"
	"strings"
)

// maxNameLen bounds each name the client sends (topic parts, subscription,
// producer and consumer names); the broker applies its own, authoritative
// rules.
const maxNameLen = 256

// ValidateTopicName checks the shape "tenant/namespace/topic" (at least
// three non-empty parts without whitespace, each at most 256 bytes; the
// topic may have several /-separated segments). The broker
// applies the full character rules and answers ErrInvalidName.
func ValidateTopicName(topic string) error {
	if topic == "" {
		return fmt.Errorf("%w: topic is required (tenant/namespace/topic)", ErrInvalidName)
	}
	parts := strings.Split(topic, "/")
	if len(parts) < 3 {
		return fmt.Errorf("%w: topic %q must have the form tenant/namespace/topic (the topic may have /-separated segments)", ErrInvalidName, topic)
	}
	for _, p := range parts {
		if p == "" {
			return fmt.Errorf("%w: topic %q has an empty part (want tenant/namespace/topic)", ErrInvalidName, topic)
		}
		if len(p) > maxNameLen {
			return fmt.Errorf("%w: topic %q: a part is %d bytes, limit %d", ErrInvalidName, topic, len(p), maxNameLen)
		}
		if strings.ContainsAny(p, " \t\r\n") {
			return fmt.Errorf("%w: topic %q contains whitespace", ErrInvalidName, topic)
		}
	}
	return nil
}
