package rheo

import "context"

// LeaseLister is implemented by backends that can list a group's current
// leases (for dashboards and operators). Client.Leases returns
// ErrUnsupported on a backend without it.
type LeaseLister interface {
	// Leases returns up to limit deliveries of the group that are leased,
	// expired leases nobody reclaimed included, ordered by (partition,
	// sequence). eventIDs filters: nil lists every lease; a non-nil slice
	// lists only those events' deliveries, each once however often its ID
	// comes (an empty one lists none). Each Lease
	// carries ConsumerID, Attempt, LeasedAt, ExpiresAt and its Event's ID,
	// Partition and Sequence (other Event fields may be empty).
	Leases(ctx context.Context, stream, group string, eventIDs []string, limit int) ([]Lease, error)
}

// LeaseListOptions selects what Leases lists.
type LeaseListOptions struct {
	// Limit defaults to 100; at most 10,000.
	Limit int
	// EventIDs, when not nil, restricts the list to these events'
	// deliveries, each listed once however often its ID comes; an empty
	// non-nil slice lists none.
	EventIDs []string
}

// Leases lists the group's current leases by (partition, sequence), expired
// ones nobody reclaimed included. The leases are for looking at: their ID
// and Receipt are blank, so that a listing can never settle a delivery.
// With opts.EventIDs not nil, only those events' leases, each once (see
// LeaseListOptions). ErrUnsupported when the backend cannot list leases.
func (c *Client) Leases(ctx context.Context, stream, group string, opts LeaseListOptions) ([]Lease, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := checkStreamGroup(stream, group); err != nil {
		return nil, err
	}
	limit, err := checkLimit("leases", opts.Limit, 100)
	if err != nil {
		return nil, err
	}
	if len(opts.EventIDs) > MaxLimit {
		return nil, Errorf(ErrInvalidArgument, "leases of %d events: at most %d", len(opts.EventIDs), MaxLimit)
	}
	for _, e := range opts.EventIDs {
		if err := checkName("event ID", e); err != nil {
			return nil, err
		}
	}
	ll, ok := c.b.(LeaseLister)
	if !ok {
		return nil, Errorf(ErrUnsupported, "this backend cannot list leases")
	}
	// Every backend lists a repeated ID's lease once (LeaseLister), so the
	// IDs go as given.
	ls, err := ll.Leases(ctx, stream, group, opts.EventIDs, limit)
	if err != nil {
		return nil, err
	}
	for i := range ls {
		ls[i].ID, ls[i].Receipt = "", ""
		ls[i].Stream, ls[i].Group = stream, group
	}
	return ls, nil
}
