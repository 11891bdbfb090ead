package redis

import (
	"context"
	"strconv"
	"strings"

	"github.com/rheo-go/rheo"
)

var _ rheo.LeaseLister = (*Backend)(nil)

// Leases implements rheo.LeaseLister with one script call. The consumer ID
// and claim time come from the lease itself (or, for a lease claimed by an
// earlier version, from the claim record it wrote beside the lease); a
// lease claimed before either existed lists without them.
func (b *Backend) Leases(ctx context.Context, stream, group string, eventIDs []string, limit int) ([]rheo.Lease, error) {
	base := b.streamBase(stream)
	args := make([]any, 0, 4+len(eventIDs))
	// nil lists every lease (-1); an empty, non-nil list lists none.
	m := len(eventIDs)
	if eventIDs == nil {
		m = -1
	}
	args = append(args, groupBase(base, group), group, limit, m)
	for _, id := range eventIDs {
		args = append(args, id)
	}
	v, err := b.run(ctx, leasesScript, base, args...)
	if err != nil {
		if nf := notFound(err, stream, group); nf != nil {
			return nil, nf
		}
		return nil, b.readErr(err, "leases of group %q of stream %q", group, stream)
	}
	rows, _ := v.([]any)
	out := make([]rheo.Lease, 0, len(rows))
	for _, row := range rows {
		r, _ := row.([]any)
		if len(r) != 6 {
			return nil, rheo.Errorf(rheo.ErrBackendUnavailable, "redis: leases of group %q: malformed reply", group)
		}
		e, err := decodeRow(stream, []any{r[0], r[1], r[5]})
		if err != nil {
			return nil, rheo.Wrap(rheo.ErrBackendUnavailable, err, "redis: leases of group %q", group)
		}
		// The lease is "<lease ID>:<attempt>:<claimed at>:<consumer ID>"; a
		// lease claimed by an earlier version is "<lease ID>:<attempt>", its
		// claim record "<lease ID>:<claimed at>:<consumer ID>" beside it
		// (one left by an earlier lease of the delivery does not count).
		leaseID, rest, _ := strings.Cut(toStr(r[2]), ":")
		att, claim, claimed := strings.Cut(rest, ":")
		attempt, _ := strconv.Atoi(att)
		exp, _ := strconv.ParseInt(toStr(r[3]), 10, 64)
		l := rheo.Lease{ID: leaseID, Stream: stream, Group: group, Attempt: attempt, ExpiresAt: fromMicros(exp), Event: e}
		if !claimed {
			if id, rest, ok := strings.Cut(toStr(r[4]), ":"); ok && id == leaseID {
				claim, claimed = rest, true
			}
		}
		if claimed {
			at, consumer, _ := strings.Cut(claim, ":")
			if us, err := strconv.ParseInt(at, 10, 64); err == nil {
				l.LeasedAt = fromMicros(us)
			}
			l.ConsumerID = consumer
		}
		out = append(out, l)
	}
	return out, nil
}
