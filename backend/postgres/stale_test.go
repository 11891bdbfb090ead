package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// A settle or renewal that finds no current lease under its receipt asks
// the store whether the lease is stale or its receipt wrong. When that
// question fails, the answer is that the store is unavailable, not that the
// lease is stale (which would tell the caller its lease is lost).
func TestStaleOrMismatchLookupFailure(t *testing.T) {
	ctx := context.Background()
	be := newBackend(t)
	c := rheo.New(be)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	_, err := c.Append(ctx, "s", rheo.Message{Payload: []byte(`{}`)})
	require.NoError(t, err)
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	ls, err := c.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1, LeaseDuration: time.Minute})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	forged := ls[0]
	forged.ID, forged.Receipt = "01890a5d-ac96-774b-bcce-b302099a8057", "01890a5d-ac96-774b-bcce-b302099a8057"

	// The lookup works: a forged lease is stale.
	require.ErrorIs(t, c.Ack(ctx, forged), rheo.ErrStaleLease)
	_, err = c.Renew(ctx, forged, time.Minute)
	require.ErrorIs(t, err, rheo.ErrStaleLease)

	be.SetOtherReceiptSQLForTest("SELECT 1 / (SELECT 0 WHERE $1::bigint = $1 AND $2::int = $2 AND $3::bigint = $3 AND $4::text = $4 AND $5::text = $5 AND $6::text = $6) = 1")
	_, renewErr := c.Renew(ctx, forged, time.Minute)
	for name, err := range map[string]error{
		"ack":   c.Ack(ctx, forged),
		"renew": renewErr,
	} {
		require.ErrorIs(t, err, rheo.ErrBackendUnavailable, name)
		require.False(t, errors.Is(err, rheo.ErrStaleLease), "%s: %v", name, err)
		require.Contains(t, err.Error(), "01890a5d-ac96-774b-bcce-b302099a8057", name)
	}
	// The real lease was never touched.
	require.NoError(t, c.Ack(ctx, ls[0]))
}
