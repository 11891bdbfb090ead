package sqlstore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEachPair reads LagSQL's lists of partitions and numbers, and refuses
// malformed ones instead of reading numbers that are not there.
func TestEachPair(t *testing.T) {
	type row struct {
		part int
		n    int64
	}
	read := func(s string) ([]row, error) {
		var got []row
		err := eachPair([]byte(s), func(p int, n int64) { got = append(got, row{p, n}) })
		return got, err
	}
	got, err := read("")
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = read("0:0")
	require.NoError(t, err)
	require.Equal(t, []row{{0, 0}}, got)
	got, err = read("3:9223372036854775807,1023:5,12:0")
	require.NoError(t, err)
	require.Equal(t, []row{{3, 9223372036854775807}, {1023, 5}, {12, 0}}, got)
	for _, bad := range []string{"1", "1:", "1:2,", "1:2;4:5", "1::3", "-1:2", "1:2x", "1:99999999999999999999", ",1:2", "1:2:3", "99999999999:1"} {
		_, err := read(bad)
		require.Error(t, err, "%q", bad)
	}
}
