package partition

import (
	"hash/fnv"
	"testing"
)

func TestOfMatchesStdlibFNV1a(t *testing.T) {
	for _, key := range []string{"a", "cust-1", "ünïcode", "order-42"} {
		h := fnv.New32a()
		h.Write([]byte(key))
		want := int(h.Sum32() % 7)
		if got := Of(key, 7); got != want {
			t.Fatalf("Of(%q, 7) = %d, want %d", key, got, want)
		}
	}
}

func TestOfEmptyKeyAndSinglePartitionAreZero(t *testing.T) {
	if Of("", 8) != 0 || Of("x", 1) != 0 {
		t.Fatal("empty key or one partition must route to 0")
	}
}
