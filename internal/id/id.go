// Package id generates event IDs and lease fencing tokens.
package id

import (
	crand "crypto/rand"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

func init() {
	// A pool of random bytes makes UUID generation several times cheaper;
	// it must be enabled before any concurrent use, hence init.
	uuid.EnableRandPool()
}

// v7 makes UUIDv7s (RFC 9562) that are strictly increasing within the
// process: 48 bits of Unix milliseconds, then a 12-bit counter in rand_a
// (method 1 of RFC 9562 section 6.2), then 62 random bits. The randomness
// comes from a ChaCha8 generator seeded from crypto/rand: it is a CSPRNG,
// several times cheaper per ID than reading the system source, which made
// ID generation a tenth of an append on the memory store.
var v7 struct {
	mu  sync.Mutex
	rng *rand.ChaCha8
	ms  int64  // milliseconds of the last ID
	seq uint64 // counter of the last ID, below 1<<12
}

func init() {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		panic("id: cannot seed the event ID generator: " + err.Error())
	}
	v7.rng = rand.NewChaCha8(seed)
}

// now is the clock of new IDs; a variable so tests can stop it.
var now = func() int64 { return time.Now().UnixMilli() }

// v7id is one UUIDv7 before encoding.
type v7id struct {
	ms  int64
	seq uint64
	r   uint64
}

// nextLocked advances the generator to the next ID at time t (Unix
// milliseconds); v7.mu must be held.
func nextLocked(t int64) v7id {
	r := v7.rng.Uint64()
	switch {
	case t > v7.ms:
		// A new millisecond: start the counter low, at a random point of
		// its first half, so it has room to count and is not guessable.
		v7.ms, v7.seq = t, r>>53 // 11 bits
		r = v7.rng.Uint64()
	case v7.seq < 1<<12-1:
		v7.seq++
	default:
		// 4,096 IDs in one millisecond (or a clock stepped back): borrow
		// the next millisecond, as RFC 9562 allows, to stay ordered.
		v7.ms++
		v7.seq = 0
	}
	return v7id{v7.ms, v7.seq, r}
}

// encode writes x in the canonical form of a UUID to b[:36].
func (x v7id) encode(b []byte) {
	_ = b[35]
	hi := uint64(x.ms)<<16 | 0x7000 | x.seq&0xfff // version 7
	lo := 1<<63 | x.r&(1<<62-1)                   // variant 10
	put := func(at int, w uint64, shift int) {
		b[at], b[at+1] = hexDigits[w>>(shift+4)&15], hexDigits[w>>shift&15]
	}
	for i, at := range [8]int{0, 2, 4, 6, 9, 11, 14, 16} {
		put(at, hi, 56-8*i)
	}
	for i, at := range [8]int{19, 21, 24, 26, 28, 30, 32, 34} {
		put(at, lo, 56-8*i)
	}
	b[8], b[13], b[18], b[23] = '-', '-', '-', '-'
}

const hexDigits = "0123456789abcdef"

// Event returns a new event ID: a UUIDv7, so IDs sort by creation (strictly
// within one process, by millisecond across processes).
func Event() string { return Events(1) }

// Events returns n new event IDs, as Event makes them, concatenated (36
// bytes each, in increasing order): one allocation for a whole batch, and
// a lock per chunk of IDs instead of per ID.
func Events(n int) string {
	var out strings.Builder
	out.Grow(36 * n)
	var chunk [64]v7id
	var text [64 * 36]byte
	t := now()
	for n > 0 {
		k := min(n, len(chunk))
		v7.mu.Lock()
		for i := range k {
			chunk[i] = nextLocked(t)
		}
		v7.mu.Unlock()
		for i, x := range chunk[:k] {
			x.encode(text[36*i:])
		}
		out.Write(text[:36*k])
		n -= k
	}
	return out.String()
}

// Token returns a new random fencing token (a UUIDv4 string).
func Token() string { return uuid.NewString() }

// ValidToken reports whether s has the shape of a token made by Token.
func ValidToken(s string) bool {
	if len(s) != 36 {
		return false
	}
	_, err := uuid.Parse(s)
	return err == nil
}
