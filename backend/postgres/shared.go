package postgres

import (
	"context"
	"time"

	"github.com/rheo-go/rheo"
)

// The operations below are not on the hot path; they run on the SQL layer
// shared with SQLite (internal/sqlstore) through this package's dialect,
// which places the shared SQL's tables in the backend's schema.

// CreateStream implements rheo.Backend.
func (b *Backend) CreateStream(ctx context.Context, s rheo.StreamInfo) error {
	return b.store.CreateStream(ctx, s)
}

// Stream implements rheo.Backend.
func (b *Backend) Stream(ctx context.Context, stream string) (rheo.StreamState, error) {
	return b.store.Stream(ctx, stream)
}

// ListStreams implements rheo.Backend.
func (b *Backend) ListStreams(ctx context.Context) ([]rheo.StreamInfo, error) {
	return b.store.ListStreams(ctx)
}

// Read implements rheo.Backend.
func (b *Backend) Read(ctx context.Context, stream string, partition int, after int64, limit int) ([]rheo.Event, error) {
	return b.store.Read(ctx, stream, partition, after, limit)
}

// Events implements rheo.Backend.
func (b *Backend) Events(ctx context.Context, stream string, ids []string) ([]rheo.Event, error) {
	return b.store.Events(ctx, stream, ids)
}

// Query implements rheo.Backend. Filters compile to indexable predicates:
// see docs/postgres.md for which index serves which filter.
func (b *Backend) Query(ctx context.Context, q rheo.QuerySpec) ([]rheo.Event, error) {
	return b.store.Query(ctx, q)
}

// CreateGroup implements rheo.Backend.
func (b *Backend) CreateGroup(ctx context.Context, g rheo.GroupSpec) error {
	return b.store.CreateGroup(ctx, g)
}

// ListGroups implements rheo.Backend.
func (b *Backend) ListGroups(ctx context.Context, stream string) ([]string, error) {
	return b.store.ListGroups(ctx, stream)
}

// GroupStats implements rheo.Backend.
func (b *Backend) GroupStats(ctx context.Context, stream, group string, now time.Time) (rheo.GroupStats, error) {
	return b.store.GroupStats(ctx, stream, group, now)
}

// DeadLetters implements rheo.Backend.
func (b *Backend) DeadLetters(ctx context.Context, stream, group, after string, limit int) ([]rheo.DeadLetter, error) {
	return b.store.DeadLetters(ctx, stream, group, after, limit)
}

// Replay implements rheo.Backend.
func (b *Backend) Replay(ctx context.Context, r rheo.ReplayRequest) (int, error) {
	return b.store.Replay(ctx, r)
}

// Redrive implements rheo.Backend.
func (b *Backend) Redrive(ctx context.Context, stream, group string, ids []string) (int, error) {
	return b.store.Redrive(ctx, stream, group, ids)
}

// ResetGroup implements rheo.Backend.
func (b *Backend) ResetGroup(ctx context.Context, stream, group string, start map[int]int64) (int, error) {
	return b.store.ResetGroup(ctx, stream, group, start)
}

// Leases implements rheo.LeaseLister.
func (b *Backend) Leases(ctx context.Context, stream, group string, eventIDs []string, limit int) ([]rheo.Lease, error) {
	return b.store.Leases(ctx, stream, group, eventIDs, limit)
}
