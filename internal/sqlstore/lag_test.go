package sqlstore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEachCursor reads LagSQL's cursor lists, and refuses malformed ones
// instead of reading numbers that are not there.
func TestEachCursor(t *testing.T) {
	type row struct {
		part        int
		offered, hw int64
	}
	read := func(s string) ([]row, error) {
		var got []row
		err := eachCursor([]byte(s), func(p int, o, h int64) { got = append(got, row{p, o, h}) })
		return got, err
	}
	got, err := read("")
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = read("0:0:0")
	require.NoError(t, err)
	require.Equal(t, []row{{0, 0, 0}}, got)
	got, err = read("3:17:9223372036854775807,1023:5:6,12:0:40")
	require.NoError(t, err)
	require.Equal(t, []row{{3, 17, 9223372036854775807}, {1023, 5, 6}, {12, 0, 40}}, got)
	for _, bad := range []string{"1", "1:2", "1:2:", "1:2:3,", "1:2:3;4:5:6", "1::3", "-1:2:3", "1:2:3x", "1:99999999999999999999:3", ",1:2:3"} {
		_, err := read(bad)
		require.Error(t, err, "%q", bad)
	}
}
