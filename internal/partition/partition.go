// Package partition routes keys to partitions.
package partition

// Of returns the partition of key among n partitions: FNV-1a 32 of the key's
// UTF-8 bytes, modulo n. An empty key or a single partition gives 0.
func Of(key string, n int) int {
	if key == "" || n <= 1 {
		return 0
	}
	const (
		offset32 = 2166136261
		prime32  = 16777619
	)
	h := uint32(offset32)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= prime32
	}
	return int(h % uint32(n))
}
