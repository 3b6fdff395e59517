package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/meridianmq/meridian/internal/schemacompat"
)

// TypedProducer publishes values of T encoded with a Schema. The broker
// checks the schema against the topic's registry when the producer opens
// (and registers it as a new version when it is new and compatible); every
// message carries the schema version.
type TypedProducer[T any] struct {
	p      *Producer
	schema Schema[T]
}

// NewTypedProducer opens a producer with schema on opts.Topic. A schema the
// topic's compatibility mode refuses fails with ErrIncompatibleSchema.
func NewTypedProducer[T any](ctx context.Context, c *Client, opts ProducerOptions, schema Schema[T]) (*TypedProducer[T], error) {
	if schema == nil {
		return nil, fmt.Errorf("%w: schema is nil", ErrInvalidArgument)
	}
	opts.schema = schema.Info()
	p, err := c.NewProducer(ctx, opts)
	if err != nil {
		return nil, schemaRefusal(err)
	}
	return &TypedProducer[T]{p: p, schema: schema}, nil
}

// schemaRefusal marks a broker's schema refusal as ErrIncompatibleSchema,
// and a refused schema definition as ErrInvalidArgument (the client's error
// mapping reads "name" in an invalid-argument text as a bad name, and
// schema errors name fields such as schema.message_name).
func schemaRefusal(err error) error {
	const marker = "schema incompatible: "
	msg := err.Error()
	if errors.Is(err, ErrNotAllowed) && strings.Contains(msg, marker) {
		return fmt.Errorf("%w: %s", ErrIncompatibleSchema, msg[strings.Index(msg, marker)+len(marker):])
	}
	const arg = "invalid argument: schema"
	if errors.Is(err, ErrInvalidName) && strings.Contains(msg, arg) {
		return fmt.Errorf("%w: %s", ErrInvalidArgument, msg[strings.Index(msg, arg)+len("invalid argument: "):])
	}
	return err
}

// Send encodes v and publishes it; m (optional) gives the key, properties
// and the other Message options; its Payload must be empty.
func (tp *TypedProducer[T]) Send(ctx context.Context, v T, m *Message) (MessageID, error) {
	msg, err := tp.message(v, m)
	if err != nil {
		return MessageID{}, err
	}
	return tp.p.Send(ctx, msg)
}

// SendAsync is Send without waiting; cb runs as for Producer.SendAsync.
func (tp *TypedProducer[T]) SendAsync(ctx context.Context, v T, m *Message, cb func(MessageID, *Message, error)) {
	msg, err := tp.message(v, m)
	if err != nil {
		cb(MessageID{}, m, err)
		return
	}
	tp.p.SendAsync(ctx, msg, cb)
}

func (tp *TypedProducer[T]) message(v T, m *Message) (*Message, error) {
	var msg Message
	if m != nil {
		if len(m.Payload) != 0 {
			return nil, fmt.Errorf("%w: Message.Payload must be empty on a typed producer (the value is the payload)", ErrInvalidArgument)
		}
		msg = *m
	}
	data, err := tp.schema.Encode(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode with the %s schema: %v", ErrInvalidArgument, schemacompat.TypeName(tp.schema.Info().GetType()), err)
	}
	msg.Payload = data
	return &msg, nil
}

// SchemaVersion is the registry version of the producer's schema (0 for
// BYTES, which is never registered).
func (tp *TypedProducer[T]) SchemaVersion() int32 { return tp.p.schemaVersion.Load() }

// Producer is the underlying producer (Flush, Stats, Name...).
func (tp *TypedProducer[T]) Producer() *Producer { return tp.p }

// Flush waits until every message sent so far is resolved.
func (tp *TypedProducer[T]) Flush(ctx context.Context) error { return tp.p.Flush(ctx) }

// Close flushes and closes the producer.
func (tp *TypedProducer[T]) Close(ctx context.Context) error { return tp.p.Close(ctx) }

// TypedMessage is a received message and its decoded value.
type TypedMessage[T any] struct {
	*ReceivedMessage
	// Value is the decoded payload (the zero value when decoding failed).
	Value T
}

// TypedConsumer receives values of T. Each message is decoded with the
// consumer's schema after checking the schema version it was written with
// (fetched from the registry once per version): a writer schema of another
// type, or one the consumer's schema cannot read, is ErrSchemaMismatch.
type TypedConsumer[T any] struct {
	co     *Consumer
	schema Schema[T]
	info   *SchemaInfo

	mu       sync.Mutex
	versions map[int32]*SchemaInfo // writer schemas fetched from the registry
}

// SubscribeTyped subscribes with schema. The broker accepts the schema
// when it is registered for the topic or readable under the topic's
// compatibility mode (a consumer never registers a version); otherwise it
// fails with ErrIncompatibleSchema.
func SubscribeTyped[T any](ctx context.Context, c *Client, opts ConsumerOptions, schema Schema[T]) (*TypedConsumer[T], error) {
	if schema == nil {
		return nil, fmt.Errorf("%w: schema is nil", ErrInvalidArgument)
	}
	opts.schema = schema.Info()
	co, err := c.Subscribe(ctx, opts)
	if err != nil {
		return nil, schemaRefusal(err)
	}
	return &TypedConsumer[T]{co: co, schema: schema, info: schema.Info(), versions: map[int32]*SchemaInfo{}}, nil
}

// Receive returns the next message and its value. On ErrSchemaMismatch the
// message is returned too (Value is the zero value): ack or nack it. With
// ConsumerOptions.PoisonSchemaMismatch such a message is a poison pill
// instead: dead-lettered or acknowledged (poison.go), and Receive moves on.
func (tc *TypedConsumer[T]) Receive(ctx context.Context) (*TypedMessage[T], error) {
	for {
		tm, err := tc.receiveOne(ctx)
		if err != nil && tm != nil && tc.co.opts.PoisonSchemaMismatch && errors.Is(err, ErrSchemaMismatch) {
			if perr := tc.co.poisonMessage(ctx, tm.ReceivedMessage, err); perr != nil {
				return tm, err
			}
			continue
		}
		return tm, err
	}
}

func (tc *TypedConsumer[T]) receiveOne(ctx context.Context) (*TypedMessage[T], error) {
	m, err := tc.co.Receive(ctx)
	if err != nil {
		return nil, err
	}
	tm := &TypedMessage[T]{ReceivedMessage: m}
	w, err := tc.checkWriter(ctx, m)
	if err != nil {
		return tm, err
	}
	var v T
	if wd, ok := tc.schema.(writerDecoder[T]); ok && w != nil {
		v, err = wd.DecodeWriter(m.Payload, w)
	} else {
		v, err = tc.schema.Decode(m.Payload)
	}
	if err != nil {
		return tm, fmt.Errorf("%w: message %v (schema version %d) does not decode with the consumer's %s schema: %v", ErrSchemaMismatch, m.ID, m.SchemaVersion, schemacompat.TypeName(tc.info.GetType()), err)
	}
	tm.Value = v
	return tm, nil
}

// checkWriter checks that the consumer's schema can read the message's
// writer schema, and returns that schema (nil when the message has no
// version or the consumer's own).
func (tc *TypedConsumer[T]) checkWriter(ctx context.Context, m *ReceivedMessage) (*SchemaInfo, error) {
	v := m.SchemaVersion
	if v == 0 || schemacompat.IsNone(tc.info) || v == tc.co.schemaVersion.Load() {
		return nil, nil
	}
	w, err := tc.writerSchema(ctx, v)
	if err != nil {
		return nil, fmt.Errorf("message %v: fetch its schema version %d: %w", m.ID, v, err)
	}
	if w.GetType() != tc.info.GetType() {
		return nil, fmt.Errorf("%w: message %v was written with schema version %d of type %s; this consumer reads %s", ErrSchemaMismatch, m.ID, v, schemacompat.TypeName(w.GetType()), schemacompat.TypeName(tc.info.GetType()))
	}
	if err := schemacompat.CanRead(tc.info, w); err != nil {
		return nil, fmt.Errorf("%w: message %v was written with schema version %d, which the consumer's schema cannot read: %v", ErrSchemaMismatch, m.ID, v, err)
	}
	return w, nil
}

func (tc *TypedConsumer[T]) writerSchema(ctx context.Context, v int32) (*SchemaInfo, error) {
	tc.mu.Lock()
	w, ok := tc.versions[v]
	tc.mu.Unlock()
	if ok {
		return w, nil
	}
	a, err := tc.co.c.Admin()
	if err != nil {
		return nil, err
	}
	w, err = a.GetSchema(ctx, tc.co.opts.Topic, v)
	if err != nil {
		return nil, err
	}
	tc.mu.Lock()
	tc.versions[v] = w // versions never change: cache for the consumer's life
	tc.mu.Unlock()
	return w, nil
}

// Ack acknowledges a message.
func (tc *TypedConsumer[T]) Ack(ctx context.Context, id MessageID) error { return tc.co.Ack(ctx, id) }

// Nack asks for a message's redelivery.
func (tc *TypedConsumer[T]) Nack(ctx context.Context, id MessageID) error {
	return tc.co.Nack(ctx, id)
}

// Consumer is the underlying consumer (AckCumulative, Seek, Unsubscribe...).
func (tc *TypedConsumer[T]) Consumer() *Consumer { return tc.co }

// Close closes the consumer.
func (tc *TypedConsumer[T]) Close(ctx context.Context) error { return tc.co.Close(ctx) }
