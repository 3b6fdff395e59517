package broker

import (
	"fmt"
	"slices"
	"strings"
)

// Name limits. Names become metadata keys and metric labels, so they are
// short and drawn from a small alphabet.
const (
	// MaxNameBytes caps each of tenant, namespace, topic and subscription.
	MaxNameBytes = 128
)

// TopicName is a validated "tenant/namespace/topic".
type TopicName struct {
	Tenant, Namespace, Topic string
}

// String returns "tenant/namespace/topic".
func (t TopicName) String() string { return t.Tenant + "/" + t.Namespace + "/" + t.Topic }

// NamespaceName returns "tenant/namespace".
func (t TopicName) NamespaceName() string { return t.Tenant + "/" + t.Namespace }

// ValidateName checks one name segment: 1..MaxNameBytes characters from
// [a-zA-Z0-9_.-], not "." or "..". field names the input in the error.
func ValidateName(field, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidArgument, field)
	}
	if len(s) > MaxNameBytes {
		return fmt.Errorf("%w: %s %q is %d bytes, limit %d", ErrInvalidArgument, field, s[:16]+"...", len(s), MaxNameBytes)
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%w: %s %q is reserved", ErrInvalidArgument, field, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %s %q has character %q at %d; allowed: [a-zA-Z0-9_.-]", ErrInvalidArgument, field, s, c, i)
		}
	}
	return nil
}

// Hierarchical topic names: the topic part may have '/'-separated
// segments below the namespace ("tenant/ns/video/uploaded/v1"), each a
// valid name.
const (
	// MaxTopicSegments caps the segments of the topic part.
	MaxTopicSegments = 8
	// MaxTopicBytes caps the whole topic part (segments and slashes).
	MaxTopicBytes = 255
)

// ParseTopic validates "tenant/namespace/topic", where topic may have up
// to MaxTopicSegments '/'-separated segments (MaxTopicBytes in all).
func ParseTopic(s string) (TopicName, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 3 {
		return TopicName{}, fmt.Errorf("%w: topic %q must be tenant/namespace/topic", ErrInvalidArgument, s)
	}
	t := TopicName{parts[0], parts[1], strings.Join(parts[2:], "/")}
	if err := ValidateName("tenant", t.Tenant); err != nil {
		return TopicName{}, err
	}
	if err := ValidateName("namespace", t.Namespace); err != nil {
		return TopicName{}, err
	}
	if err := validateTopicPart("topic", t.Topic, false); err != nil {
		return TopicName{}, err
	}
	return t, nil
}

// validateTopicPart checks the part of a topic name (or, with prefix, of a
// prefix without its trailing '/') below the namespace.
func validateTopicPart(field, s string, prefix bool) error {
	if len(s) > MaxTopicBytes {
		return fmt.Errorf("%w: %s %q is %d bytes below the namespace, limit %d", ErrInvalidArgument, field, s[:16]+"...", len(s), MaxTopicBytes)
	}
	segs := strings.Split(s, "/")
	limit := MaxTopicSegments
	if prefix {
		limit-- // a prefix needs room for at least one more segment
	}
	if len(segs) > limit {
		return fmt.Errorf("%w: %s %q has %d segments below the namespace, limit %d", ErrInvalidArgument, field, s, len(segs), limit)
	}
	for i, seg := range segs {
		f := field
		if len(segs) > 1 {
			f = fmt.Sprintf("%s segment %d", field, i+1)
		}
		if err := ValidateName(f, seg); err != nil {
			return err
		}
	}
	return nil
}

// ParsePrefix validates a topic-name prefix "tenant/namespace/seg/.../":
// at least one segment below the namespace, ending in '/'. It returns the
// namespace ("tenant/namespace") and the prefix's part below it without
// the trailing slash ("seg/...").
func ParsePrefix(s string) (ns, rel string, err error) {
	body, ok := strings.CutSuffix(s, "/")
	parts := strings.Split(body, "/")
	if !ok || len(parts) < 3 {
		return "", "", fmt.Errorf("%w: prefix %q must be tenant/namespace/segment/ (at least one segment below the namespace, ending in '/')", ErrInvalidArgument, s)
	}
	if err := ValidateName("tenant", parts[0]); err != nil {
		return "", "", err
	}
	if err := ValidateName("namespace", parts[1]); err != nil {
		return "", "", err
	}
	rel = strings.Join(parts[2:], "/")
	if err := validateTopicPart("prefix", rel, true); err != nil {
		return "", "", err
	}
	return parts[0] + "/" + parts[1], rel, nil
}

// ParseNamespace validates "tenant/namespace" and returns its parts.
func ParseNamespace(s string) (tenant, namespace string, err error) {
	parts := strings.Split(s, "/")
	if len(parts) != 2 {
		return "", "", fmt.Errorf("%w: namespace %q must be tenant/namespace", ErrInvalidArgument, s)
	}
	if err := ValidateName("tenant", parts[0]); err != nil {
		return "", "", err
	}
	if err := ValidateName("namespace", parts[1]); err != nil {
		return "", "", err
	}
	return parts[0], parts[1], nil
}

// validateList checks a list argument named field: at most limit elements
// (what names them in the error: "roles", "regions"), each passing check
// under the name field[i], none twice.
func validateList(field, what string, list []string, limit int, check func(field, v string) error) error {
	if len(list) > limit {
		return fmt.Errorf("%w: %s has %d %s, limit %d", ErrInvalidArgument, field, len(list), what, limit)
	}
	for i, v := range list {
		if err := check(fmt.Sprintf("%s[%d]", field, i), v); err != nil {
			return err
		}
		if slices.Contains(list[:i], v) {
			return fmt.Errorf("%w: %s names %q twice", ErrInvalidArgument, field, v)
		}
	}
	return nil
}
