package mongo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"slices"
	"sort"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/leaseerr"
)

// groupDoc describes a group. Like a stream, every creation gets a fresh
// token that keys its state chains.
type groupDoc struct {
	ID          string  `bson:"_id"`
	Stream      string  `bson:"st"`
	Group       string  `bson:"g"`
	Tok         string  `bson:"tok"`
	StreamTok   string  `bson:"stok"`
	MaxAttempts int     `bson:"ma"`
	Start       []int64 `bson:"start"`
	StartTrim   []int64 `bson:"strim"`
	CreatedAt   int64   `bson:"ca"`
}

func (g *groupDoc) base(p int) string { return key("g", g.Stream, g.Group, g.Tok, itoa(int64(p))) }

// Delivery statuses.
const (
	stAvailable = iota + 1
	stLeased
	stAcked
	stDead
)

// delivery is one event's state in a group.
type delivery struct {
	Seq         int64  `bson:"s"`
	EventID     string `bson:"e"`
	Status      int    `bson:"x"`
	Attempt     int    `bson:"a"`
	Lease       string `bson:"l,omitempty"`
	Consumer    string `bson:"c,omitempty"`
	LeasedAt    int64  `bson:"la,omitempty"`
	ExpiresAt   int64  `bson:"ea,omitempty"`
	AvailableAt int64  `bson:"av,omitempty"`
	Reason      string `bson:"r,omitempty"`
	DeadAt      int64  `bson:"da,omitempty"`
}

// pstate is one version of a group's state in one partition: the cursor
// (every sequence at or below it was offered) and the deliveries that are
// pending, dead, or acked above the frontier, sorted by sequence. Version 0
// is implicit: the group's start and no deliveries.
type pstate struct {
	ID     string `bson:"_id"`
	Stream string `bson:"st"`
	Group  string `bson:"g"`
	GTok   string `bson:"gt"`
	Tok    string `bson:"tok"`
	Gone   bool   `bson:"gone,omitempty"`
	Cursor int64  `bson:"cur"`
	// Skipped counts events trims removed that the group had not acked.
	Skipped int64 `bson:"sk,omitempty"`
	// Trimmed is the partition's trimmed point this version has applied.
	Trimmed int64      `bson:"tr,omitempty"`
	Dels    []delivery `bson:"d"`
}

func (s *pstate) find(seq int64) *delivery {
	i, ok := slices.BinarySearchFunc(s.Dels, seq, func(d delivery, seq int64) int { return cmpInt(d.Seq, seq) })
	if !ok {
		return nil
	}
	return &s.Dels[i]
}

func (s *pstate) put(d delivery) {
	i, ok := slices.BinarySearchFunc(s.Dels, d.Seq, func(d delivery, seq int64) int { return cmpInt(d.Seq, seq) })
	if ok {
		s.Dels[i] = d
		return
	}
	s.Dels = slices.Insert(s.Dels, i, d)
}

// frontier is the sequence before the lowest pending delivery, or the
// cursor when none is pending.
func (s *pstate) frontier() int64 {
	for _, d := range s.Dels {
		if d.Status == stAvailable || d.Status == stLeased {
			return d.Seq - 1
		}
	}
	return s.Cursor
}

// compact drops acked deliveries at or below the frontier (R9).
func (s *pstate) compact() {
	f := s.frontier()
	s.Dels = slices.DeleteFunc(s.Dels, func(d delivery) bool { return d.Status == stAcked && d.Seq <= f })
}

// reopen makes d available at once, whatever the clock reads (a due time
// of 0 would lie in the future for a clock before 1970).
func reopen(d *delivery) {
	*d = delivery{Seq: d.Seq, EventID: d.EventID, Status: stAvailable, AvailableAt: math.MinInt64}
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func newToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// group loads a stream and one of its groups; a missing stream is reported
// before a missing group.
func (b *Backend) group(ctx context.Context, stream, name string) (*streamDoc, *groupDoc, error) {
	s, err := b.stream(ctx, stream)
	if err != nil {
		return nil, nil, err
	}
	var g groupDoc
	found, err := findByID(ctx, b.groups, key(stream, name), &g)
	if err != nil {
		return nil, nil, readErr(err, "read group %q of stream %q", name, stream)
	}
	if !found || g.StreamTok != s.Tok {
		return nil, nil, rheo.Errorf(rheo.ErrGroupNotFound, "group %q of stream %q", name, stream)
	}
	return s, &g, nil
}

// CreateGroup implements rheo.Backend: the insert of the group's document
// decides who created it.
func (b *Backend) CreateGroup(ctx context.Context, spec rheo.GroupSpec) error {
	s, err := b.stream(ctx, spec.Stream)
	if err != nil {
		return err
	}
	start := make([]int64, s.Partitions)
	trims := make([]int64, s.Partitions)
	for p := range start {
		t, err := b.trimmed(ctx, s.Name, s.Tok, p)
		if err != nil {
			return err
		}
		start[p], trims[p] = max(spec.Start[p], t), t
	}
	g := groupDoc{
		ID: key(spec.Stream, spec.Group), Stream: spec.Stream, Group: spec.Group, Tok: newToken(), StreamTok: s.Tok,
		MaxAttempts: spec.MaxAttempts, Start: start, StartTrim: trims, CreatedAt: toMicros(spec.CreatedAt),
	}
	if _, err := b.groups.InsertOne(ctx, g); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return rheo.Errorf(rheo.ErrAlreadyExists, "group %q of stream %q", spec.Group, spec.Stream)
		}
		return writeErr(err, "create group %q on stream %q", spec.Group, spec.Stream)
	}
	return nil
}

// ListGroups implements rheo.Backend (through the index on the stream name).
func (b *Backend) ListGroups(ctx context.Context, stream string) ([]string, error) {
	s, err := b.stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	cur, err := b.groups.Find(ctx, bson.D{{Key: "st", Value: stream}})
	if err != nil {
		return nil, readErr(err, "list groups of stream %q", stream)
	}
	var docs []groupDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, readErr(err, "list groups of stream %q", stream)
	}
	out := make([]string, 0, len(docs))
	for _, g := range docs {
		if g.StreamTok == s.Tok {
			out = append(out, g.Group)
		}
	}
	sort.Strings(out)
	return out, nil
}

// state reads the current state of group g in partition p.
//
// The partition's trimmed point is applied to the state it returns (see
// applyTrim); trimmed reports how many events that removed from the group
// (skipped: not acked; dead: dead letters) and dirty whether the state
// differs from the stored version.
func (b *Backend) state(ctx context.Context, g *groupDoc, p int) (int64, *pstate, error) {
	v, st, _, err := b.stateTrimmed(ctx, g, p)
	return v, st, err
}

func (b *Backend) stateTrimmed(ctx context.Context, g *groupDoc, p int) (int64, *pstate, trimApplied, error) {
	t, err := b.trimmed(ctx, g.Stream, g.StreamTok, p)
	if err != nil {
		return 0, nil, trimApplied{}, err
	}
	st := &pstate{}
	v, err := b.head(ctx, b.states, g.base(p), st)
	if err != nil {
		return 0, nil, trimApplied{}, readErr(err, "read state of group %q partition %d", g.Group, p)
	}
	if v == 0 {
		st = &pstate{Cursor: g.Start[p], Trimmed: g.StartTrim[p]}
	}
	return v, st, st.applyTrim(t), nil
}

// trimApplied is what applying a trim to a group's state removed.
type trimApplied struct {
	dirty         bool
	skipped, dead int64
}

// applyTrim makes the state forget everything at or below the partition's
// trimmed point t: deliveries are dropped (those not acked count as
// skipped), and a cursor below t skips the never-offered range (counted
// too). Trims are applied lazily, by whoever reads the state next, so a
// trim needs no transaction across groups.
func (s *pstate) applyTrim(t int64) trimApplied {
	var out trimApplied
	if t <= s.Trimmed {
		return out
	}
	out.dirty = true
	s.Dels = slices.DeleteFunc(s.Dels, func(d delivery) bool {
		if d.Seq > t {
			return false
		}
		if d.Status != stAcked {
			out.skipped++
		}
		if d.Status == stDead {
			out.dead++
		}
		return true
	})
	if s.Cursor < t {
		out.skipped += t - max(s.Cursor, s.Trimmed)
		s.Cursor = t
	}
	s.Skipped += out.skipped
	s.Trimmed = t
	return out
}

// stubLag is how many versions behind the head a state version is emptied.
// Emptied versions keep their _id (so nobody can ever write them again) and
// shed their deliveries, which bounds a chain's storage by a few bytes per
// change.
const stubLag = 3

// change applies fn to the current state of g in partition p and writes the
// result as the next version. The insert is the decision: when another
// writer created that version first (duplicate key), change reads the new
// head and runs fn again, so fn must compute everything it reports afresh on
// each call. fn returns false when nothing is to be written.
func (b *Backend) change(ctx context.Context, g *groupDoc, p int, fn func(st *pstate) (bool, error)) error {
	_, err := b.changeApplied(ctx, g, p, fn)
	return err
}

// changeApplied is change, reporting what applying the partition's trimmed
// point removed in the version it wrote (nothing when another writer
// applied it first).
func (b *Backend) changeApplied(ctx context.Context, g *groupDoc, p int, fn func(st *pstate) (bool, error)) (trimApplied, error) {
	base := g.base(p)
	for attempt := 0; ; attempt++ {
		v, st, applied, err := b.stateTrimmed(ctx, g, p)
		if err != nil {
			return trimApplied{}, err
		}
		write, err := fn(st)
		if err != nil || !(write || applied.dirty) {
			return trimApplied{}, err
		}
		st.ID, st.Stream, st.Group, st.GTok, st.Tok, st.Gone = versionID(base, v+1), g.Stream, g.Group, g.Tok, newToken(), false
		if st.Dels == nil {
			st.Dels = []delivery{}
		}
		if _, err := b.states.InsertOne(ctx, st); err != nil {
			if mongo.IsDuplicateKeyError(err) {
				if err := backoff(ctx, attempt); err != nil {
					return trimApplied{}, readErr(err, "update group %q partition %d", g.Group, p)
				}
				continue
			}
			return trimApplied{}, writeErr(err, "update group %q partition %d", g.Group, p)
		}
		b.sawHead(ctx, base, v+1, true)
		if old := v + 1 - stubLag; old >= 1 {
			_, _ = b.states.UpdateOne(ctx, byID(versionID(base, old)),
				bson.D{{Key: "$set", Value: bson.D{{Key: "gone", Value: true}, {Key: "d", Value: bson.A{}}}}})
		}
		return applied, nil
	}
}

const poisonReason = "max_attempts: lease expired"

// Fetch implements rheo.Backend. Each partition's claims are one new state
// version; the limit is shared across partitions round-robin from a
// partition that rotates between this process's fetches.
func (b *Backend) Fetch(ctx context.Context, r rheo.FetchRequest) ([]rheo.Lease, error) {
	s, g, err := b.group(ctx, r.Stream, r.Group)
	if err != nil {
		return nil, err
	}
	n, hw, err := b.batchHead(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := b.materialize(ctx, s, n); err != nil {
		return nil, err
	}
	if err := checkParts[int](s, r.Partitions, nil); err != nil {
		return nil, err
	}
	cache := b.newBatchCache(s)
	k := len(r.Partitions)
	b.rrMu.Lock()
	rrKey := key(r.Stream, r.Group)
	rot := b.rr[rrKey]
	if rot.tok != g.Tok { // a group created again under the name starts over
		rot = rotation{tok: g.Tok}
	}
	first := rot.n % k
	b.rr[rrKey] = rotation{tok: g.Tok, n: rot.n + 1}
	b.rrMu.Unlock()
	quota := (r.Limit + k - 1) / k
	var leases []rheo.Lease
	exhausted := make([]bool, k)
	for pass := 0; len(leases) < r.Limit; pass++ {
		progress := false
		for i := range k {
			if len(leases) >= r.Limit {
				break
			}
			j := (first + i) % k
			if exhausted[j] {
				continue
			}
			want := min(quota, r.Limit-len(leases))
			if pass > 0 {
				want = r.Limit - len(leases)
			}
			got, err := b.claim(ctx, s, g, cache, r.Partitions[j], want, hw[r.Partitions[j]], r)
			if err != nil {
				if len(leases) > 0 {
					// Leases already claimed stay claimed; return them
					// rather than leave them to expire.
					break
				}
				b.unrotate(rrKey, g.Tok, rot.n)
				return nil, err
			}
			leases = append(leases, got...)
			if len(got) < want {
				exhausted[j] = true
			} else if len(got) > 0 {
				progress = true
			}
		}
		if !progress {
			break
		}
	}
	slices.SortFunc(leases, func(a, b rheo.Lease) int {
		if a.Event.Partition != b.Event.Partition {
			return a.Event.Partition - b.Event.Partition
		}
		return cmpInt(a.Event.Sequence, b.Event.Sequence)
	})
	if leases == nil {
		leases = []rheo.Lease{}
	}
	return leases, nil
}

// unrotate takes back step n of a group's rotation, that of a fetch that
// claimed nothing because it failed, unless another fetch has stepped
// since: a fetch that fails does not count.
func (b *Backend) unrotate(rrKey, tok string, n int) {
	b.rrMu.Lock()
	defer b.rrMu.Unlock()
	if b.rr[rrKey] == (rotation{tok: tok, n: n + 1}) {
		b.rr[rrKey] = rotation{tok: tok, n: n}
	}
}

// claim claims up to want deliveries of partition p: claimable ones below
// the cursor first, then events not offered yet, all in sequence order.
func (b *Backend) claim(ctx context.Context, s *streamDoc, g *groupDoc, cache *batchCache, p, want int, hw int64, r rheo.FetchRequest) ([]rheo.Lease, error) {
	now := r.Now.UnixMicro()
	var claimed []delivery
	events := map[int64]rheo.Event{}
	err := b.change(ctx, g, p, func(st *pstate) (bool, error) {
		claimed = claimed[:0]
		write := false
		// Every poison delivery of the partition is buried first, whatever
		// the limit; then claimable ones go in sequence order.
		for i := range st.Dels {
			d := &st.Dels[i]
			if d.Status == stLeased && d.ExpiresAt <= now && d.Attempt >= g.MaxAttempts {
				d.Status, d.Reason, d.DeadAt, d.Lease, d.Consumer = stDead, poisonReason, now, "", ""
				write = true
			}
		}
		for i := range st.Dels {
			if len(claimed) >= want {
				break
			}
			d := &st.Dels[i]
			if (d.Status == stLeased && d.ExpiresAt <= now) || (d.Status == stAvailable && d.AvailableAt <= now) {
				b.lease(d, r)
				claimed = append(claimed, *d)
			}
		}
		if len(claimed) < want && st.Cursor < hw {
			to := min(hw, st.Cursor+int64(want-len(claimed)))
			evs, err := cache.readRange(ctx, p, st.Cursor+1, to)
			if err != nil {
				return false, err
			}
			for _, e := range evs {
				events[e.Sequence] = e
				d := delivery{Seq: e.Sequence, EventID: e.ID}
				b.lease(&d, r)
				st.Dels = append(st.Dels, d)
				claimed = append(claimed, d)
			}
			st.Cursor = to
		}
		st.compact()
		return write || len(claimed) > 0, nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]rheo.Lease, 0, len(claimed))
	for _, d := range claimed {
		e, ok := events[d.Seq]
		if !ok {
			evs, err := cache.readRange(ctx, p, d.Seq, d.Seq)
			if err != nil {
				return nil, err
			}
			e = evs[0]
		}
		out = append(out, rheo.Lease{
			ID: d.Lease, Receipt: d.Lease, Stream: r.Stream, Group: r.Group, ConsumerID: d.Consumer,
			Attempt: d.Attempt, LeasedAt: r.Now, ExpiresAt: r.Now.Add(r.LeaseDuration), Event: e,
		})
	}
	return out, nil
}

func (b *Backend) lease(d *delivery, r rheo.FetchRequest) {
	d.Status = stLeased
	d.Attempt++
	d.Lease = r.NewLeaseID()
	d.Consumer = r.ConsumerID
	d.LeasedAt = r.Now.UnixMicro()
	d.ExpiresAt = r.Now.Add(r.LeaseDuration).UnixMicro()
	d.AvailableAt = 0
}

// current returns the delivery lease l holds in st, or a fencing error.
func current(st *pstate, group string, l rheo.Lease) (*delivery, error) {
	d := st.find(l.Event.Sequence)
	if d == nil || d.Status != stLeased || d.Lease != l.ID || d.EventID != l.Event.ID {
		return nil, leaseerr.Stale(l)
	}
	if l.Receipt != d.Lease {
		return nil, leaseerr.Mismatch(l)
	}
	return d, nil
}

// Renew implements rheo.Backend.
func (b *Backend) Renew(ctx context.Context, l rheo.Lease, expiresAt, now time.Time) error {
	s, g, err := b.group(ctx, l.Stream, l.Group)
	if err != nil {
		return err
	}
	p := l.Event.Partition
	if p < 0 || p >= s.Partitions {
		return leaseerr.Stale(l)
	}
	return b.change(ctx, g, p, func(st *pstate) (bool, error) {
		d, err := current(st, g.Group, l)
		if err != nil {
			return false, err
		}
		d.ExpiresAt = expiresAt.UnixMicro()
		return true, nil
	})
}

// Settle implements rheo.Backend: one new state version per partition
// touched. A request of an unknown kind is refused (ErrInvalidArgument)
// up front: it takes no part in any state version.
func (b *Backend) Settle(ctx context.Context, stream, group string, reqs []rheo.SettleRequest, now time.Time) ([]error, error) {
	s, g, err := b.group(ctx, stream, group)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(reqs))
	byPart := map[int][]int{}
	for i, r := range reqs {
		if errs[i] = r.CheckKind(); errs[i] != nil {
			continue
		}
		p := r.Lease.Event.Partition
		if p < 0 || p >= s.Partitions {
			errs[i] = leaseerr.Stale(r.Lease)
			continue
		}
		byPart[p] = append(byPart[p], i)
	}
	parts := make([]int, 0, len(byPart))
	for p := range byPart {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	wake := false
	for _, p := range parts {
		idx := byPart[p]
		nackedHere := false
		err := b.change(ctx, g, p, func(st *pstate) (bool, error) {
			write := false
			nackedHere = false
			for _, i := range idx {
				r := reqs[i]
				d, err := current(st, group, r.Lease)
				errs[i] = err
				if err != nil {
					continue
				}
				write = true
				d.Lease, d.Consumer = "", ""
				switch r.Kind {
				case rheo.SettleAck:
					d.Status = stAcked
				case rheo.SettleReject:
					d.Status, d.Reason, d.DeadAt = stDead, r.Reason, now.UnixMicro()
				case rheo.SettleNack:
					if d.Attempt >= g.MaxAttempts {
						d.Status, d.Reason, d.DeadAt = stDead, "max_attempts: "+r.Reason, now.UnixMicro()
					} else {
						d.Status, d.Reason, d.AvailableAt = stAvailable, r.Reason, toMicros(r.AvailableAt)
						nackedHere = true
					}
				case rheo.SettleRelease:
					// Handed back unhandled: due at once, the claim not
					// counted, the reason kept, never dead-lettered.
					d.Status, d.AvailableAt = stAvailable, toMicros(now)
					d.Attempt--
					nackedHere = true
				}
			}
			st.compact()
			return write, nil
		})
		if err != nil {
			for _, i := range idx {
				errs[i] = err
			}
			continue
		}
		wake = wake || nackedHere
	}
	if wake {
		b.hub.Signal(stream)
	}
	return errs, nil
}

// Lag implements rheo.Backend.
func (b *Backend) Lag(ctx context.Context, stream, group string, partitions []int) ([]rheo.PartitionLag, error) {
	s, g, err := b.group(ctx, stream, group)
	if err != nil {
		return nil, err
	}
	_, hw, err := b.batchHead(ctx, s)
	if err != nil {
		return nil, err
	}
	if partitions == nil {
		partitions = make([]int, s.Partitions)
		for p := range partitions {
			partitions[p] = p
		}
	}
	out := make([]rheo.PartitionLag, 0, len(partitions))
	for _, p := range partitions {
		if p < 0 || p >= s.Partitions {
			continue // the stream has fewer partitions now
		}
		_, st, err := b.state(ctx, g, p)
		if err != nil {
			return nil, err
		}
		out = append(out, rheo.PartitionLag{Partition: p, Frontier: st.frontier(), HighWatermark: hw[p]})
	}
	return out, nil
}

// GroupStats implements rheo.Backend.
func (b *Backend) GroupStats(ctx context.Context, stream, group string, _ time.Time) (rheo.GroupStats, error) {
	s, g, err := b.group(ctx, stream, group)
	if err != nil {
		return rheo.GroupStats{}, err
	}
	_, hw, err := b.batchHead(ctx, s)
	if err != nil {
		return rheo.GroupStats{}, err
	}
	var out rheo.GroupStats
	for p := range s.Partitions {
		_, st, err := b.state(ctx, g, p)
		if err != nil {
			return rheo.GroupStats{}, err
		}
		for _, d := range st.Dels {
			switch d.Status {
			case stLeased:
				out.Inflight++
			case stAvailable:
				out.Available++
			case stDead:
				out.DeadLetters++
			}
		}
		out.Available += max(hw[p]-st.Cursor, 0)
		out.Skipped += st.Skipped
	}
	out.MaxAttempts = g.MaxAttempts
	return out, nil
}

// DeadLetters implements rheo.Backend.
func (b *Backend) DeadLetters(ctx context.Context, stream, group, after string, limit int) ([]rheo.DeadLetter, error) {
	s, g, err := b.group(ctx, stream, group)
	if err != nil {
		return nil, err
	}
	n, _, err := b.batchHead(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := b.materialize(ctx, s, n); err != nil {
		return nil, err
	}
	cache := b.newBatchCache(s)
	startP, startSeq := 0, int64(0)
	if after != "" {
		e, err := cache.byID(ctx, after)
		if err != nil {
			return nil, err
		}
		ok := false
		if e != nil {
			_, st, err := b.state(ctx, g, e.Partition)
			if err != nil {
				return nil, err
			}
			d := st.find(e.Sequence)
			ok = d != nil && d.Status == stDead
		}
		if !ok {
			return nil, rheo.Errorf(rheo.ErrCursorNotFound, "event %q is not a dead letter of group %q of stream %q", after, group, stream)
		}
		startP, startSeq = e.Partition, e.Sequence+1
	}
	out := []rheo.DeadLetter{}
	for p := startP; p < s.Partitions && len(out) < limit; p++ {
		from := int64(0)
		if p == startP {
			from = startSeq
		}
		_, st, err := b.state(ctx, g, p)
		if err != nil {
			return nil, err
		}
		for _, d := range st.Dels {
			if len(out) >= limit {
				break
			}
			if d.Status != stDead || d.Seq < from {
				continue
			}
			evs, err := cache.readRange(ctx, p, d.Seq, d.Seq)
			if err != nil {
				return nil, err
			}
			out = append(out, rheo.DeadLetter{
				EventID: d.EventID, Partition: p, Sequence: d.Seq, Attempts: d.Attempt,
				Reason: d.Reason, DeadLetteredAt: fromMicros(d.DeadAt), Event: evs[0],
			})
		}
	}
	return out, nil
}

// Replay implements rheo.Backend: one new state version per partition.
func (b *Backend) Replay(ctx context.Context, r rheo.ReplayRequest) (int, error) {
	s, g, err := b.group(ctx, r.Stream, r.Group)
	if err == nil {
		err = checkParts(s, nil, r.FromSequence)
	}
	if err != nil {
		return 0, err
	}
	total := 0
	refs := map[int][]rheo.EventRef{}
	for _, ref := range r.Events {
		refs[ref.Partition] = append(refs[ref.Partition], ref)
	}
	if err := checkParts(s, nil, refs); err != nil {
		return 0, err
	}
	for p := range s.Partitions {
		from, rewind := r.FromSequence[p]
		if !rewind && len(refs[p]) == 0 {
			continue
		}
		n := 0
		err := b.change(ctx, g, p, func(st *pstate) (bool, error) {
			n = 0
			if rewind {
				from := max(from, st.Trimmed)
				st.Dels = slices.DeleteFunc(st.Dels, func(d delivery) bool { return d.Seq > from })
				n += int(max(st.Cursor-from, 0))
				st.Cursor = min(st.Cursor, from)
			}
			for _, ref := range refs[p] {
				if ref.Sequence > st.Cursor || ref.Sequence <= st.Trimmed {
					continue // not offered yet (it will be, fresh), or trimmed away
				}
				n++
				d := st.find(ref.Sequence)
				if d == nil {
					st.put(delivery{Seq: ref.Sequence, EventID: ref.ID, Status: stAvailable, AvailableAt: math.MinInt64})
					continue
				}
				reopen(d)
			}
			return true, nil
		})
		if err != nil {
			return total, err
		}
		total += n
	}
	b.hub.Signal(r.Stream)
	return total, nil
}

// Redrive implements rheo.Backend.
func (b *Backend) Redrive(ctx context.Context, stream, group string, ids []string) (int, error) {
	s, g, err := b.group(ctx, stream, group)
	if err != nil {
		return 0, err
	}
	var want map[int]map[int64]bool // nil: every dead letter
	if len(ids) > 0 {
		if want, _, err = b.positions(ctx, s, ids); err != nil {
			return 0, err
		}
	}
	total := 0
	for p := range s.Partitions {
		if want != nil && want[p] == nil {
			continue
		}
		n := 0
		err := b.change(ctx, g, p, func(st *pstate) (bool, error) {
			n = 0
			for i := range st.Dels {
				d := &st.Dels[i]
				if d.Status == stDead && (want == nil || want[p][d.Seq]) {
					reopen(d)
					n++
				}
			}
			return n > 0, nil
		})
		if err != nil {
			return total, err
		}
		total += n
	}
	if total > 0 {
		b.hub.Signal(stream)
	}
	return total, nil
}

// ResetGroup implements rheo.Backend.
func (b *Backend) ResetGroup(ctx context.Context, stream, group string, start map[int]int64) (int, error) {
	s, g, err := b.group(ctx, stream, group)
	if err == nil {
		err = checkParts(s, nil, start)
	}
	if err != nil {
		return 0, err
	}
	total := 0
	parts := make([]int, 0, len(start))
	for p := range start {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	for _, p := range parts {
		n := 0
		err := b.change(ctx, g, p, func(st *pstate) (bool, error) {
			from := max(start[p], st.Trimmed)
			n = int(max(st.Cursor-from, 0))
			st.Cursor, st.Dels = from, nil
			return true, nil
		})
		if err != nil {
			return total, err
		}
		total += n
	}
	b.hub.Signal(stream)
	return total, nil
}

// checkParts refuses a partition the stream does not have: a client checks
// the partitions it names against a count it caches, which another client
// may have made out of date by creating the stream again with fewer.
func checkParts[V any](s *streamDoc, parts []int, m map[int]V) error {
	bad := func(p int) error {
		return rheo.Errorf(rheo.ErrInvalidPartition, "partition %d of stream %q (it has %d)", p, s.Name, s.Partitions)
	}
	for _, p := range parts {
		if p < 0 || p >= s.Partitions {
			return bad(p)
		}
	}
	for p := range m {
		if p < 0 || p >= s.Partitions {
			return bad(p)
		}
	}
	return nil
}
