// Package id generates event IDs and lease fencing tokens.
package id

import (
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
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

// newV7 returns the 16 bytes of the next UUIDv7.
func newV7() (u [16]byte) {
	t := now()
	v7.mu.Lock()
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
	ms, seq := v7.ms, v7.seq
	v7.mu.Unlock()
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6] = 0x70 | byte(seq>>8) // version 7
	u[7] = byte(seq)
	u[8] = 0x80 | byte(r>>56)&0x3f // variant 10
	for i := 9; i < 16; i++ {
		u[i] = byte(r >> (8 * (15 - i)))
	}
	return u
}

// Event returns a new event ID: a UUIDv7, so IDs sort by creation (strictly
// within one process, by millisecond across processes).
func Event() string {
	u := newV7()
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
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
