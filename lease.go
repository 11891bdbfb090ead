package rheo

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rheo-go/rheo/internal/id"
)

// FetchOptions tunes a Fetch.
type FetchOptions struct {
	// Limit is the most leases to claim; default WithFetchLimit (10), at most 10,000.
	Limit int
	// ConsumerID names the worker; a random one is generated when empty.
	ConsumerID string
	// LeaseDuration defaults to WithLeaseDuration (30s).
	LeaseDuration time.Duration
	// Partitions restricts the claim; empty means every partition.
	Partitions []int
	// Wait, when positive, blocks until something is claimable or Wait passes.
	// The wait is woken by appends, nacks, replays and redrives, not by polling.
	Wait time.Duration
}

// Lease is a group's claim that one worker may settle one delivery of one
// event, now. Settle the lease, never the event.
type Lease struct {
	// ID is the fencing token, fresh for every claim.
	ID string
	// Receipt is the backend's native claim identity (opaque). Backends
	// without one set it equal to ID.
	Receipt    string
	Stream     string
	Group      string
	ConsumerID string
	// Attempt is 1 on the first delivery and grows with every claim (but
	// for claims handed back with Release, which do not count).
	Attempt   int
	LeasedAt  time.Time
	ExpiresAt time.Time
	Event     Event
}

// NackOption tunes a Nack.
type NackOption func(*nackOptions)

type nackOptions struct {
	delay time.Duration
}

// Delay makes a nacked delivery claimable only after d has passed on the
// client's clock.
func Delay(d time.Duration) NackOption {
	return func(o *nackOptions) { o.delay = d }
}

// Fetch claims up to Limit deliveries of the group and returns their leases,
// sorted by (partition, sequence). With Wait it blocks until something is
// claimable or Wait passes (returning no leases and no error).
func (c *Client) Fetch(ctx context.Context, stream, group string, opts FetchOptions) (ls []Lease, err error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.opts.ins != nil {
		var end func(OperationResult)
		ctx, end = c.opts.ins.StartOperation(ctx, Operation{Kind: OpFetch, Stream: stream, Group: group,
			Count: opts.Limit, ConsumerID: opts.ConsumerID})
		defer func() { end(OperationResult{Leases: ls, Err: err}) }()
	}
	if err := checkStreamGroup(stream, group); err != nil {
		return nil, err
	}
	limit, err := checkLimit("fetch", opts.Limit, c.opts.fetchLimit)
	if err != nil {
		return nil, err
	}
	if opts.LeaseDuration < 0 {
		return nil, Errorf(ErrInvalidArgument, "fetch lease duration %v is negative", opts.LeaseDuration)
	}
	if opts.Wait < 0 {
		return nil, Errorf(ErrInvalidArgument, "fetch wait %v is negative", opts.Wait)
	}
	opts.LeaseDuration = normDuration(opts.LeaseDuration)
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = c.opts.leaseDuration
	}
	if opts.ConsumerID == "" {
		opts.ConsumerID = "consumer-" + id.Token()[:8]
	} else if err := checkName("consumer", opts.ConsumerID); err != nil {
		return nil, err
	}
	var parts []int
	_, err = c.checkPartitions(ctx, stream, func(n int) (err error) {
		parts, err = scope(stream, opts.Partitions, n)
		return err
	})
	if err != nil {
		return nil, err
	}
	req := FetchRequest{
		Stream: stream, Group: group, ConsumerID: opts.ConsumerID,
		Partitions: parts, Limit: limit, LeaseDuration: opts.LeaseDuration,
		NewLeaseID: id.Token,
	}
	fetch := func() ([]Lease, error) {
		req.Now = c.now()
		ls, err := c.b.Fetch(ctx, req)
		if len(opts.Partitions) == 0 && errors.Is(err, ErrInvalidPartition) {
			// Every partition of a cached count that another process
			// has made out of date, creating the stream again with
			// fewer: fetch from every partition it has.
			c.streams.Delete(stream)
			n, err := c.partitionCount(ctx, stream)
			if err != nil {
				return nil, err
			}
			req.Partitions, _ = scope(stream, nil, n)
			req.Now = c.now()
			return c.b.Fetch(ctx, req)
		}
		return ls, err
	}
	if opts.Wait <= 0 {
		return fetch()
	}
	// Subscribe before the first attempt so that a change between an empty
	// fetch and the wait is not lost.
	changed, cancel := c.subscribe(stream)
	defer cancel()
	deadline := time.NewTimer(opts.Wait)
	defer deadline.Stop()
	poll := fallbackPoll
	if changed != nil {
		poll = notifiedPoll
	}
	for {
		leases, err := fetch()
		if err != nil || len(leases) > 0 {
			return leases, err
		}
		tick := time.NewTimer(poll)
		select {
		case <-changed:
		case <-tick.C:
		case <-deadline.C:
			tick.Stop()
			return nil, nil
		case <-ctx.Done():
			tick.Stop()
			return nil, ctx.Err()
		}
		tick.Stop()
	}
}

// Waits re-check at these intervals besides notifications: rarely when the
// backend notifies (delayed nacks become due without a signal), and at a
// modest rate when it cannot.
const (
	notifiedPoll = time.Second
	fallbackPoll = 100 * time.Millisecond
)

// checkReason refuses a nack's or reject's reason that not every store
// can keep verbatim: one that is not UTF-8 or holds a NUL byte.
func checkReason(op, reason string) error {
	if !utf8.ValidString(reason) {
		return Errorf(ErrInvalidArgument, "%s reason %q is not valid UTF-8; pass text (strings.ToValidUTF8 replaces the bad bytes)", op, reason)
	}
	if strings.IndexByte(reason, 0) >= 0 {
		return Errorf(ErrInvalidArgument, "%s reason %q contains a NUL byte; remove it", op, reason)
	}
	return nil
}

// storedReason is the reason the consumer runtime stores for a handler's
// error message: the message with U+FFFD in place of what checkReason
// refuses (each run of bytes that is not UTF-8, each NUL), so that any
// error a handler returns settles its lease, the same way on every store.
func storedReason(msg string) string {
	if utf8.ValidString(msg) && strings.IndexByte(msg, 0) < 0 {
		return msg
	}
	return strings.ReplaceAll(strings.ToValidUTF8(msg, "\uFFFD"), "\x00", "\uFFFD")
}

func checkStreamGroup(stream, group string) error {
	if err := checkName("stream", stream); err != nil {
		return err
	}
	return checkName("group", group)
}

// checkLease validates the parts of a lease a caller could have forged or
// truncated, before anything reaches the backend.
func (c *Client) checkLease(ctx context.Context, l Lease) error {
	if err := checkStreamGroup(l.Stream, l.Group); err != nil {
		return err
	}
	if !id.ValidToken(l.ID) {
		return Errorf(ErrInvalidArgument, "lease ID %q is malformed", l.ID)
	}
	if l.Receipt == "" {
		return Errorf(ErrInvalidArgument, "lease %s has no receipt", l.ID)
	}
	if len(l.Receipt) > MaxNameBytes {
		return Errorf(ErrInvalidArgument, "lease %s receipt is %d bytes (max %d)", l.ID, len(l.Receipt), MaxNameBytes)
	}
	if err := checkName("event ID", l.Event.ID); err != nil {
		return Wrap(ErrInvalidArgument, err, "lease %s", l.ID)
	}
	if l.Event.Sequence < 1 {
		return Errorf(ErrInvalidArgument, "lease %s: event sequence %d", l.ID, l.Event.Sequence)
	}
	_, err := c.checkPartitions(ctx, l.Stream, func(n int) error {
		if l.Event.Partition < 0 || l.Event.Partition >= n {
			return Errorf(ErrInvalidPartition, "lease %s: partition %d of stream %q (it has %d)", l.ID, l.Event.Partition, l.Stream, n)
		}
		return nil
	})
	return err
}

// Renew extends the lease to now+d (d 0 means the default lease duration)
// and returns it with the new ExpiresAt. Only the current lease renews.
func (c *Client) Renew(ctx context.Context, l Lease, d time.Duration) (_ Lease, err error) {
	if err := c.check(); err != nil {
		return l, err
	}
	if c.opts.ins != nil {
		var end func(OperationResult)
		ctx, end = c.opts.ins.StartOperation(ctx, Operation{Kind: OpRenew, Stream: l.Stream, Group: l.Group, Count: 1, Lease: l})
		defer func() { end(OperationResult{Err: err}) }()
	}
	if d < 0 {
		return l, Errorf(ErrInvalidArgument, "renew duration %v is negative", d)
	}
	if d == 0 {
		d = c.opts.leaseDuration
	}
	if err := c.checkLease(ctx, l); err != nil {
		return l, err
	}
	now := c.now()
	exp := now.Add(normDuration(d))
	if err := c.b.Renew(ctx, l, exp, now); err != nil {
		return l, err
	}
	l.ExpiresAt = exp
	return l, nil
}

// Ack marks the lease's delivery done. A stale lease is ErrStaleLease.
func (c *Client) Ack(ctx context.Context, l Lease) error {
	return c.settleOne(ctx, SettleRequest{Kind: SettleAck, Lease: l})
}

// Nack returns the delivery for another attempt (after Delay, if given), or
// dead-letters it with reason "max_attempts: <reason>" at the group's limit.
func (c *Client) Nack(ctx context.Context, l Lease, reason string, opts ...NackOption) error {
	var o nackOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.delay < 0 {
		return Errorf(ErrInvalidArgument, "nack delay %v is negative", o.delay)
	}
	if err := checkReason("nack", reason); err != nil {
		return err
	}
	return c.settleOne(ctx, SettleRequest{Kind: SettleNack, Lease: l, Reason: reason, AvailableAt: c.now().Add(normDuration(o.delay))})
}

// Reject dead-letters the delivery for this group only, storing reason.
func (c *Client) Reject(ctx context.Context, l Lease, reason string) error {
	if err := checkReason("reject", reason); err != nil {
		return err
	}
	return c.settleOne(ctx, SettleRequest{Kind: SettleReject, Lease: l, Reason: reason})
}

// Release hands the delivery back unhandled: available again at once, the
// claim not counted as an attempt (the next lease of it has l's Attempt),
// never dead-lettered. Use it for a lease whose event no handler has
// started on, such as work prefetched by a worker that is shutting down;
// an event released again and again is never dead-lettered, so a handler
// that failed should Nack instead. A stale lease is ErrStaleLease.
func (c *Client) Release(ctx context.Context, l Lease) error {
	return c.settleOne(ctx, SettleRequest{Kind: SettleRelease, Lease: l})
}

func (c *Client) settleOne(ctx context.Context, r SettleRequest) (err error) {
	if err := c.check(); err != nil {
		return err
	}
	if c.opts.ins != nil {
		kind := OpAck
		switch r.Kind {
		case SettleNack:
			kind = OpNack
		case SettleReject:
			kind = OpReject
		case SettleRelease:
			kind = OpRelease
		}
		var end func(OperationResult)
		ctx, end = c.opts.ins.StartOperation(ctx, Operation{Kind: kind, Stream: r.Lease.Stream, Group: r.Lease.Group, Count: 1, Lease: r.Lease})
		defer func() {
			res := OperationResult{Err: err, Settles: []SettleRequest{r}, SettleErrs: []error{err}}
			res.MaxAttempts = c.nackLimit(ctx, r.Lease.Stream, r.Lease.Group, res.Settles, res.SettleErrs)
			end(res)
		}()
	}
	if err := c.checkLease(ctx, r.Lease); err != nil {
		return err
	}
	errs, err := c.b.Settle(ctx, r.Lease.Stream, r.Lease.Group, []SettleRequest{r}, c.now())
	if err != nil {
		return err
	}
	return errs[0]
}

// AckBatch acks many leases, in as few backend calls as their (stream,
// group) pairs allow. When any lease is not acked it returns a *BatchError
// holding one error per lease, in order.
func (c *Client) AckBatch(ctx context.Context, ls []Lease) (err error) {
	if err := c.check(); err != nil {
		return err
	}
	reqs := make([]SettleRequest, len(ls))
	for i, l := range ls {
		reqs[i] = SettleRequest{Kind: SettleAck, Lease: l}
	}
	if c.opts.ins != nil && len(ls) > 0 {
		var end func(OperationResult)
		ctx, end = c.opts.ins.StartOperation(ctx, Operation{Kind: OpAck, Stream: ls[0].Stream, Group: ls[0].Group, Count: len(ls)})
		defer func() {
			res := OperationResult{Err: err, Settles: reqs, SettleErrs: make([]error, len(reqs))}
			if be, ok := err.(*BatchError); ok {
				copy(res.SettleErrs, be.Errs)
			}
			end(res)
		}()
	}
	return c.settleBatch(ctx, reqs)
}

// settleBatch settles requests grouped by (stream, group); errors come back
// per request, in input order.
func (c *Client) settleBatch(ctx context.Context, reqs []SettleRequest) error {
	errs := make([]error, len(reqs))
	failed := false
	type key struct{ stream, group string }
	var order []key
	groups := map[key][]int{}
	for i, r := range reqs {
		if err := c.checkLease(ctx, r.Lease); err != nil {
			errs[i], failed = err, true
			continue
		}
		k := key{r.Lease.Stream, r.Lease.Group}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	now := c.now()
	for _, k := range order {
		idx := groups[k]
		batch := reqs // every request, in order: the usual AckBatch of a fetch
		if len(idx) < len(reqs) {
			batch = make([]SettleRequest, len(idx))
			for j, i := range idx {
				batch[j] = reqs[i]
			}
		}
		res, err := c.b.Settle(ctx, k.stream, k.group, batch, now)
		for j, i := range idx {
			switch {
			case err != nil:
				errs[i] = err
			default:
				errs[i] = res[j]
			}
			if errs[i] != nil {
				failed = true
			}
		}
	}
	if failed {
		return &BatchError{Errs: errs}
	}
	return nil
}
