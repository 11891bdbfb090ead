package rheo_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
	"github.com/rheo-go/rheo/clock"
)

// TestWithRetentionTrimsByItself checks that a client opted in with
// WithRetention applies the stream's policy without being asked, and that
// Close stops its loop.
func TestWithRetentionTrimsByItself(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	b := memory.New()
	plain := rheo.New(b) // not opted in: never trims
	require.NoError(t, plain.CreateStream(ctx, "s", rheo.StreamConfig{Retention: rheo.Retention{MaxEvents: 2}}))
	_, err := plain.AppendBatch(ctx, "s", make([]rheo.Message, 10))
	require.NoError(t, err)

	c := rheo.New(b, rheo.WithRetention(time.Second))
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := b.Stream(ctx, "s")
		require.NoError(t, err)
		if st.TrimmedThrough[0] == 8 {
			break
		}
		require.True(t, time.Now().Before(deadline), "retention never ran; trimmed through %d", st.TrimmedThrough[0])
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, c.Close())
}

func TestDeleteAndTrimNeedConfirm(t *testing.T) {
	ctx := context.Background()
	c := rheo.New(memory.New())
	require.ErrorIs(t, c.DeleteStream(ctx, "s", rheo.DeleteOptions{}), rheo.ErrConfirmRequired)
	require.ErrorIs(t, c.DeleteGroup(ctx, "s", "g", rheo.DeleteOptions{}), rheo.ErrConfirmRequired)
	_, err := c.Trim(ctx, "s", rheo.TrimOptions{Force: true})
	require.ErrorIs(t, err, rheo.ErrConfirmRequired)
}

func TestRetentionString(t *testing.T) {
	require.Equal(t, "none", rheo.Retention{}.String())
	require.Equal(t, "max-age=1h0m0s,max-events=10,interest", rheo.Retention{MaxAge: time.Hour, MaxEvents: 10, Interest: true}.String())
}

// failingTrim is a backend whose trims of one stream fail.
type failingTrim struct {
	rheo.Backend
	stream string
}

func (f failingTrim) Trim(ctx context.Context, r rheo.TrimRequest) (rheo.TrimResult, error) {
	if r.Stream == f.stream {
		return rheo.TrimResult{}, rheo.Errorf(rheo.ErrBackendUnavailable, "trim of stream %q failed", r.Stream)
	}
	return f.Backend.Trim(ctx, r)
}

// A stream whose trim fails does not keep EnforceRetention from trimming
// the streams after it; the error it returns names the one that failed.
func TestEnforceRetentionGoesOnPastAFailingStream(t *testing.T) {
	ctx := context.Background()
	c := rheo.New(failingTrim{memory.New(), "a"})
	defer c.Close()
	for _, s := range []string{"a", "b"} {
		require.NoError(t, c.CreateStream(ctx, s, rheo.StreamConfig{Partitions: 1, Retention: rheo.Retention{MaxEvents: 1}}))
		for range 3 {
			_, err := c.Append(ctx, s, rheo.Message{Payload: []byte(`{}`)})
			require.NoError(t, err)
		}
	}
	reps, err := c.EnforceRetention(ctx)
	require.ErrorIs(t, err, rheo.ErrBackendUnavailable)
	require.ErrorContains(t, err, `trim of stream "a" failed`)
	require.Len(t, reps, 1)
	require.Equal(t, "b", reps[0].Stream)
	require.Equal(t, int64(2), reps[0].Removed)
}

// Tens of thousands of old events before the first young one: the MaxAge
// cutoff is searched in growing windows of sequences and found past them.
func TestMaxAgeCutoffBehindALongOldPrefix(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFrozen(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := rheo.New(memory.New(), rheo.WithClock(clk))
	defer c.Close()
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{Partitions: 1}))
	const old = 35_000 // past the first two windows (10,000 and 20,000)
	msgs := make([]rheo.Message, 1000)
	for i := 0; i < old; i += len(msgs) {
		_, err := c.AppendBatch(ctx, "s", msgs)
		require.NoError(t, err)
	}
	clk.Advance(2 * time.Hour)
	_, err := c.AppendBatch(ctx, "s", msgs[:2])
	require.NoError(t, err)
	require.NoError(t, c.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))
	require.NoError(t, c.SetRetention(ctx, "s", rheo.Retention{MaxAge: time.Hour}))
	info, err := c.GroupInfo(ctx, "s", "g")
	require.NoError(t, err)
	require.True(t, info.HoldsRetention)
	rep, err := c.Trim(ctx, "s", rheo.TrimOptions{Force: true, Confirm: true})
	require.NoError(t, err)
	require.Equal(t, int64(old), rep.Partitions[0].Target)
	require.Equal(t, int64(old), rep.Removed)
}
