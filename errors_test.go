package rheo_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want rheo.Settlement
	}{
		{nil, rheo.Settled},
		{rheo.ErrStaleLease, rheo.Lost},
		{rheo.Errorf(rheo.ErrReceiptMismatch, "lease x"), rheo.Lost},
		{fmt.Errorf("ack: %w", rheo.ErrStaleLease), rheo.Lost},
		{rheo.ErrBackendUnavailable, rheo.Unknown},
		{rheo.Wrap(rheo.ErrAmbiguous, errors.New("i/o timeout"), "ack"), rheo.Unknown},
		{context.DeadlineExceeded, rheo.Unknown},
		{rheo.ErrGroupNotFound, rheo.Failed},
		{errors.New("boom"), rheo.Failed},
		{rheo.ErrInvalidArgument, rheo.Failed},
	}
	for _, c := range cases {
		require.Equal(t, c.want, rheo.Classify(c.err), "Classify(%v)", c.err)
	}
}

func TestWrapKeepsKindAndCause(t *testing.T) {
	cause := errors.New("connection reset")
	err := rheo.Wrap(rheo.ErrAmbiguous, cause, "append to %q", "orders")
	require.ErrorIs(t, err, rheo.ErrAmbiguous)
	require.ErrorIs(t, err, cause)
	require.Equal(t, `ambiguous outcome: append to "orders": connection reset`, err.Error())
}

func TestBatchErrorIsOnlyWhenEveryFailureMatches(t *testing.T) {
	stale := &rheo.BatchError{Errs: []error{nil, rheo.ErrStaleLease, rheo.ErrStaleLease}}
	require.ErrorIs(t, stale, rheo.ErrStaleLease)
	require.Equal(t, rheo.Lost, rheo.Classify(stale))

	mixed := &rheo.BatchError{Errs: []error{rheo.ErrStaleLease, rheo.ErrBackendUnavailable}}
	require.NotErrorIs(t, mixed, rheo.ErrStaleLease)
	require.Equal(t, rheo.Failed, rheo.Classify(mixed))
	require.Contains(t, mixed.Error(), "2 of 2 leases not settled")
}
