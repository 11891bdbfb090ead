package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/backend/sqlite"
)

// wait is a liveness guard, not a timing assertion: a missing wakeup fails
// after it, a present one arrives long before.
const wait = 10 * time.Second

func received(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(wait):
		return false
	}
}

func drained(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

func TestNotifyInProcessOnCommit(t *testing.T) {
	ctx := context.Background()
	// The cross-process poller would also see these commits; keep it out.
	b := open(t, sqlite.WithPollInterval(time.Hour))
	c := rheo.New(b)
	require.NoError(t, c.CreateStream(ctx, "s", rheo.StreamConfig{}))
	require.NoError(t, c.CreateStream(ctx, "other", rheo.StreamConfig{}))
	ch, cancel := b.Subscribe("s")
	defer cancel()
	_, err := c.Append(ctx, "s", rheo.Message{})
	require.NoError(t, err)
	// Signalled on commit, before Append returned.
	require.False(t, drained(ch), "append on s signals s's subscribers")
	_, err = c.Append(ctx, "other", rheo.Message{})
	require.NoError(t, err)
	require.True(t, drained(ch), "an append on another stream does not")
}

// Two Backends on one file stand for two processes: each has its own
// connections, so the subscriber learns of the other's commits only
// through PRAGMA data_version.
func TestNotifyNoticesOtherConnectionsCommits(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "n.db")
	b1, err := sqlite.Open(ctx, path, sqlite.WithPollInterval(10*time.Millisecond))
	require.NoError(t, err)
	defer b1.Close()
	b2, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	defer b2.Close()
	c2 := rheo.New(b2)
	require.NoError(t, c2.CreateStream(ctx, "s", rheo.StreamConfig{}))
	require.NoError(t, c2.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))

	ch, cancel := b1.Subscribe("s")
	defer cancel()
	_, err = c2.Append(ctx, "s", rheo.Message{})
	require.NoError(t, err)
	require.True(t, received(ch), "append by another connection wakes the subscriber")

	// A nack makes work claimable again: it wakes too.
	ls, err := c2.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, ls, 1)
	for !drained(ch) {
	}
	require.NoError(t, c2.Nack(ctx, ls[0], "again"))
	require.True(t, received(ch), "nack by another connection wakes the subscriber")
}

// Fetch with Wait returns as soon as another process appends.
func TestFetchWaitWakesOnOtherProcessAppend(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "w.db")
	b1, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	c1 := rheo.New(b1)
	defer c1.Close()
	b2, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	c2 := rheo.New(b2)
	defer c2.Close()
	require.NoError(t, c1.CreateStream(ctx, "s", rheo.StreamConfig{}))
	require.NoError(t, c1.CreateGroup(ctx, "s", "g", rheo.GroupConfig{}))

	got := make(chan []rheo.Lease, 1)
	go func() {
		ls, _ := c1.Fetch(ctx, "s", "g", rheo.FetchOptions{Limit: 1, Wait: time.Minute})
		got <- ls
	}()
	e, err := c2.Append(ctx, "s", rheo.Message{ID: "e1"})
	require.NoError(t, err)
	select {
	case ls := <-got:
		require.Len(t, ls, 1)
		require.Equal(t, e.ID, ls[0].Event.ID)
	case <-time.After(wait):
		t.Fatal("Fetch with Wait did not wake on another process's append")
	}
}
