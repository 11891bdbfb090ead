// Package rheo gives durable consumer-group semantics over stores you already
// run: an append-only, partitioned, searchable event log, and consumer groups
// that lease each event to one competing worker at a time, fence stale
// acknowledgements, retry, dead-letter, replay, and report honest lag.
//
// # Vocabulary
//
// A stream is a named, append-only log split into partitions; order holds
// inside a partition. An event is immutable; its Sequence is per (stream,
// partition), starts at 1 and is contiguous. A group is a named consumer group
// on a stream: each group tracks its own progress and sees every event, and
// the workers of one group compete. A lease is a group's claim that one worker
// may settle one delivery of one event, now; it carries a fencing token
// (Lease.ID). You settle a lease — Ack, Nack (retry), Reject (dead-letter) or
// Release (hand back unhandled, the attempt not counted) — never an event. The committed frontier of a partition is the highest
// sequence F such that every sequence through F is acked or dead-lettered; lag
// is measured from it, never from "highest acked".
//
// # Contract
//
// Every event is delivered at least once to each group (handlers must be
// idempotent on Event.ID). At most one current lease exists per (group,
// event), and a stale lease can never settle (ErrStaleLease). Expired leases
// become claimable again, so a crashed worker's events come back without human
// action. Events are never changed or deleted by consumption (see
// Retention). The frontier
// never passes an unsettled sequence. All lease arithmetic reads the client's
// clock (WithClock), so tests drive expiry with clock.Frozen instead of sleeping.
//
// # Retention
//
// Events are never deleted by consumption, only by retention: a stream's
// Retention policy (MaxAge, MaxEvents per partition, Interest) applied by
// Trim, EnforceRetention or a client made WithRetention. A trim never
// removes an event a group has not finished unless forced, and then the
// group skips the range and counts it (GroupInfo.Skipped). Reads, queries,
// group starts and replays inside a trimmed range begin at the oldest
// retained event. DeleteGroup and DeleteStream remove state for good.
//
// # Backends
//
// A Client wraps a Backend: backend/memory, backend/sqlite (the embedded
// default), backend/postgres and backend/redis. Open picks one by DSN scheme
// once its package is imported. The facade validates input, generates IDs,
// routes events to partitions, reads the clock and classifies errors; a backend
// only stores and claims. rheotest.RunBackend is the conformance suite every
// backend passes.
//
// # Errors
//
// Errors wrap the sentinels (ErrStreamNotFound, ErrStaleLease, …) with a
// message naming what is at fault; test them with errors.Is. Classify tells a
// caller what to do with a lease after a failed settle: drop it (Lost), leave
// it to expire (Unknown), or nack it (Failed).
package rheo
