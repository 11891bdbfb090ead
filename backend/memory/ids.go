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
	run   []uuidEntry        // canonical IDs appended in increasing order
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

func newIDIndex(n int) idIndex {
	return idIndex{run: make([]uuidEntry, 0, n), uuids: map[uuidKey]uint64{}, other: map[string]uint64{}}
}

// find returns where k is in the run, or -1.
func (x *idIndex) find(k uuidKey) int {
	n := len(x.run)
	if n == 0 || x.run[n-1].key.less(k) {
		return -1 // past the end: the usual case of a new ID
	}
	i := sort.Search(n, func(i int) bool { return !x.run[i].key.less(k) })
	if i < n && x.run[i].key == k && x.run[i].pos != removedPos {
		return i
	}
	return -1
}

func (x *idIndex) get(id string) (uint64, bool) {
	k, ok := parseUUID(id)
	if !ok {
		v, ok := x.other[id]
		return v, ok
	}
	if i := x.find(k); i >= 0 {
		return x.run[i].pos, true
	}
	if len(x.uuids) == 0 {
		return 0, false
	}
	v, ok := x.uuids[k]
	return v, ok
}

// put records id at v; id must not be in the index.
func (x *idIndex) put(id string, v uint64) {
	k, ok := parseUUID(id)
	switch {
	case !ok:
		x.other[id] = v
	case len(x.run) == 0 || x.run[len(x.run)-1].key.less(k):
		x.run = append(x.run, uuidEntry{k, v})
	default:
		x.uuids[k] = v
	}
}

func (x *idIndex) remove(id string) {
	k, ok := parseUUID(id)
	if !ok {
		delete(x.other, id)
		return
	}
	if i := x.find(k); i >= 0 {
		x.run[i].pos = removedPos
		x.dead++
		return
	}
	delete(x.uuids, k)
}

func (x *idIndex) len() int { return len(x.run) - x.dead + len(x.uuids) + len(x.other) }

// compacted returns a copy without removed entries, in maps sized for what
// is left (a Go map never shrinks on delete).
func (x *idIndex) compacted() idIndex {
	c := idIndex{run: make([]uuidEntry, 0, len(x.run)-x.dead), uuids: make(map[uuidKey]uint64, len(x.uuids)),
		other: make(map[string]uint64, len(x.other))}
	for _, e := range x.run {
		if e.pos != removedPos {
			c.run = append(c.run, e)
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
	for j, i := range uuidHexAt {
		hi, lo := unhex(s[i]), unhex(s[i+1])
		if hi > 15 || lo > 15 {
			return k, false
		}
		b := uint64(hi<<4 | lo)
		if j < 8 {
			k.hi |= b << (8 * (7 - j))
		} else {
			k.lo |= b << (8 * (15 - j))
		}
	}
	return k, true
}

// uuidHexAt are where the 16 bytes of a UUID string start.
var uuidHexAt = [16]int{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// unhex returns the value of a lower-case hex digit, or 255.
func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 255
}
