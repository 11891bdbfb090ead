package postgres

import (
	"context"
	"time"

	"github.com/rheo-go/rheo"
)

// DeleteGroup implements rheo.Backend.
func (b *Backend) DeleteGroup(ctx context.Context, stream, group string) error {
	err := b.store.DeleteGroup(ctx, stream, group)
	b.forget(stream, group)
	return err
}

// DeleteStream implements rheo.Backend.
func (b *Backend) DeleteStream(ctx context.Context, stream string) error {
	err := b.store.DeleteStream(ctx, stream)
	b.forget(stream, "")
	return err
}

// SetRetention implements rheo.Backend.
func (b *Backend) SetRetention(ctx context.Context, stream string, r rheo.Retention) error {
	return b.store.SetRetention(ctx, stream, r)
}

// Trim implements rheo.Backend.
func (b *Backend) Trim(ctx context.Context, r rheo.TrimRequest) (rheo.TrimResult, error) {
	return b.store.Trim(ctx, r)
}

// LeaseRetention implements rheo.Backend.
func (b *Backend) LeaseRetention(ctx context.Context, stream, owner string, now, until time.Time) (bool, error) {
	return b.store.LeaseRetention(ctx, stream, owner, now, until)
}
