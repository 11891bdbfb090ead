// Package rheowatermill runs Watermill (github.com/ThreeDotsLabs/watermill)
// over rheo: a Publisher that appends Watermill messages to rheo streams and
// a Subscriber that consumes them through rheo consumer groups, with leases
// renewed while a handler holds a message, fenced acknowledgements, retries,
// dead letters, replay and honest lag on any rheo store (memory, SQLite,
// PostgreSQL, Redis).
//
// A Watermill topic is a rheo stream; a Subscriber's ConsumerGroup is a rheo
// group. msg.Ack() acks the message's lease, msg.Nack() nacks it (with
// SubscriberConfig.NackDelay), and a message the handler gives up on for good
// can go straight to rheo's dead letters with the DeadLetter middleware.
// Delivery is at least once: handlers must be idempotent on msg.UUID.
//
// The module is nested (its own go.mod) so that rheo users who do not use
// Watermill never download it. See docs/watermill.md.
package rheowatermill
