package rheo_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/memory"
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
