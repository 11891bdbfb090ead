package rheo

import (
	"context"
	"sync"
	"time"
)

// Backend is the store behind a Client: the SPI a backend implements.
//
// The facade (Client) validates every input, generates IDs, routes events to
// partitions, reads the clock and classifies errors. A backend only stores and
// claims. Every time it needs (lease expiry, nack delays, timestamps of
// settles) arrives as a `now` argument from the facade; a backend never reads
// a clock of its own.
//
// Errors: a backend returns rheo's sentinels, wrapped with Errorf or Wrap
// (ErrStreamNotFound, ErrGroupNotFound, ErrAlreadyExists, ErrStaleLease,
// ErrReceiptMismatch, ErrCursorNotFound, ErrBackendUnavailable when nothing
// was sent, ErrAmbiguous when a write may have committed). A missing stream is
// reported before a missing group. Driver errors never leak unclassified.
//
// rheotest.RunBackend is the conformance suite every Backend must pass.
type Backend interface {
	// Ping checks the store is reachable.
	Ping(ctx context.Context) error
	// Migrate creates or upgrades the schema. It is idempotent.
	Migrate(ctx context.Context) error
	// Close releases what the backend owns (not what it borrowed).
	Close() error

	// CreateStream stores a new stream; ErrAlreadyExists if the name is taken.
	CreateStream(ctx context.Context, s StreamInfo) error
	// Stream returns a stream's description and, per partition (index =
	// partition), its high watermark.
	Stream(ctx context.Context, stream string) (StreamState, error)
	// ListStreams lists every stream, sorted by name.
	ListStreams(ctx context.Context) ([]StreamInfo, error)

	// Append stores events atomically (all or nothing). Each event arrives
	// with ID, Stream, Partition, Type, Key, Timestamp, Payload and Metadata
	// set, and Sequence 0. The backend assigns contiguous sequences per
	// partition in input order, with commit order equal to sequence order.
	// An event whose ID the stream already holds is not written; the stored
	// event is returned in its place. IDs within one call are distinct.
	// Each Payload is a fresh buffer the backend may keep; Metadata is nil
	// or not empty, and is the caller's map: it must be copied if kept.
	// Events come back with the Metadata they were appended with, nil as
	// nil. The slice itself belongs to
	// the call: the backend may write its result into it. An event whose
	// Partition is outside the stream's fails the call with
	// ErrInvalidPartition, and nothing is written.
	Append(ctx context.Context, stream string, events []Event) ([]Event, error)
	// Read returns up to limit events of one partition with Sequence > after,
	// ascending.
	Read(ctx context.Context, stream string, partition int, after int64, limit int) ([]Event, error)
	// Events returns the stored events with the given IDs, in any order;
	// unknown IDs are simply absent.
	Events(ctx context.Context, stream string, ids []string) ([]Event, error)
	// Query returns the events that match a validated query (see QuerySpec).
	Query(ctx context.Context, q QuerySpec) ([]Event, error)

	// CreateGroup stores a new group; ErrAlreadyExists if it exists.
	CreateGroup(ctx context.Context, g GroupSpec) error
	// ListGroups lists a stream's groups, sorted.
	ListGroups(ctx context.Context, stream string) ([]string, error)

	// Fetch claims up to Limit deliveries (SPEC R3, R6). See FetchRequest.
	Fetch(ctx context.Context, r FetchRequest) ([]Lease, error)
	// Renew sets the current lease l to expire at expiresAt; fenced like Settle.
	Renew(ctx context.Context, l Lease, expiresAt, now time.Time) error
	// Settle acks, nacks, rejects or releases leases of one (stream, group).
	// It returns one error per request (nil when settled), or a single error
	// when the whole call failed. A request of an unknown kind gets
	// ErrInvalidArgument of its own and writes nothing; the others settle.
	// See SettleRequest.
	Settle(ctx context.Context, stream, group string, reqs []SettleRequest, now time.Time) ([]error, error)

	// Lag reports frontier and high watermark of every partition, in
	// partition order, or with partitions not nil of those only: they come
	// sorted and distinct, each below the partition count the caller last
	// read, and one the stream no longer has is left out. What a read
	// costs grows with the partitions it reports, not with those the
	// stream holds. The facade computes Lag and Total.
	Lag(ctx context.Context, stream, group string, partitions []int) ([]PartitionLag, error)
	// GroupStats counts the group's leases, available deliveries and dead
	// letters (see GroupInfo for their meaning).
	GroupStats(ctx context.Context, stream, group string, now time.Time) (GroupStats, error)
	// DeadLetters lists dead letters ordered by (partition, sequence),
	// starting after the dead letter whose event ID is after (ErrCursorNotFound
	// when it is not one of the group's dead letters).
	DeadLetters(ctx context.Context, stream, group, after string, limit int) ([]DeadLetter, error)

	// Replay reopens deliveries (SPEC R8) and returns how many: events of
	// the range at or below the group's cursor (offered to it, or passed
	// over by its start) and above the trimmed point. See ReplayRequest.
	Replay(ctx context.Context, r ReplayRequest) (int, error)
	// Redrive makes the named dead letters (all when ids is empty) available
	// again with attempts reset, lowering the frontier below each. It returns
	// how many it reopened; IDs that are not dead letters are ignored.
	Redrive(ctx context.Context, stream, group string, ids []string) (int, error)
	// ResetGroup forgets every delivery, lease and dead letter of the group
	// in the given partitions and restarts each after start[partition]
	// (cursor and frontier both set to it). It returns how many retained
	// events lie between its new start and its cursor: the deliveries it
	// will now be offered.
	ResetGroup(ctx context.Context, stream, group string, start map[int]int64) (int, error)

	// DeleteGroup removes a group and everything it holds: cursor,
	// frontier, deliveries, leases and dead letters. Settles and renewals of
	// its outstanding leases fail afterwards (ErrGroupNotFound, or
	// ErrStaleLease once a group of the same name exists again). Events and
	// other groups are untouched. ErrGroupNotFound if it does not exist.
	DeleteGroup(ctx context.Context, stream, group string) error
	// DeleteStream removes a stream: its events, partitions, retention
	// policy and lease, and every group with all their state.
	// ErrStreamNotFound if it does not exist.
	DeleteStream(ctx context.Context, stream string) error
	// SetRetention replaces the stream's retention policy (validated by the
	// facade). The policy is returned in StreamInfo.Retention.
	SetRetention(ctx context.Context, stream string, r Retention) error
	// Trim removes events of one partition. See TrimRequest.
	Trim(ctx context.Context, r TrimRequest) (TrimResult, error)
	// LeaseRetention takes or renews the stream's retention lease for owner
	// until the given time, and reports whether owner holds it. It succeeds
	// when nobody holds it, when owner holds it, or when the holder's lease
	// expired (until <= now). Calling it with until == now releases it.
	LeaseRetention(ctx context.Context, stream, owner string, now, until time.Time) (bool, error)
}

// TrimRequest removes, atomically, the events of one partition with
// TrimmedThrough < Sequence <= min(Through, TrimmedThrough+Limit).
//
// Unless Force, Through is first lowered to the lowest frontier, in the
// partition, of the stream's groups, so that no event is removed that a group
// has not finished (pending, leased, or not yet offered). The backend applies
// this cap in the same transaction as the delete, so a concurrent Replay or
// ResetGroup can never lose an event it reopened.
//
// With Force the cap is not applied. Every group whose cursor lies below the
// new TrimmedThrough skips the removed range: its cursor is raised to it.
//
// In both modes every group's delivery records at or below the new
// TrimmedThrough are deleted (acked records, dead letters, and with Force
// pending and leased ones, whose leases become stale), and the number of
// removed events the group had not acked (dead letters; with Force also
// pending, leased and never offered ones) is added to its Skipped count (see
// GroupStats), so that lag and dead letter counts stay honest.
//
// The partition's TrimmedThrough (StreamState.TrimmedThrough) becomes the
// highest removed sequence; it never decreases. Sequences are never reused:
// appends continue after the high watermark. The IDs of removed events are
// forgotten, so an ID may be appended again. Starts below TrimmedThrough
// (GroupSpec.Start, ResetGroup, ReplayRequest.FromSequence) are raised to it
// by the backend.
type TrimRequest struct {
	Stream    string
	Partition int
	// Through is the highest sequence the caller wants removed.
	Through int64
	// Limit bounds the events removed by this call (1..MaxLimit), so a
	// trim never holds the store long; callers loop.
	Limit int
	Force bool
}

// TrimResult is what one Trim call did.
type TrimResult struct {
	// Removed counts events removed by this call.
	Removed int64
	// TrimmedThrough is the partition's trimmed sequence after the call.
	TrimmedThrough int64
	// Skipped counts, summed over the stream's groups, removed events a
	// group had not acked (see TrimRequest).
	Skipped int64
	// DeadLetters counts the dead letters removed with their events.
	DeadLetters int64
}

// Notifier is implemented by backends that can wake waiters when work may
// have become claimable on a stream (appends, nacks, replays, redrives).
// Without it, waits fall back to polling.
type Notifier interface {
	// Subscribe returns a channel that receives (without blocking the
	// sender, so signals coalesce) after each such change on stream, and a
	// function that ends the subscription.
	Subscribe(stream string) (<-chan struct{}, func())
}

// StreamState is a stream and its high watermarks.
type StreamState struct {
	StreamInfo
	// HighWatermarks[p] is partition p's last sequence (0 when empty).
	HighWatermarks []int64
	// TrimmedThrough[p] is the highest sequence of partition p removed by
	// Trim (0 when nothing was): the oldest retained event, if any, is
	// TrimmedThrough[p]+1.
	TrimmedThrough []int64
}

// QuerySpec is a Query validated by the facade: Stream is set, Limit is in
// 1..10000, OrderBy is non-empty with known fields, Partitions are distinct
// and in range (empty means all), and the cursor is decoded into After.
type QuerySpec struct {
	Query
	// After holds, per partition, the last sequence already returned by
	// earlier pages: only events with Sequence > After[Partition] match.
	After map[int]int64
}

// GroupSpec is a group to create, with its start resolved per partition.
type GroupSpec struct {
	Stream, Group string
	MaxAttempts   int
	// Start[p] is the sequence after which partition p starts: both its
	// materialization cursor and its frontier begin there. Every partition
	// of the stream has an entry.
	Start     map[int]int64
	CreatedAt time.Time
}

// FetchRequest is a validated Fetch.
//
// The backend claims, within Partitions, deliveries that are available (with
// any nack delay passed: availableAt <= Now) or leased with ExpiresAt <= Now,
// plus events beyond the group's cursor not yet offered. Inside a partition it
// claims in sequence order; across partitions it shares Limit fairly. Each
// claim gets ID NewLeaseID(), Attempt+1, LeasedAt Now and ExpiresAt
// Now+LeaseDuration. An expired lease whose Attempt >= MaxAttempts is
// dead-lettered with reason "max_attempts: lease expired" instead (R6).
// Leases come back sorted by (partition, sequence), each with its Event.
type FetchRequest struct {
	Stream, Group string
	ConsumerID    string
	Partitions    []int // distinct, ascending, non-empty
	Limit         int
	LeaseDuration time.Duration
	Now           time.Time
	NewLeaseID    func() string
}

// SettleKind is what a SettleRequest does.
type SettleKind int

const (
	// SettleAck marks the delivery acked.
	SettleAck SettleKind = iota + 1
	// SettleNack makes it available again at AvailableAt, or dead-letters
	// it with reason "max_attempts: <reason>" when the lease's attempt has
	// reached the group's MaxAttempts.
	SettleNack
	// SettleReject dead-letters it with the reason.
	SettleReject
	// SettleRelease hands the delivery back unhandled: it is available
	// again at once and the claim that leased it is not counted, so the
	// next lease of it has this lease's Attempt. The delivery's reason is
	// left as it was (Reason is ignored), and a release never dead-letters,
	// whatever the attempt. For leases no handler started: a consumer
	// that stops with leases still queued releases them.
	SettleRelease
)

// CheckKind returns nil when r's Kind is a settle kind, and otherwise the
// ErrInvalidArgument a backend answers for r (see Backend.Settle).
func (r SettleRequest) CheckKind() error {
	if r.Kind >= SettleAck && r.Kind <= SettleRelease {
		return nil
	}
	return Errorf(ErrInvalidArgument, "lease %s: unknown settle kind %d", r.Lease.ID, r.Kind)
}

// SettleRequest settles one lease. It succeeds only if the delivery is
// leased under Lease.ID (ErrStaleLease otherwise, whatever the receipt) and
// under Lease.Receipt (ErrReceiptMismatch when the ID is the current
// lease's but the receipt is not the one issued with it). Expiry is not checked:
// an expired lease nobody reclaimed may still settle. Terminal settles
// advance the frontier over contiguous terminal sequences.
type SettleRequest struct {
	Kind   SettleKind
	Lease  Lease
	Reason string
	// AvailableAt is when a nacked delivery becomes claimable again.
	AvailableAt time.Time
}

// GroupStats are the counts of GroupInfo that a backend computes.
type GroupStats struct {
	Inflight, Available, DeadLetters int64
	// MaxAttempts is the group's attempt limit, as created.
	MaxAttempts int
	// Skipped counts events trims removed that the group had not acked:
	// dead letters, and with a forced trim pending or unoffered events.
	Skipped int64
}

// ReplayRequest reopens deliveries of one group: they become available with
// attempts starting again from 0, any lease on them becomes stale, dead
// letters among them are cleared, and the frontier is lowered below them.
// Events are never touched, nor other groups.
type ReplayRequest struct {
	Stream, Group string
	// FromSequence[p] reopens every delivery of partition p above it and
	// rewinds p's cursor to it (frontier = min(frontier, it)).
	FromSequence map[int]int64
	// Events reopens exactly these events (creating their delivery when it
	// was compacted away or reset); events the group has not been offered
	// yet are left alone. The facade passes each event once.
	Events []EventRef
}

// EventRef names an event by its position.
type EventRef struct {
	ID        string
	Partition int
	Sequence  int64
}

// OpenFunc opens a backend from a DSN. See Register.
type OpenFunc func(ctx context.Context, dsn string) (Backend, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]OpenFunc{}
)

// Register makes a backend available to Open under a DSN scheme ("memory",
// "sqlite", "postgres"), the way database/sql drivers register a name.
// Registering a scheme twice panics.
func Register(scheme string, open OpenFunc) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if open == nil {
		panic("rheo: Register open func is nil")
	}
	if _, dup := registry[scheme]; dup {
		panic("rheo: Register called twice for scheme " + scheme)
	}
	registry[scheme] = open
}
