package memory

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestParseUUID(t *testing.T) {
	for range 100 {
		u := uuid.New()
		k, ok := parseUUID(u.String())
		require.True(t, ok, u.String())
		require.Equal(t, binary.BigEndian.Uint64(u[:8]), k.hi)
		require.Equal(t, binary.BigEndian.Uint64(u[8:]), k.lo)
	}
	id := "0192f3a4-5b6c-7d8e-9fa0-b1c2d3e4f5a6"
	for _, s := range []string{
		strings.ToUpper(id),                    // another ID, not the same one
		id[:35],                                // too short
		id + "0",                               // too long
		strings.Replace(id, "-", "x", 1),       // a dash missing
		strings.Replace(id, "a", "g", 1),       // not hex
		"0192f3a45b6c-7d8e-9fa0-b1c2d3e4f5a6-", // dashes elsewhere
	} {
		_, ok := parseUUID(s)
		require.False(t, ok, s)
	}
}

// IDs that differ only in case, or are not UUIDs at all, are distinct keys.
func TestIDIndexKeepsIDsApart(t *testing.T) {
	x := newIDIndex()
	id := "0192f3a4-5b6c-7d8e-9fa0-b1c2d3e4f5a6"
	ids := []string{id, strings.ToUpper(id), "order-1", ""}
	for i, s := range ids {
		x.put(s, uint64(i))
	}
	require.Equal(t, len(ids), x.len())
	for i, s := range ids {
		v, ok := x.get(s)
		require.True(t, ok, s)
		require.Equal(t, uint64(i), v, s)
	}
	x.remove(id)
	_, ok := x.get(id)
	require.False(t, ok)
	c := x.compacted()
	require.Equal(t, len(ids)-1, c.len())
	v, ok := c.get(strings.ToUpper(id))
	require.True(t, ok)
	require.Equal(t, uint64(1), v)
}

// In order, out of order, removed and compacted: the index answers as a
// map would.
func TestIDIndexMatchesAMap(t *testing.T) {
	x := newIDIndex()
	want := map[string]uint64{}
	var ids []string
	for i := range 3 * runChunk { // the run spans three chunks
		var id string
		switch i % 10 {
		case 3: // an older UUID, out of order
			id = fmt.Sprintf("00000000-0000-7000-8000-%012x", i)
		case 7: // not a UUID
			id = fmt.Sprintf("order-%d", i)
		default: // increasing
			id = fmt.Sprintf("%08x-0000-7000-8000-000000000000", 1<<20+i)
		}
		_, dup := x.get(id)
		require.False(t, dup, id)
		x.put(id, uint64(i+1))
		want[id] = uint64(i + 1)
		ids = append(ids, id)
	}
	for i, id := range ids {
		if i%3 == 0 {
			x.remove(id)
			delete(want, id)
		}
	}
	check := func(x idIndex) {
		require.Equal(t, len(want), x.len())
		for _, id := range ids {
			v, ok := x.get(id)
			w, wok := want[id]
			require.Equal(t, wok, ok, id)
			require.Equal(t, w, v, id)
		}
	}
	check(x)
	check(x.compacted())
}
