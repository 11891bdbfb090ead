// Package memory is rheo's in-process backend: every stream, group and lease
// lives in this process's memory and dies with it. It is the reference
// implementation of the rheo.Backend SPI, safe for concurrent use, and fast
// enough to run the whole conformance suite in moments.
//
// Import it for its DSN registration:
//
//	import _ "github.com/rheo-go/rheo/backend/memory"
//	client, err := rheo.Open(ctx, "memory:")
//
// Each Open("memory:") returns a new, empty store. The DSN is exactly
// "memory:": a path or parameters after it are refused.
//
// Costs: Fetch, settle and Lag are O(limit + log n) in the group's in-flight
// window, never in the stream's length. Acked deliveries at or below the
// frontier are compacted away (SPEC R9).
package memory

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/btree"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/notify"
)

func init() {
	rheo.Register("memory", openDSN)
}

// openDSN opens the DSN "memory:", which takes no path and no parameters:
// anything after the colon is refused rather than ignored.
func openDSN(_ context.Context, dsn string) (rheo.Backend, error) {
	if dsn != "memory:" {
		return nil, rheo.Errorf(rheo.ErrInvalidArgument,
			"DSN %q: the memory store takes no path or parameters; use \"memory:\" (each Open gives a new, empty store)", dsn)
	}
	return New(), nil
}

// Backend is the in-memory store. The zero value is not usable; call New.
type Backend struct {
	mu      sync.RWMutex
	closed  bool
	streams map[string]*stream

	hub notify.Hub
}

// New returns an empty in-memory store.
func New() *Backend {
	return &Backend{
		streams: map[string]*stream{},
	}
}

type pos struct {
	partition int
	seq       int64
}

// The ID index packs a position into 8 bytes, to keep the largest map of the
// store small: partitions fit in 16 bits (at most 1024), sequences in 48.
func packPos(p int, seq int64) uint64 { return uint64(p)<<48 | uint64(seq) }

func unpackPos(v uint64) pos { return pos{int(v >> 48), int64(v & (1<<48 - 1))} }

// lookup returns the position of the event with the given ID.
func (s *stream) lookup(id string) (pos, bool) {
	v, ok := s.ids.get(id)
	return unpackPos(v), ok
}

type stream struct {
	info   rheo.StreamInfo
	parts  []*plog
	ids    idIndex
	groups map[string]*group

	idDeletes  int64 // IDs deleted from ids since it was last rebuilt
	leaseOwner string
	leaseUntil time.Time
}

type group struct {
	name        string
	maxAttempts int
	parts       []*gpart
	rr          int   // rotates the first partition served, for fairness
	skipped     int64 // events trims removed before the group acked them
}

type status uint8

const (
	available status = iota + 1
	leased
	acked
	dead
)

// where says which claim index holds a non-terminal delivery.
type where uint8

const (
	inNone    where = iota
	inReady         // claimable now: available and due, or leased and expired
	inDelayed       // available at a later time
	inLeased        // leased, not seen expired yet
)

type delivery struct {
	seq         int64
	eventID     string
	status      status
	where       where
	attempt     int
	leaseID     string
	consumerID  string
	leasedAt    time.Time
	expiresAt   time.Time
	availableAt time.Time
	reason      string
	deadAt      time.Time
}

type timeKey struct {
	at  time.Time
	seq int64
}

func timeLess(a, b timeKey) bool {
	if c := a.at.Compare(b.at); c != 0 {
		return c < 0
	}
	return a.seq < b.seq
}

// gpart is a group's state in one partition. Every sequence at or below
// cursor was offered; one without a delivery record was acked and compacted
// (or lies before the group's start). The frontier is derived: the sequence
// before the lowest pending delivery, or the cursor when none is pending.
type gpart struct {
	cursor  int64
	dels    map[int64]*delivery
	pending *btree.BTreeG[int64] // available or leased
	acked   *btree.BTreeG[int64] // acked, not yet compacted
	dead    *btree.BTreeG[int64]
	ready   *btree.BTreeG[int64]
	delayed *btree.BTreeG[timeKey]
	leased  *btree.BTreeG[timeKey]

	nLeased, nAvailable int64
}

const degree = 32

func newGpart(cursor int64) *gpart {
	less := func(a, b int64) bool { return a < b }
	return &gpart{
		cursor:  cursor,
		dels:    map[int64]*delivery{},
		pending: btree.NewG(degree, less),
		acked:   btree.NewG(degree, less),
		dead:    btree.NewG(degree, less),
		ready:   btree.NewG(degree, less),
		delayed: btree.NewG(degree, timeLess),
		leased:  btree.NewG(degree, timeLess),
	}
}

func (g *gpart) frontier() int64 {
	if s, ok := g.pending.Min(); ok {
		return s - 1
	}
	return g.cursor
}

// compact drops acked records at or below the frontier (R9).
func (g *gpart) compact() {
	f := g.frontier()
	for {
		s, ok := g.acked.Min()
		if !ok || s > f {
			return
		}
		g.acked.DeleteMin()
		delete(g.dels, s)
	}
}

// unindex removes d from whichever index its status puts it in.
func (g *gpart) unindex(d *delivery) {
	switch d.where {
	case inReady:
		g.ready.Delete(d.seq)
	case inDelayed:
		g.delayed.Delete(timeKey{d.availableAt, d.seq})
	case inLeased:
		g.leased.Delete(timeKey{d.expiresAt, d.seq})
	}
	d.where = inNone
	switch d.status {
	case available:
		g.nAvailable--
		g.pending.Delete(d.seq)
	case leased:
		g.nLeased--
		g.pending.Delete(d.seq)
	case acked:
		g.acked.Delete(d.seq)
	case dead:
		g.dead.Delete(d.seq)
	}
}

// index files d under its status (and, when available, its due time).
func (g *gpart) index(d *delivery, now time.Time) {
	switch d.status {
	case available:
		g.nAvailable++
		g.pending.ReplaceOrInsert(d.seq)
		if d.availableAt.After(now) {
			d.where = inDelayed
			g.delayed.ReplaceOrInsert(timeKey{d.availableAt, d.seq})
		} else {
			d.where = inReady
			g.ready.ReplaceOrInsert(d.seq)
		}
	case leased:
		g.nLeased++
		g.pending.ReplaceOrInsert(d.seq)
		d.where = inLeased
		g.leased.ReplaceOrInsert(timeKey{d.expiresAt, d.seq})
	case acked:
		g.acked.ReplaceOrInsert(d.seq)
	case dead:
		g.dead.ReplaceOrInsert(d.seq)
	}
}

// promote moves deliveries that became claimable by now into ready. An
// expired lease whose attempt has reached maxAttempts is dead-lettered
// instead (R6): every fetch buries all the poison of the partitions it
// serves before it claims anything, the same on every backend.
func (g *gpart) promote(now time.Time, maxAttempts int) {
	for _, idx := range []*btree.BTreeG[timeKey]{g.delayed, g.leased} {
		for {
			k, ok := idx.Min()
			if !ok || k.at.After(now) {
				break
			}
			d := g.dels[k.seq]
			if d.status == leased && d.attempt >= maxAttempts {
				g.unindex(d)
				d.status, d.reason, d.deadAt, d.leaseID, d.consumerID = dead, poisonReason, now, "", ""
				g.index(d, now)
				continue
			}
			idx.DeleteMin()
			d.where = inReady
			g.ready.ReplaceOrInsert(k.seq)
		}
	}
}

// reopen makes d available again with attempts from 0 (replay, redrive).
func (g *gpart) reopen(d *delivery, now time.Time) {
	g.unindex(d)
	d.status, d.attempt = available, 0
	d.leaseID, d.consumerID = "", ""
	d.leasedAt, d.expiresAt, d.availableAt, d.deadAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	d.reason = ""
	g.index(d, now)
}

func (b *Backend) checkOpen() error {
	if b.closed {
		return rheo.Errorf(rheo.ErrBackendUnavailable, "memory backend is closed")
	}
	return nil
}

func (b *Backend) stream(name string) (*stream, error) {
	if err := b.checkOpen(); err != nil {
		return nil, err
	}
	s, ok := b.streams[name]
	if !ok {
		return nil, rheo.Errorf(rheo.ErrStreamNotFound, "stream %q", name)
	}
	return s, nil
}

func (b *Backend) group(stream, name string) (*stream, *group, error) {
	s, err := b.stream(stream)
	if err != nil {
		return nil, nil, err
	}
	g, ok := s.groups[name]
	if !ok {
		return nil, nil, rheo.Errorf(rheo.ErrGroupNotFound, "group %q of stream %q", name, stream)
	}
	return s, g, nil
}

// Ping reports whether the store is open.
func (b *Backend) Ping(context.Context) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.checkOpen()
}

// Migrate has nothing to create.
func (b *Backend) Migrate(context.Context) error { return b.Ping(context.Background()) }

// Close discards the store; later calls fail with ErrBackendUnavailable.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	b.streams = map[string]*stream{}
	b.mu.Unlock()
	return nil
}

// Subscribe implements rheo.Notifier.
func (b *Backend) Subscribe(stream string) (<-chan struct{}, func()) {
	return b.hub.Subscribe(stream)
}

func (b *Backend) notify(stream string) { b.hub.Signal(stream) }

// CreateStream implements rheo.Backend.
func (b *Backend) CreateStream(_ context.Context, info rheo.StreamInfo) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkOpen(); err != nil {
		return err
	}
	if _, ok := b.streams[info.Name]; ok {
		return rheo.Errorf(rheo.ErrAlreadyExists, "stream %q", info.Name)
	}
	b.streams[info.Name] = &stream{
		info:   info,
		parts:  newLogs(info.Name, info.Partitions),
		ids:    newIDIndex(),
		groups: map[string]*group{},
	}
	return nil
}

// Stream implements rheo.Backend.
func (b *Backend) Stream(_ context.Context, name string) (rheo.StreamState, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, err := b.stream(name)
	if err != nil {
		return rheo.StreamState{}, err
	}
	hw := make([]int64, len(s.parts))
	tt := make([]int64, len(s.parts))
	for p, l := range s.parts {
		hw[p] = l.len()
		tt[p] = l.trimmed
	}
	return rheo.StreamState{StreamInfo: s.info, HighWatermarks: hw, TrimmedThrough: tt}, nil
}

// ListStreams implements rheo.Backend.
func (b *Backend) ListStreams(context.Context) ([]rheo.StreamInfo, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.checkOpen(); err != nil {
		return nil, err
	}
	out := make([]rheo.StreamInfo, 0, len(b.streams))
	for _, s := range b.streams {
		out = append(out, s.info)
	}
	slices.SortFunc(out, func(a, b rheo.StreamInfo) int { return compareStrings(a.Name, b.Name) })
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Append implements rheo.Backend.
func (b *Backend) Append(_ context.Context, name string, evs []rheo.Event) ([]rheo.Event, error) {
	b.mu.Lock()
	s, err := b.stream(name)
	if err != nil {
		b.mu.Unlock()
		return nil, err
	}
	for i := range evs {
		if p := evs[i].Partition; p < 0 || p >= len(s.parts) {
			b.mu.Unlock()
			return nil, rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, name, len(s.parts))
		}
		if !fits(&evs[i]) {
			b.mu.Unlock()
			return nil, rheo.Errorf(rheo.ErrInvalidArgument, "event %q is over the memory store's 4 GiB limit", evs[i].ID)
		}
	}
	// The facade's slice becomes the result, updated in place; the store
	// keeps copies of its bytes, so the caller's stay the caller's.
	for i := range evs {
		e := &evs[i]
		k := keyOf(e.ID)
		if v, dup := s.ids.getKey(k); dup {
			at := unpackPos(v)
			*e = s.parts[at.partition].event(at.seq)
			continue
		}
		l := s.parts[e.Partition]
		e.Stream = name
		e.Sequence = l.len() + 1
		// Metadata is the caller's map: the store and the result get
		// copies of their own.
		e.Metadata = cloneMap(e.Metadata)
		l.append(e)
		s.ids.putKey(k, packPos(e.Partition, e.Sequence))
		e.Metadata = cloneMap(e.Metadata)
	}
	b.mu.Unlock()
	b.notify(name)
	return evs, nil
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// clone copies an event so callers cannot alter the stored one.
func clone(e rheo.Event) rheo.Event {
	e.Payload = slices.Clone(e.Payload)
	e.Metadata = cloneMap(e.Metadata)
	return e
}

// Read implements rheo.Backend.
func (b *Backend) Read(_ context.Context, name string, partition int, after int64, limit int) ([]rheo.Event, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, err := b.stream(name)
	if err != nil {
		return nil, err
	}
	if err := checkParts[int](s, name, []int{partition}, nil); err != nil {
		return nil, err
	}
	l := s.parts[partition]
	after = max(after, l.trimmed)
	if after >= l.len() { // (after+limit could overflow)
		return []rheo.Event{}, nil
	}
	end := min(after+int64(limit), l.len())
	out := make([]rheo.Event, 0, max(end-after, 0))
	for seq := after + 1; seq <= end; seq++ {
		out = append(out, l.event(seq))
	}
	return out, nil
}

// Events implements rheo.Backend.
func (b *Backend) Events(_ context.Context, name string, ids []string) ([]rheo.Event, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, err := b.stream(name)
	if err != nil {
		return nil, err
	}
	out := make([]rheo.Event, 0, len(ids))
	for _, id := range ids {
		if at, ok := s.lookup(id); ok {
			out = append(out, s.parts[at.partition].event(at.seq))
		}
	}
	return out, nil
}

// CreateGroup implements rheo.Backend.
func (b *Backend) CreateGroup(_ context.Context, spec rheo.GroupSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := b.stream(spec.Stream)
	if err != nil {
		return err
	}
	if _, ok := s.groups[spec.Group]; ok {
		return rheo.Errorf(rheo.ErrAlreadyExists, "group %q of stream %q", spec.Group, spec.Stream)
	}
	g := &group{name: spec.Group, maxAttempts: spec.MaxAttempts, parts: make([]*gpart, len(s.parts))}
	for p := range g.parts {
		g.parts[p] = newGpart(max(spec.Start[p], s.parts[p].trimmed))
	}
	s.groups[spec.Group] = g
	return nil
}

// ListGroups implements rheo.Backend.
func (b *Backend) ListGroups(_ context.Context, name string) ([]string, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, err := b.stream(name)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(s.groups))
	for g := range s.groups {
		out = append(out, g)
	}
	slices.Sort(out)
	return out, nil
}

// DeliveryCount returns how many delivery records the group holds: its
// in-flight window, dead letters, and acked records above the frontier. It
// exists so tests can check compaction (R9).
func (b *Backend) DeliveryCount(stream, group string) int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	_, g, err := b.group(stream, group)
	if err != nil {
		return 0
	}
	n := 0
	for _, gp := range g.parts {
		n += len(gp.dels)
	}
	return n
}

// checkParts refuses a partition the stream does not have: a client checks
// the partitions it names against a count it caches, which another client
// may have made out of date by creating the stream again with fewer.
func checkParts[V any](s *stream, name string, parts []int, m map[int]V) error {
	for _, p := range parts {
		if p < 0 || p >= len(s.parts) {
			return rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, name, len(s.parts))
		}
	}
	for p := range m {
		if p < 0 || p >= len(s.parts) {
			return rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, name, len(s.parts))
		}
	}
	return nil
}
