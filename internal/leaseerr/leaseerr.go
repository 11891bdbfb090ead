// Package leaseerr words the errors of a settle or a renewal that finds no
// current lease, so that every store reports them in the same words.
package leaseerr

import (
	"errors"
	"fmt"

	"github.com/rheo-go/rheo"
)

// Stale is ErrStaleLease for l: its ID names no current lease of its event
// in its group (settled, reclaimed, expired and taken again, forged, or on
// a partition or event the stream does not have).
func Stale(l rheo.Lease) error {
	return rheo.Errorf(rheo.ErrStaleLease, "%s", words(l))
}

// Mismatch is ErrReceiptMismatch for l: its ID names the current lease of
// its event, but its receipt is not the one that lease was issued with.
func Mismatch(l rheo.Lease) error {
	return rheo.Errorf(rheo.ErrReceiptMismatch, "%s: the receipt is not the one the lease was issued with", words(l))
}

func words(l rheo.Lease) string {
	return fmt.Sprintf("lease %s of event %q (partition %d, sequence %d) in group %q of stream %q",
		l.ID, l.Event.ID, l.Event.Partition, l.Event.Sequence, l.Group, l.Stream)
}

// Lost reports whether err says a lease is not current (rheo.Lost): what
// a settle or a renewal also finds under the cached ids of a group another
// process has deleted.
func Lost(err error) bool { return rheo.Classify(err) == rheo.Lost }

// Gone reports whether err says the stream or the group is not there.
func Gone(err error) bool {
	return errors.Is(err, rheo.ErrStreamNotFound) || errors.Is(err, rheo.ErrGroupNotFound)
}

// Settled reports whether a settle request succeeded.
func Settled(err error) bool { return err == nil }
