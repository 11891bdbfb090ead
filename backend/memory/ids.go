package memory

import "sort"

// idIndex maps event IDs to packed positions.
//
// IDs in the canonical form of a UUID (36 characters, lower-case hex,
// dashes at 8, 13, 18 and 23: what rheo generates) are keyed by their 16
// bytes, which compare and hash in two words and hold no pointer for the
// garbage collector to follow; any other ID is keyed by its string. A
// string is canonical or not, so the two key sets cannot collide.
//
// rheo's IDs are UUIDv7s, increasing within a process, so a producer's
// appends arrive mostly in key order. Those go to the end of a sorted run
// (an append, and a lookup that only compares with its last key), the
// rest to a map. A Go map of a million IDs costs a cache miss per lookup
// and per insert; the run costs one at most.
type idIndex struct {
	run   idRun              // canonical IDs appended in increasing order
	dead  int                // removed entries still in run
	uuids map[uuidKey]uint64 // canonical IDs that came out of order
	other map[string]uint64  // every other ID
}

type uuidKey struct{ hi, lo uint64 }

func (a uuidKey) less(b uuidKey) bool { return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo }

type uuidEntry struct {
	key uuidKey
	pos uint64 // removedPos once removed
}

// removedPos marks a removed entry of the run: no position packs to it
// (sequences fit in 48 bits and start at 1).
const removedPos = ^uint64(0)

// runChunk is how many entries a chunk of the run holds. The run grows a
// chunk at a time, so it never copies what it holds (appending to one
// slice of a million entries copied it again at every 1.25x of growth).
const runChunk = 4096

// idRun is a sorted run of entries in chunks of runChunk, all full but the
// last; the first grows as a slice does, so that a small stream stays small.
type idRun struct {
	chunks [][]uuidEntry
	n      int
}

func (r *idRun) at(i int) *uuidEntry { return &r.chunks[i/runChunk][i%runChunk] }

// extends reports whether k sorts after every key of the run.
func (r *idRun) extends(k uuidKey) bool { return r.n == 0 || r.at(r.n-1).key.less(k) }

func (r *idRun) push(e uuidEntry) {
	last := len(r.chunks) - 1
	if last < 0 || len(r.chunks[last]) == runChunk {
		var c []uuidEntry
		if last >= 0 {
			c = make([]uuidEntry, 0, runChunk)
		}
		r.chunks = append(r.chunks, c)
		last++
	}
	r.chunks[last] = append(r.chunks[last], e)
	r.n++
}

func newIDIndex() idIndex {
	return idIndex{uuids: map[uuidKey]uint64{}, other: map[string]uint64{}}
}

// find returns where k is in the run, or -1.
func (x *idIndex) find(k uuidKey) int {
	n := x.run.n
	if x.run.extends(k) {
		return -1 // past the end: the usual case of a new ID
	}
	i := sort.Search(n, func(i int) bool { return !x.run.at(i).key.less(k) })
	if i < n && x.run.at(i).key == k && x.run.at(i).pos != removedPos {
		return i
	}
	return -1
}

// idKey is an ID as the index keys it: by its 16 bytes when canonical.
type idKey struct {
	u         uuidKey
	canonical bool
	s         string
}

func keyOf(id string) idKey {
	u, ok := parseUUID(id)
	return idKey{u, ok, id}
}

func (x *idIndex) get(id string) (uint64, bool) { return x.getKey(keyOf(id)) }

func (x *idIndex) getKey(k idKey) (uint64, bool) {
	if !k.canonical {
		v, ok := x.other[k.s]
		return v, ok
	}
	if i := x.find(k.u); i >= 0 {
		return x.run.at(i).pos, true
	}
	if len(x.uuids) == 0 {
		return 0, false
	}
	v, ok := x.uuids[k.u]
	return v, ok
}

// put records id at v; id must not be in the index.
func (x *idIndex) put(id string, v uint64) { x.putKey(keyOf(id), v) }

func (x *idIndex) putKey(k idKey, v uint64) {
	switch {
	case !k.canonical:
		x.other[k.s] = v
	case x.run.extends(k.u):
		x.run.push(uuidEntry{k.u, v})
	default:
		x.uuids[k.u] = v
	}
}

func (x *idIndex) remove(id string) {
	k, ok := parseUUID(id)
	if !ok {
		delete(x.other, id)
		return
	}
	if i := x.find(k); i >= 0 {
		x.run.at(i).pos = removedPos
		x.dead++
		return
	}
	delete(x.uuids, k)
}

func (x *idIndex) len() int { return x.run.n - x.dead + len(x.uuids) + len(x.other) }

// compacted returns a copy without removed entries, in maps sized for what
// is left (a Go map never shrinks on delete).
func (x *idIndex) compacted() idIndex {
	c := idIndex{uuids: make(map[uuidKey]uint64, len(x.uuids)), other: make(map[string]uint64, len(x.other))}
	for _, chunk := range x.run.chunks {
		for _, e := range chunk {
			if e.pos != removedPos {
				c.run.push(e)
			}
		}
	}
	for k, v := range x.uuids {
		c.uuids[k] = v
	}
	for k, v := range x.other {
		c.other[k] = v
	}
	return c
}

// parseUUID returns the 16 bytes of a canonical lower-case UUID string, as
// two big-endian words (so that keys order as the strings do).
func parseUUID(s string) (k uuidKey, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return k, false
	}
	var bad byte // any byte that is not a hex digit sets its high bits
	b := func(i int) uint64 {
		hi, lo := unhex[s[i]], unhex[s[i+1]]
		bad |= hi | lo
		return uint64(hi)<<4 | uint64(lo)
	}
	k.hi = b(0)<<56 | b(2)<<48 | b(4)<<40 | b(6)<<32 | b(9)<<24 | b(11)<<16 | b(14)<<8 | b(16)
	k.lo = b(19)<<56 | b(21)<<48 | b(24)<<40 | b(26)<<32 | b(28)<<24 | b(30)<<16 | b(32)<<8 | b(34)
	return k, bad <= 15
}

// unhex holds the value of each lower-case hex digit, and 255 for every
// other byte.
var unhex = func() (t [256]byte) {
	for c := range t {
		switch {
		case '0' <= c && c <= '9':
			t[c] = byte(c - '0')
		case 'a' <= c && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		default:
			t[c] = 255
		}
	}
	return t
}()
