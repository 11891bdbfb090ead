package redis

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/rheo-go/rheo"
	"github.com/rheo-go/rheo/internal/leaseerr"
)

// run calls a script on the stream whose key base is base; base is always
// ARGV[1].
func (b *Backend) run(ctx context.Context, s *goredis.Script, base string, args ...any) (any, error) {
	return b.eval(ctx, s, []string{b.metaKey(base)}, append([]any{base}, args...)...)
}

// CreateStream implements rheo.Backend.
func (b *Backend) CreateStream(ctx context.Context, s rheo.StreamInfo) error {
	base := b.streamBase(s.Name)
	reg := strconv.Itoa(s.Partitions) + ":" + micros(s.CreatedAt)
	_, err := b.run(ctx, createStreamScript, base, s.Partitions, micros(s.CreatedAt))
	for scriptCode(err) == codeIDsGone {
		// A stream deleted under the name left buckets of its ID index:
		// they go before the new stream can have buckets of the same names.
		if err = b.cleanIDs(ctx, base); err == nil {
			_, err = b.run(ctx, createStreamScript, base, s.Partitions, micros(s.CreatedAt))
		}
	}
	if scriptCode(err) == codeExists {
		// The stream exists; make sure the registry lists it even if an
		// earlier CreateStream stopped between the two writes.
		b.c.HSetNX(ctx, b.registryKey(), s.Name, reg)
		return rheo.Errorf(rheo.ErrAlreadyExists, "stream %q", s.Name)
	}
	if err != nil {
		return b.writeErr(err, "create stream %q", s.Name)
	}
	if !s.Retention.IsZero() {
		if err := b.SetRetention(ctx, s.Name, s.Retention); err != nil {
			return err
		}
	}
	// The registry lives in another hash slot, so it is written separately.
	if err := b.hset(ctx, b.registryKey(), s.Name, reg); err != nil {
		return b.writeErr(err, "create stream %q: registry", s.Name)
	}
	return nil
}

// Stream implements rheo.Backend.
func (b *Backend) Stream(ctx context.Context, stream string) (rheo.StreamState, error) {
	v, err := b.run(ctx, streamStateScript, b.streamBase(stream))
	if err != nil {
		if nf := notFound(err, stream, ""); nf != nil {
			return rheo.StreamState{}, nf
		}
		return rheo.StreamState{}, b.readErr(err, "stream %q", stream)
	}
	r := v.([]any)
	n, err1 := toInt(r[0])
	created, err2 := toInt(r[1])
	if err1 != nil || err2 != nil {
		return rheo.StreamState{}, rheo.Errorf(rheo.ErrBackendUnavailable, "redis: stream %q has a malformed meta hash", stream)
	}
	st := rheo.StreamState{
		StreamInfo:     rheo.StreamInfo{Name: stream, Partitions: int(n), CreatedAt: fromMicros(created)},
		HighWatermarks: make([]int64, n),
	}
	for p, hw := range flatMap(r[2]) {
		i, err := strconv.Atoi(p)
		if err == nil && i >= 0 && i < int(n) {
			st.HighWatermarks[i], _ = strconv.ParseInt(hw, 10, 64)
		}
	}
	if err := b.retentionState(ctx, &st); err != nil {
		return rheo.StreamState{}, err
	}
	return st, nil
}

// ListStreams implements rheo.Backend.
func (b *Backend) ListStreams(ctx context.Context) ([]rheo.StreamInfo, error) {
	m, err := b.c.HGetAll(ctx, b.registryKey()).Result()
	if err != nil {
		return nil, b.readErr(err, "list streams")
	}
	out := make([]rheo.StreamInfo, 0, len(m))
	for name, v := range m {
		ns, cs, _ := strings.Cut(v, ":")
		n, _ := strconv.Atoi(ns)
		c, _ := strconv.ParseInt(cs, 10, 64)
		out = append(out, rheo.StreamInfo{Name: name, Partitions: n, CreatedAt: fromMicros(c)})
	}
	// Retention policies live in each stream's meta hash (its own slot).
	pipe := b.c.Pipeline()
	cmds := make([]*goredis.SliceCmd, len(out))
	for i, s := range out {
		cmds[i] = pipe.HMGet(ctx, b.metaKey(b.streamBase(s.Name)), "max_age", "max_events", "interest")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, goredis.Nil) {
		return nil, b.readErr(err, "list streams")
	}
	for i := range out {
		v := cmds[i].Val()
		if len(v) == 3 {
			age, _ := strconv.ParseInt(toStr(v[0]), 10, 64)
			maxEvents, _ := strconv.ParseInt(toStr(v[1]), 10, 64)
			out[i].Retention = rheo.Retention{MaxAge: time.Duration(age), MaxEvents: maxEvents, Interest: toStr(v[2]) == "1"}
		}
	}
	slices.SortFunc(out, func(a, b rheo.StreamInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Append implements rheo.Backend: one script assigns the sequences and
// writes the entries and the ID index, so a batch is all or nothing.
//
// The events go to the script grouped by partition (in input order within
// each partition), each as its ID and its packed entry, all packed entries
// in one buffer: see appendScript for why.
func (b *Backend) Append(ctx context.Context, stream string, events []rheo.Event) ([]rheo.Event, error) {
	if len(events) == 0 {
		return []rheo.Event{}, nil
	}
	groups, order := byPartition(len(events), func(i int) int { return events[i].Partition })
	size := 0
	for _, e := range events {
		size += len(e.ID) + len(e.Type) + len(e.Key) + len(e.Payload) + 48
	}
	base := b.streamBase(stream)
	args := make([]any, 0, 2+2*len(groups)+2*len(events))
	args = append(args, base, len(groups))
	for _, g := range groups {
		args = append(args, g.p, g.n)
	}
	for _, i := range order {
		args = append(args, events[i].ID)
	}
	buf := make([]byte, 0, size)
	for _, i := range order {
		e := events[i]
		meta, err := encodeMeta(e.Metadata)
		if err != nil {
			return nil, rheo.Wrap(rheo.ErrInvalidArgument, err, "event %q metadata", e.ID)
		}
		start := len(buf)
		buf = appendEntry(buf, e, meta)
		// A full-slice expression, so a later append that outgrows buf
		// cannot change what this argument refers to.
		args = append(args, buf[start:len(buf):len(buf)])
	}
	v, err := b.eval(ctx, appendScript, []string{b.metaKey(base)}, args...)
	if err != nil {
		if nf := notFound(err, stream, ""); nf != nil {
			return nil, nf
		}
		if scriptCode(err) == codeNoPart {
			return nil, noPartition(err, stream)
		}
		return nil, b.writeErr(err, "append to stream %q", stream)
	}
	malformed := func() error {
		return rheo.Errorf(rheo.ErrAmbiguous, "redis: append to stream %q: malformed reply", stream)
	}
	r, ok := v.([]any)
	if !ok || len(r) != len(events) && len(r) != len(groups) {
		return nil, malformed()
	}
	// The slice belongs to the call (see rheo.Backend): write into it.
	// The reply's length tells its two shapes apart; when every partition
	// group holds one event they have the same length and mean the same
	// (a group's first sequence is its one event's), so the per-event
	// reading below serves both.
	if len(r) != len(events) {
		// Every event was new: each group's first sequence.
		k := 0
		for gi, g := range groups {
			first, ok := r[gi].(int64)
			if !ok {
				return nil, malformed()
			}
			for j := range g.n {
				events[order[k]].Sequence = first + int64(j)
				k++
			}
		}
		return events, nil
	}
	for k, x := range r {
		i := order[k]
		if seq, ok := x.(int64); ok {
			events[i].Sequence = seq
			continue
		}
		e, err := decodeRow(stream, x)
		if err != nil {
			return nil, rheo.Wrap(rheo.ErrAmbiguous, err, "redis: append to stream %q", stream)
		}
		events[i] = e
	}
	return events, nil
}

// Read implements rheo.Backend.
func (b *Backend) Read(ctx context.Context, stream string, partition int, after int64, limit int) ([]rheo.Event, error) {
	after = min(after, math.MaxInt64-1) // no entry lies past it; after+1 must not overflow
	v, err := b.run(ctx, readScript, b.streamBase(stream), partition, entryID(after+1), limit)
	if err != nil {
		if nf := notFound(err, stream, ""); nf != nil {
			return nil, nf
		}
		return nil, b.readErr(err, "read stream %q partition %d", stream, partition)
	}
	evs, err := decodeEntries(stream, partition, v)
	if err != nil {
		return nil, rheo.Wrap(rheo.ErrBackendUnavailable, err, "redis: read stream %q", stream)
	}
	if evs == nil {
		evs = []rheo.Event{}
	}
	return evs, nil
}

// Events implements rheo.Backend.
func (b *Backend) Events(ctx context.Context, stream string, ids []string) ([]rheo.Event, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	v, err := b.run(ctx, eventsScript, b.streamBase(stream), args...)
	if err != nil {
		if nf := notFound(err, stream, ""); nf != nil {
			return nil, nf
		}
		return nil, b.readErr(err, "events of stream %q", stream)
	}
	rows, _ := v.([]any)
	out := make([]rheo.Event, 0, len(rows))
	for _, row := range rows {
		e, err := decodeRow(stream, row)
		if err != nil {
			return nil, rheo.Wrap(rheo.ErrBackendUnavailable, err, "redis: events of stream %q", stream)
		}
		out = append(out, e)
	}
	return out, nil
}

// CreateGroup implements rheo.Backend: one Redis consumer group per
// partition stream, starting at the entry after Start[p].
func (b *Backend) CreateGroup(ctx context.Context, g rheo.GroupSpec) error {
	base := b.streamBase(g.Stream)
	n := len(g.Start)
	args := make([]any, 0, 5+n)
	args = append(args, groupBase(base, g.Group), g.Group, strconv.Itoa(g.MaxAttempts)+":"+micros(g.CreatedAt), n)
	for p := range n {
		args = append(args, g.Start[p])
	}
	_, err := b.run(ctx, createGroupScript, base, args...)
	if err != nil {
		if scriptCode(err) == codeExists {
			return rheo.Errorf(rheo.ErrAlreadyExists, "group %q of stream %q", g.Group, g.Stream)
		}
		if nf := notFound(err, g.Stream, g.Group); nf != nil {
			return nf
		}
		return b.writeErr(err, "create group %q of stream %q", g.Group, g.Stream)
	}
	return nil
}

// ListGroups implements rheo.Backend.
func (b *Backend) ListGroups(ctx context.Context, stream string) ([]string, error) {
	v, err := b.run(ctx, listGroupsScript, b.streamBase(stream))
	if err != nil {
		if nf := notFound(err, stream, ""); nf != nil {
			return nil, nf
		}
		return nil, b.readErr(err, "list groups of stream %q", stream)
	}
	a, _ := v.([]any)
	out := make([]string, 0, len(a))
	for _, x := range a {
		out = append(out, toStr(x))
	}
	slices.Sort(out)
	return out, nil
}

// Fetch implements rheo.Backend with one script call: due deliveries
// (expired leases, nacked and reopened ones) of each partition first, in
// sequence order, then new entries through XREADGROUP; the limit is shared
// across partitions starting from one that rotates between fetches (in this
// process; fairness does not need agreement between processes).
func (b *Backend) Fetch(ctx context.Context, r rheo.FetchRequest) ([]rheo.Lease, error) {
	return b.fetch(ctx, fetchScript, r)
}

// prefix reports whether parts are 0, 1, ..., len(parts)-1 in order.
func prefix(parts []int) bool {
	for i, p := range parts {
		if p != i {
			return false
		}
	}
	return true
}

// fetch is Fetch with the script to run (the tests run an instrumented
// copy of fetchScript).
func (b *Backend) fetch(ctx context.Context, script *goredis.Script, r rheo.FetchRequest) ([]rheo.Lease, error) {
	base := b.streamBase(r.Stream)
	k := len(r.Partitions)
	now := r.Now.UnixMicro()
	// A lease must end after now, or the claim would be due at once.
	exp := max(r.Now.Add(r.LeaseDuration).UnixMicro(), now+1)
	args := make([]any, 0, 7+k+r.Limit)
	gb := groupBase(base, r.Group)
	step := b.rotate(gb)
	off := step % k
	if prefix(r.Partitions) {
		// Partitions 0 to k-1 (a fetch from every partition): the script
		// makes the list (see fetchScript).
		args = append(args, gb, r.Group, now, exp, r.Limit, -k, off)
	} else {
		args = append(args, gb, r.Group, now, exp, r.Limit, k)
		for i := range k {
			args = append(args, r.Partitions[(off+i)%k])
		}
	}
	leaseIDs := make([]string, r.Limit)
	for i := range leaseIDs {
		leaseIDs[i] = r.NewLeaseID()
		args = append(args, leaseIDs[i])
	}
	args = append(args, r.ConsumerID)
	v, err := b.run(ctx, script, base, args...)
	if err != nil {
		b.unrotate(gb, step)
		if nf := notFound(err, r.Stream, r.Group); nf != nil {
			return nil, nf
		}
		return nil, b.writeErr(err, "fetch from group %q of stream %q", r.Group, r.Stream)
	}
	malformed := func(err error) error {
		if err == nil {
			return rheo.Errorf(rheo.ErrAmbiguous, "redis: fetch from group %q of stream %q: malformed reply", r.Group, r.Stream)
		}
		return rheo.Wrap(rheo.ErrAmbiguous, err, "redis: fetch from group %q of stream %q", r.Group, r.Stream)
	}
	flat, _ := v.([]any)
	leasedAt, expiresAt := fromMicros(now), fromMicros(exp)
	out := make([]rheo.Lease, 0, r.Limit)
	lease := func(p int, seq int64, id string, att int64, fields any) error {
		e, err := decodeEvent(r.Stream, p, seq, fields)
		if err != nil {
			return malformed(err)
		}
		out = append(out, rheo.Lease{
			ID: id, Receipt: entryID(seq), Stream: r.Stream, Group: r.Group,
			ConsumerID: r.ConsumerID, Attempt: int(att), LeasedAt: leasedAt, ExpiresAt: expiresAt, Event: e,
		})
		return nil
	}
	// Runs of claims per partition (see fetchScript): fresh entries as
	// (seq, fields) pairs, leased with the lease IDs from index first on,
	// or rows of deliveries claimed again. A partition's runs come in
	// sequence order, each in sequence order, so decoding the runs by
	// partition (stably) yields the leases sorted, without moving them.
	type run struct{ p, at int }
	runs := make([]run, 0, len(flat)/3)
	for i := 0; i+2 < len(flat); i += 3 {
		p, err := toInt(flat[i])
		if err != nil {
			return nil, malformed(nil)
		}
		runs = append(runs, run{int(p), i})
	}
	slices.SortStableFunc(runs, func(a, b run) int { return cmp.Compare(a.p, b.p) })
	for _, rn := range runs {
		i, p := rn.at, rn.p
		first, err := toInt(flat[i+1])
		data, ok := flat[i+2].([]any)
		if err != nil || !ok || first < 0 || (first > 0 && (len(data)%2 != 0 || first-1+int64(len(data)/2) > int64(len(leaseIDs)))) {
			return nil, malformed(nil)
		}
		if first == 0 {
			for j := 0; j+3 < len(data); j += 4 {
				seq, err1 := toInt(data[j])
				att, err2 := toInt(data[j+2])
				if err1 != nil || err2 != nil {
					return nil, malformed(nil)
				}
				if err := lease(p, seq, toStr(data[j+1]), att, data[j+3]); err != nil {
					return nil, err
				}
			}
			continue
		}
		for j := 0; j+1 < len(data); j += 2 {
			seq, err := strconv.ParseInt(toStr(data[j]), 10, 64)
			if err != nil {
				return nil, malformed(nil)
			}
			if err := lease(p, seq, leaseIDs[int(first)-1+j/2], 1, data[j+1]); err != nil {
				return nil, err
			}
		}
	}
	byPosition := func(a, b rheo.Lease) int {
		if c := cmp.Compare(a.Event.Partition, b.Event.Partition); c != 0 {
			return c
		}
		return cmp.Compare(a.Event.Sequence, b.Event.Sequence)
	}
	if !slices.IsSortedFunc(out, byPosition) { // (not expected: see above)
		slices.SortFunc(out, byPosition)
	}
	return out, nil
}

func leaseErr(code int64, l rheo.Lease) error {
	switch code {
	case 0:
		return nil
	case 2:
		return leaseerr.Mismatch(l)
	}
	return leaseerr.Stale(l)
}

// Renew implements rheo.Backend.
func (b *Backend) Renew(ctx context.Context, l rheo.Lease, expiresAt, _ time.Time) error {
	base := b.streamBase(l.Stream)
	v, err := b.run(ctx, renewScript, base, groupBase(base, l.Group), l.Group,
		l.Event.Partition, l.Event.Sequence, l.ID, l.Receipt, expiresAt.UnixMicro(), l.Event.ID)
	if err != nil {
		if nf := notFound(err, l.Stream, l.Group); nf != nil {
			return nf
		}
		return b.writeErr(err, "renew lease %s in group %q of stream %q", l.ID, l.Group, l.Stream)
	}
	code, _ := v.(int64)
	return leaseErr(code, l)
}

// settleKnown refuses the requests of an unknown kind (ErrInvalidArgument,
// nothing written for them, as on every backend) and settles the others.
func (b *Backend) settleKnown(ctx context.Context, stream, group string, reqs []rheo.SettleRequest, now time.Time) ([]error, error) {
	errs := make([]error, len(reqs))
	var known []rheo.SettleRequest
	var at []int
	for i, r := range reqs {
		if errs[i] = r.CheckKind(); errs[i] != nil {
			continue
		}
		known, at = append(known, r), append(at, i)
	}
	// With nothing left, the empty batch still reports a missing stream or
	// group, as every backend does.
	res, err := b.Settle(ctx, stream, group, known, now)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		errs[i] = res[j]
	}
	return errs, nil
}

// Settle implements rheo.Backend: the whole batch is one script.
//
// The requests go to the script grouped by partition (in request order
// within each partition, as Append sends events), as three lists: their
// sequences, their lease IDs and their event IDs; what is not an ack with
// its own receipt follows by index. See settleScript.
func (b *Backend) Settle(ctx context.Context, stream, group string, reqs []rheo.SettleRequest, now time.Time) ([]error, error) {
	for _, r := range reqs {
		if r.CheckKind() != nil {
			return b.settleKnown(ctx, stream, group, reqs, now)
		}
	}
	// A partition whose requests name one position twice is flagged: the
	// script then follows its own writes there.
	type pos struct {
		p   int
		seq int64
	}
	repeats := make(map[int]bool)
	seen := make(map[pos]struct{}, len(reqs))
	for _, r := range reqs {
		k := pos{r.Lease.Event.Partition, r.Lease.Event.Sequence}
		if _, dup := seen[k]; dup {
			repeats[k.p] = true
		}
		seen[k] = struct{}{}
	}
	parts, order := byPartition(len(reqs), func(i int) int { return reqs[i].Lease.Event.Partition })
	base := b.streamBase(stream)
	args := make([]any, 0, 4+3*len(parts)+3*len(reqs))
	args = append(args, groupBase(base, group), group, micros(now), len(reqs), len(parts))
	for _, g := range parts {
		flag := 0
		if repeats[g.p] {
			flag = 1
		}
		args = append(args, g.p, g.n, flag)
	}
	for _, i := range order {
		args = append(args, reqs[i].Lease.Event.Sequence)
	}
	for _, i := range order {
		args = append(args, reqs[i].Lease.ID)
	}
	for _, i := range order {
		args = append(args, reqs[i].Lease.Event.ID)
	}
	for k, i := range order {
		r := reqs[i]
		switch {
		case r.Lease.Receipt != entryID(r.Lease.Event.Sequence):
			args = append(args, k+1, "x") // refused with ErrReceiptMismatch unless the lease is stale
		case r.Kind == rheo.SettleNack:
			args = append(args, k+1, "n", r.AvailableAt.UnixMicro(), r.Reason)
		case r.Kind == rheo.SettleReject:
			args = append(args, k+1, "r", r.Reason)
		case r.Kind == rheo.SettleRelease:
			// Due at the settle's now; the reason is ignored.
			args = append(args, k+1, "l")
		}
	}
	v, err := b.run(ctx, settleScript, base, args...)
	if err != nil {
		if nf := notFound(err, stream, group); nf != nil {
			return nil, nf
		}
		return nil, b.writeErr(err, "settle in group %q of stream %q", group, stream)
	}
	codes, _ := v.([]any)
	if len(codes) != len(reqs) {
		return nil, rheo.Errorf(rheo.ErrAmbiguous, "redis: settle in group %q of stream %q: malformed reply", group, stream)
	}
	errs := make([]error, len(reqs))
	for k, c := range codes {
		code, _ := c.(int64)
		i := order[k]
		errs[i] = leaseErr(code, reqs[i].Lease)
	}
	return errs, nil
}

// Lag implements rheo.Backend: the script checks the group and finds the
// lowest reopened sequences; the high watermarks and the frontiers, a
// field per partition each, are read in the same transaction by HGETALL
// (HMGET of the partitions asked for), so that they reach the client
// without a passage through Lua (which turns each field into a Lua string
// and back, the bulk of a lag read on many partitions).
func (b *Backend) Lag(ctx context.Context, stream, group string, partitions []int) ([]rheo.PartitionLag, error) {
	base := b.streamBase(stream)
	gb := groupBase(base, group)
	keys := []string{b.metaKey(base)}
	var fields []string
	if partitions != nil {
		fields = make([]string, len(partitions))
		for i, p := range partitions {
			fields[i] = strconv.Itoa(p)
		}
	}
	var sc *goredis.Cmd
	var hw, fr func() map[string]string
	var err error
	for attempt := range 2 {
		pipe := b.c.TxPipeline()
		if attempt == 0 {
			sc = lagScript.EvalSha(ctx, pipe, keys, base, gb, group)
		} else {
			sc = lagScript.Eval(ctx, pipe, keys, base, gb, group)
		}
		hw, fr = hashFields(ctx, pipe, base+"hw", fields), hashFields(ctx, pipe, gb+"f", fields)
		_, err = pipe.Exec(ctx)
		if err == nil || attempt > 0 || !goredis.HasErrorPrefix(sc.Err(), "NOSCRIPT") {
			break
		}
	}
	if err == nil {
		err = sc.Err()
	}
	if err != nil {
		if nf := notFound(err, stream, group); nf != nil {
			return nil, nf
		}
		return nil, b.readErr(err, "lag of group %q of stream %q", group, stream)
	}
	r, _ := sc.Val().([]any)
	if len(r) != 2 {
		return nil, rheo.Errorf(rheo.ErrBackendUnavailable, "redis: lag of group %q of stream %q: malformed reply", group, stream)
	}
	n, _ := toInt(r[0])
	// out holds every partition, or those asked for that the stream has
	// (sorted); at finds a partition's place in it.
	var out []rheo.PartitionLag
	at := func(p int64) *rheo.PartitionLag {
		if p < 0 || p >= n {
			return nil
		}
		if partitions == nil {
			return &out[p]
		}
		i, ok := slices.BinarySearchFunc(out, int(p), func(l rheo.PartitionLag, p int) int { return l.Partition - p })
		if !ok {
			return nil
		}
		return &out[i]
	}
	if partitions == nil {
		out = make([]rheo.PartitionLag, n)
		for p := range out {
			out[p].Partition = p
		}
	} else {
		out = make([]rheo.PartitionLag, 0, len(partitions))
		for _, p := range partitions {
			if int64(p) < n {
				out = append(out, rheo.PartitionLag{Partition: p})
			}
		}
	}
	set := func(m map[string]string, set func(l *rheo.PartitionLag, x int64)) {
		for k, v := range m {
			p, err1 := strconv.ParseInt(k, 10, 64)
			x, err2 := strconv.ParseInt(v, 10, 64)
			if l := at(p); err1 == nil && err2 == nil && l != nil {
				set(l, x)
			}
		}
	}
	set(hw(), func(l *rheo.PartitionLag, x int64) { l.HighWatermark = x })
	set(fr(), func(l *rheo.PartitionLag, x int64) { l.Frontier = x })
	// Flat (partition, lowest reopened sequence m) pairs: m bounds the
	// frontier below it.
	a, _ := r[1].([]any)
	for i := 0; i+1 < len(a); i += 2 {
		p, err1 := toInt(a[i])
		m, err2 := toInt(a[i+1])
		if l := at(p); err1 == nil && err2 == nil && l != nil {
			l.Frontier = min(l.Frontier, m-1)
		}
	}
	return out, nil
}

// hashFields queues on pipe a read of the hash at key, of every field
// (fields nil) or of those given, and returns what will read the result,
// field by field, once pipe has run.
func hashFields(ctx context.Context, pipe goredis.Pipeliner, key string, fields []string) func() map[string]string {
	if fields == nil {
		c := pipe.HGetAll(ctx, key)
		return c.Val
	}
	c := pipe.HMGet(ctx, key, fields...)
	return func() map[string]string {
		m := make(map[string]string, len(fields))
		for i, v := range c.Val() {
			if s, ok := v.(string); ok {
				m[fields[i]] = s
			}
		}
		return m
	}
}

// GroupStats implements rheo.Backend.
func (b *Backend) GroupStats(ctx context.Context, stream, group string, _ time.Time) (rheo.GroupStats, error) {
	base := b.streamBase(stream)
	v, err := b.run(ctx, groupStatsScript, base, groupBase(base, group), group)
	if err != nil {
		if nf := notFound(err, stream, group); nf != nil {
			return rheo.GroupStats{}, nf
		}
		return rheo.GroupStats{}, b.readErr(err, "stats of group %q of stream %q", group, stream)
	}
	r := v.([]any)
	in, _ := toInt(r[0])
	av, _ := toInt(r[1])
	dl, _ := toInt(r[2])
	ma, _ := toInt(r[3])
	sk, err := b.groupSkipped(ctx, stream, group)
	if err != nil {
		return rheo.GroupStats{}, b.readErr(err, "stats of group %q of stream %q", group, stream)
	}
	return rheo.GroupStats{Inflight: in, Available: av, DeadLetters: dl, Skipped: sk, MaxAttempts: int(ma)}, nil
}

// DeadLetters implements rheo.Backend.
func (b *Backend) DeadLetters(ctx context.Context, stream, group, after string, limit int) ([]rheo.DeadLetter, error) {
	base := b.streamBase(stream)
	v, err := b.run(ctx, deadLettersScript, base, groupBase(base, group), group, after, limit)
	if err != nil {
		if scriptCode(err) == codeNoCursor {
			return nil, rheo.Errorf(rheo.ErrCursorNotFound, "event %q is not a dead letter of group %q of stream %q", after, group, stream)
		}
		if nf := notFound(err, stream, group); nf != nil {
			return nil, nf
		}
		return nil, b.readErr(err, "dead letters of group %q of stream %q", group, stream)
	}
	rows, _ := v.([]any)
	out := make([]rheo.DeadLetter, 0, len(rows))
	for _, row := range rows {
		r, _ := row.([]any)
		if len(r) != 4 {
			return nil, rheo.Errorf(rheo.ErrBackendUnavailable, "redis: dead letters of group %q: malformed reply", group)
		}
		e, err := decodeRow(stream, []any{r[0], r[1], r[3]})
		if err != nil {
			return nil, rheo.Wrap(rheo.ErrBackendUnavailable, err, "redis: dead letters of group %q", group)
		}
		att, rest, _ := strings.Cut(toStr(r[2]), ":")
		at, reason, _ := strings.Cut(rest, ":")
		n, _ := strconv.Atoi(att)
		ts, _ := strconv.ParseInt(at, 10, 64)
		out = append(out, rheo.DeadLetter{
			EventID: e.ID, Partition: e.Partition, Sequence: e.Sequence, Attempts: n,
			Reason: reason, DeadLetteredAt: fromMicros(ts), Event: e,
		})
	}
	return out, nil
}

// Replay implements rheo.Backend.
func (b *Backend) Replay(ctx context.Context, r rheo.ReplayRequest) (int, error) {
	base := b.streamBase(r.Stream)
	args := make([]any, 0, 5+2*len(r.FromSequence)+2*len(r.Events))
	args = append(args, groupBase(base, r.Group), r.Group, len(r.FromSequence))
	for _, p := range slices.Sorted(maps.Keys(r.FromSequence)) {
		args = append(args, p, r.FromSequence[p])
	}
	args = append(args, len(r.Events))
	for _, e := range r.Events {
		args = append(args, e.Partition, e.Sequence)
	}
	v, err := b.run(ctx, replayScript, base, args...)
	if err != nil {
		if nf := notFound(err, r.Stream, r.Group); nf != nil {
			return 0, nf
		}
		return 0, b.writeErr(err, "replay group %q of stream %q", r.Group, r.Stream)
	}
	n, _ := toInt(v)
	return int(n), nil
}

// Redrive implements rheo.Backend. Each call of the script reopens at most
// 1000 dead letters atomically; a redrive of more takes several calls.
func (b *Backend) Redrive(ctx context.Context, stream, group string, ids []string) (int, error) {
	base := b.streamBase(stream)
	gb := groupBase(base, group)
	call := func(args ...any) (int, error) {
		v, err := b.run(ctx, redriveScript, base, append([]any{gb, group}, args...)...)
		if err != nil {
			if nf := notFound(err, stream, group); nf != nil {
				return 0, nf
			}
			return 0, b.writeErr(err, "redrive group %q of stream %q", group, stream)
		}
		n, _ := v.(int64)
		return int(n), nil
	}
	total := 0
	if len(ids) == 0 {
		for {
			n, err := call("all")
			total += n
			if err != nil || n < 1000 {
				return total, err
			}
		}
	}
	for chunk := range slices.Chunk(ids, 1000) {
		args := make([]any, 0, 1+len(chunk))
		args = append(args, "ids")
		for _, id := range chunk {
			args = append(args, id)
		}
		n, err := call(args...)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// ResetGroup implements rheo.Backend.
func (b *Backend) ResetGroup(ctx context.Context, stream, group string, start map[int]int64) (int, error) {
	base := b.streamBase(stream)
	args := make([]any, 0, 3+2*len(start))
	args = append(args, groupBase(base, group), group, len(start))
	for _, p := range slices.Sorted(maps.Keys(start)) {
		args = append(args, p, start[p])
	}
	v, err := b.run(ctx, resetScript, base, args...)
	if err != nil {
		if nf := notFound(err, stream, group); nf != nil {
			return 0, nf
		}
		return 0, b.writeErr(err, "reset group %q of stream %q", group, stream)
	}
	n, _ := toInt(v)
	return int(n), nil
}

// rotate returns the index of the partition a group's next fetch serves
// first: the first fetch starts with the first requested partition, each
// later one a partition further, like every backend.
// (It returns the group's step count; the partition is that modulo the
// partitions requested.)
func (b *Backend) rotate(group string) int {
	b.rrMu.Lock()
	defer b.rrMu.Unlock()
	n := b.rr[group]
	b.rr[group] = n + 1
	return n
}

// unrotate takes back step, that of a fetch that claimed nothing because
// it failed (a missing group, say), unless another fetch has stepped
// since: a fetch that fails does not count.
func (b *Backend) unrotate(group string, step int) {
	b.rrMu.Lock()
	defer b.rrMu.Unlock()
	if b.rr[group] == step+1 {
		b.rr[group] = step
	}
}

// forgetRotation drops the rotation of the groups under base (a group's
// base, or a stream's: every group of it), deleted by this process, so
// that a group created again under the name starts with the first
// partition, as a new group does on every backend.
func (b *Backend) forgetRotation(base string) {
	b.rrMu.Lock()
	defer b.rrMu.Unlock()
	for g := range b.rr {
		if strings.HasPrefix(g, base) {
			delete(b.rr, g)
		}
	}
}

// partGroup is a run of a batch's items in one partition: n of them.
type partGroup struct{ p, n int }

// byPartition groups items 0..n-1 by partition, partitions in order of
// first appearance and items in input order within each: order[k] is the
// input index of the k-th item sent.
func byPartition(n int, partOf func(i int) int) ([]partGroup, []int) {
	groups := make([]partGroup, 0, 8)
	gi := make(map[int]int, 8)
	for i := range n {
		p := partOf(i)
		g, ok := gi[p]
		if !ok {
			g = len(groups)
			gi[p] = g
			groups = append(groups, partGroup{p: p})
		}
		groups[g].n++
	}
	next := make([]int, len(groups))
	at := 0
	for g := range groups {
		next[g] = at
		at += groups[g].n
	}
	order := make([]int, n)
	for i := range n {
		g := gi[partOf(i)]
		order[next[g]] = i
		next[g]++
	}
	return groups, order
}
