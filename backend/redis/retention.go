package redis

import (
	"context"
	"time"

	"github.com/rheo-go/rheo"
)

// DeleteGroup implements rheo.Backend.
func (b *Backend) DeleteGroup(ctx context.Context, stream, group string) error {
	return rheo.Errorf(rheo.ErrUnsupported, "DeleteGroup is not implemented yet on redis")
}

// DeleteStream implements rheo.Backend.
func (b *Backend) DeleteStream(ctx context.Context, stream string) error {
	return rheo.Errorf(rheo.ErrUnsupported, "DeleteStream is not implemented yet on redis")
}

// SetRetention implements rheo.Backend.
func (b *Backend) SetRetention(ctx context.Context, stream string, r rheo.Retention) error {
	return rheo.Errorf(rheo.ErrUnsupported, "SetRetention is not implemented yet on redis")
}

// Trim implements rheo.Backend.
func (b *Backend) Trim(ctx context.Context, r rheo.TrimRequest) (rheo.TrimResult, error) {
	return rheo.TrimResult{}, rheo.Errorf(rheo.ErrUnsupported, "Trim is not implemented yet on redis")
}

// LeaseRetention implements rheo.Backend.
func (b *Backend) LeaseRetention(ctx context.Context, stream, owner string, now, until time.Time) (bool, error) {
	return false, rheo.Errorf(rheo.ErrUnsupported, "LeaseRetention is not implemented yet on redis")
}
