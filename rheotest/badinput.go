package rheotest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rheo-go/rheo"
)

// world is the state the not-found and bad-input cases act on: a
// two-partition stream with a group that holds one lease, has acked one
// event and dead-lettered another.
type world struct {
	*env
	s, g  string
	held  rheo.Lease
	evs   []rheo.Event
	other *rheo.Client // same backend, small event size limit
}

func newWorld(t *testing.T, f Factory) *world {
	t.Helper()
	e := newEnv(t, f)
	w := &world{env: e, s: e.stream(2)}
	w.evs = append(e.appendN(w.s, 0, 3), e.appendN(w.s, 1, 1)...)
	w.g = e.group(w.s, rheo.GroupConfig{})
	ls := e.fetch(w.s, w.g, rheo.FetchOptions{Limit: 3, Partitions: []int{0}})
	require.Len(t, ls, 3)
	e.ack(ls[0])
	require.NoError(t, e.c.Reject(e.ctx, ls[1], "bad"))
	w.held = ls[2]
	w.other = rheo.New(e.c.Backend(), rheo.WithClock(e.clk), rheo.WithMaxEventBytes(64))
	return w
}

// lease returns the held lease changed by edit.
func (w *world) lease(edit func(l *rheo.Lease)) rheo.Lease {
	l := w.held
	edit(&l)
	return l
}

// call is one API call a case makes, returning its error.
type call struct {
	name string
	do   func(w *world) error
}

// leaseCalls are the calls that take a lease.
func leaseCalls(l func(w *world) rheo.Lease) []call {
	return []call{
		{"ack", func(w *world) error { return w.c.Ack(w.ctx, l(w)) }},
		{"ack_batch", func(w *world) error { return w.c.AckBatch(w.ctx, []rheo.Lease{l(w)}) }},
		{"nack", func(w *world) error { return w.c.Nack(w.ctx, l(w), "x") }},
		{"reject", func(w *world) error { return w.c.Reject(w.ctx, l(w), "x") }},
		{"renew", func(w *world) error { _, err := w.c.Renew(w.ctx, l(w), time.Minute); return err }},
	}
}

// groupCalls are the calls that name a stream and a group.
func groupCalls(stream func(w *world) string, group string) []call {
	return append([]call{
		{"fetch", func(w *world) error {
			_, err := w.c.Fetch(w.ctx, stream(w), group, rheo.FetchOptions{})
			return err
		}},
		{"fetch_wait", func(w *world) error {
			_, err := w.c.Fetch(w.ctx, stream(w), group, rheo.FetchOptions{Wait: time.Millisecond})
			return err
		}},
		{"lag", func(w *world) error { _, err := w.c.Lag(w.ctx, stream(w), group); return err }},
		{"group_info", func(w *world) error { _, err := w.c.GroupInfo(w.ctx, stream(w), group); return err }},
		{"dead_letters", func(w *world) error {
			_, err := w.c.DeadLetters(w.ctx, stream(w), group, rheo.DeadLetterOptions{})
			return err
		}},
		{"replay_from_sequence", func(w *world) error {
			return errOf(w.c.Replay(w.ctx, stream(w), group, rheo.FromSequence(0)))
		}},
		{"replay_events", func(w *world) error {
			return errOf(w.c.Replay(w.ctx, stream(w), group, rheo.Events(w.evs[0].ID)))
		}},
		{"reset_group", func(w *world) error {
			return errOf(w.c.ResetGroup(w.ctx, stream(w), group, rheo.ResetOptions{Confirm: true}))
		}},
		{"reset_group_past_the_high_watermark", func(w *world) error {
			// A start no group could take: the missing group is reported first.
			return errOf(w.c.ResetGroup(w.ctx, stream(w), group, rheo.ResetOptions{Confirm: true, Start: rheo.AfterSequence(1 << 40)}))
		}},
		{"reset_group_of_a_missing_partition", func(w *world) error {
			return errOf(w.c.ResetGroup(w.ctx, stream(w), group, rheo.ResetOptions{Confirm: true, Partitions: []int{99}}))
		}},
		{"redrive", func(w *world) error { _, err := w.c.Redrive(w.ctx, stream(w), group); return err }},
	}, leaseCalls(func(w *world) rheo.Lease {
		return w.lease(func(l *rheo.Lease) { l.Stream, l.Group = stream(w), group })
	})...)
}

func runNotFound(t *testing.T, f Factory) {
	missing := func(*world) string { return "no-such-stream" }
	existing := func(w *world) string { return w.s }
	streamCalls := []call{
		{"append", func(w *world) error { _, err := w.c.Append(w.ctx, "no-such-stream", rheo.Message{}); return err }},
		{"append_batch", func(w *world) error {
			_, err := w.c.AppendBatch(w.ctx, "no-such-stream", []rheo.Message{{}})
			return err
		}},
		{"read", func(w *world) error {
			_, err := w.c.Read(w.ctx, "no-such-stream", rheo.ReadOptions{})
			return err
		}},
		{"query", func(w *world) error { _, err := w.c.Query(w.ctx, rheo.Query{Stream: "no-such-stream"}); return err }},
		{"query_page", func(w *world) error {
			_, err := w.c.QueryPage(w.ctx, rheo.Query{Stream: "no-such-stream"})
			return err
		}},
		{"query_all", func(w *world) error {
			for _, err := range w.c.QueryAll(w.ctx, rheo.Query{Stream: "no-such-stream"}) {
				return err
			}
			return nil
		}},
		{"create_group", func(w *world) error {
			return w.c.CreateGroup(w.ctx, "no-such-stream", "g", rheo.GroupConfig{})
		}},
		{"list_groups", func(w *world) error { _, err := w.c.ListGroups(w.ctx, "no-such-stream"); return err }},
	}
	t.Run("missing_stream", func(t *testing.T) {
		for _, c := range append(streamCalls, groupCalls(missing, "no-such-group")...) {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, f)
				before := w.snapshot()
				require.ErrorIs(t, c.do(w), rheo.ErrStreamNotFound, "a missing stream is reported before a missing group")
				require.Equal(t, before, w.snapshot())
			})
		}
	})
	t.Run("missing_group", func(t *testing.T) {
		for _, c := range groupCalls(existing, "no-such-group") {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				w := newWorld(t, f)
				before := w.snapshot()
				err := c.do(w)
				require.ErrorIs(t, err, rheo.ErrGroupNotFound)
				require.NotErrorIs(t, err, rheo.ErrStreamNotFound)
				require.Contains(t, err.Error(), fmt.Sprintf("group %q of stream %q", "no-such-group", w.s), "the same words on every store")
				require.Equal(t, before, w.snapshot())
			})
		}
	})
}

// badCase is one malformed input: the error it must get, and the proof
// that nothing was written follows in runBadInput.
type badCase struct {
	name  string
	want  error
	do    func(w *world) error
	check func(t *testing.T, w *world, err error) // instead of want
}

func runBadInput(t *testing.T, f Factory) {
	long := strings.Repeat("n", rheo.MaxNameBytes+1)
	names := map[string]string{"empty": "", "over_200_bytes": long, "control_char": "a\x00b", "newline": "a\nb", "bad_utf8": "a\xffb"}
	var cases []badCase
	for label, name := range names {
		cases = append(cases,
			badCase{name: "create_stream_name_" + label, want: rheo.ErrInvalidArgument, do: func(w *world) error {
				return w.c.CreateStream(w.ctx, name, rheo.StreamConfig{})
			}},
			badCase{name: "create_group_name_" + label, want: rheo.ErrInvalidArgument, do: func(w *world) error {
				return w.c.CreateGroup(w.ctx, w.s, name, rheo.GroupConfig{})
			}},
		)
	}
	cases = append(cases, []badCase{
		{name: "create_stream_name_exactly_200_bytes_is_fine", do: func(w *world) error {
			name := Name("s")
			return w.c.CreateStream(w.ctx, name+long[:rheo.MaxNameBytes-len(name)], rheo.StreamConfig{})
		}, check: func(t *testing.T, w *world, err error) {
			require.NoError(t, err)
		}},
		{name: "create_stream_partitions_negative", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return w.c.CreateStream(w.ctx, "x", rheo.StreamConfig{Partitions: -1})
		}},
		{name: "create_stream_partitions_over_1024", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return w.c.CreateStream(w.ctx, "x", rheo.StreamConfig{Partitions: rheo.MaxPartitions + 1})
		}},
		{name: "create_group_negative_max_attempts", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return w.c.CreateGroup(w.ctx, w.s, "x", rheo.GroupConfig{MaxAttempts: -1})
		}},
		{name: "create_group_negative_start", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return w.c.CreateGroup(w.ctx, w.s, "x", rheo.GroupConfig{Start: rheo.AfterSequences(map[int]int64{1: -1})})
		}},
		{name: "append_payload_array", want: rheo.ErrInvalidArgument, do: appendPayload(`[1,2]`)},
		{name: "append_payload_string", want: rheo.ErrInvalidArgument, do: appendPayload(`"x"`)},
		{name: "append_payload_number", want: rheo.ErrInvalidArgument, do: appendPayload(`42`)},
		{name: "append_payload_null", want: rheo.ErrInvalidArgument, do: appendPayload(`null`)},
		{name: "append_payload_not_json", want: rheo.ErrInvalidArgument, do: appendPayload(`{"a":`)},
		{name: "append_payload_trailing_garbage", want: rheo.ErrInvalidArgument, do: appendPayload(`{"a":1} x`)},
		{name: "append_payload_nul_escape", want: rheo.ErrInvalidArgument, do: appendPayload(`{"a":"x\u0000y"}`)},
		{name: "append_payload_nul_escape_in_name", want: rheo.ErrInvalidArgument, do: appendPayload(`{"\u0000":1}`)},
		{name: "append_payload_lone_high_surrogate", want: rheo.ErrInvalidArgument, do: appendPayload(`{"a":"\ud800"}`)},
		{name: "append_payload_lone_low_surrogate", want: rheo.ErrInvalidArgument, do: appendPayload(`{"a":"\udc00x"}`)},
		{name: "append_payload_invalid_utf8", want: rheo.ErrInvalidArgument, do: appendPayload("{\"a\":\"\xff\"}")},
		{name: "append_payload_duplicate_names", want: rheo.ErrInvalidArgument, do: appendPayload(`{"a":1,"a":2}`)},
		{name: "append_payload_duplicate_names_escaped", want: rheo.ErrInvalidArgument, do: appendPayload(`{"a":1,"\u0061":2}`)},
		{name: "append_payload_nested_too_deep", want: rheo.ErrInvalidArgument,
			do: appendPayload(`{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`)},
		{name: "append_payload_exponent_out_of_range", want: rheo.ErrInvalidArgument, do: appendPayload(`{"a":1e1000000}`)},
		{name: "append_payload_too_many_digits", want: rheo.ErrInvalidArgument, do: appendPayload(`{"a":` + strings.Repeat("7", 1001) + `}`)},
		{name: "append_metadata_value_with_nul", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.Append(w.ctx, w.s, rheo.Message{Metadata: map[string]string{"k": "a\x00b"}})
			return err
		}},
		{name: "append_payload_over_size_limit", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.other.Append(w.ctx, w.s, rheo.Message{ID: "e", Payload: json.RawMessage(`{"a":"` + strings.Repeat("x", 60) + `"}`)})
			return err
		}},
		{name: "append_metadata_counts_toward_size_limit", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.other.Append(w.ctx, w.s, rheo.Message{ID: "e", Metadata: map[string]string{"k": strings.Repeat("v", 62)}})
			return err
		}},
		{name: "append_type_and_key_count_toward_size_limit", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.other.Append(w.ctx, w.s, rheo.Message{ID: "e", Type: strings.Repeat("t", 31), Key: strings.Repeat("k", 31)})
			return err
		}},
		{name: "append_event_at_the_size_limit_is_fine", do: func(w *world) error {
			// 1 (ID) + 63 (payload) = 64 bytes, the limit.
			_, err := w.other.Append(w.ctx, w.s, rheo.Message{ID: "e", Payload: json.RawMessage(`{"a":"` + strings.Repeat("x", 55) + `"}`)})
			return err
		}, check: func(t *testing.T, w *world, err error) {
			require.NoError(t, err)
		}},
		{name: "append_event_id_over_200_bytes", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.Append(w.ctx, w.s, rheo.Message{ID: long})
			return err
		}},
		{name: "append_event_id_control_char", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.Append(w.ctx, w.s, rheo.Message{ID: "a\tb"})
			return err
		}},
		{name: "append_type_over_200_bytes", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.Append(w.ctx, w.s, rheo.Message{Type: long})
			return err
		}},
		{name: "append_key_control_char", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.Append(w.ctx, w.s, rheo.Message{Key: "k\x7f"})
			return err
		}},
		{name: "append_metadata_empty_key", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.Append(w.ctx, w.s, rheo.Message{Metadata: map[string]string{"": "v"}})
			return err
		}},
		{name: "append_partition_out_of_range", want: rheo.ErrInvalidPartition, do: func(w *world) error {
			_, err := w.c.Append(w.ctx, w.s, rheo.Message{Partition: ptr(2)})
			return err
		}},
		{name: "append_partition_negative", want: rheo.ErrInvalidPartition, do: func(w *world) error {
			_, err := w.c.Append(w.ctx, w.s, rheo.Message{Partition: ptr(-1)})
			return err
		}},
		// A backend holds to the contract for a direct caller too: one
		// event of a batch routed outside the stream's partitions writes
		// nothing.
		{name: "backend_append_partition_out_of_range", want: rheo.ErrInvalidPartition, do: backendAppendTo(2)},
		{name: "backend_append_partition_negative", want: rheo.ErrInvalidPartition, do: backendAppendTo(-1)},
		{name: "append_batch_over_10000", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.AppendBatch(w.ctx, w.s, make([]rheo.Message, rheo.MaxLimit+1))
			return err
		}},
		{name: "append_batch_duplicate_ids", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.AppendBatch(w.ctx, w.s, []rheo.Message{{ID: "d"}, {ID: "x"}, {ID: "d"}})
			return err
		}},
		{name: "read_negative_limit", want: rheo.ErrInvalidArgument, do: readOpts(rheo.ReadOptions{Limit: -1})},
		{name: "read_limit_over_10000", want: rheo.ErrInvalidArgument, do: readOpts(rheo.ReadOptions{Limit: rheo.MaxLimit + 1})},
		{name: "read_negative_after", want: rheo.ErrInvalidArgument, do: readOpts(rheo.ReadOptions{After: -1})},
		{name: "read_partition_out_of_range", want: rheo.ErrInvalidPartition, do: readOpts(rheo.ReadOptions{Partition: 2})},
		{name: "fetch_negative_limit", want: rheo.ErrInvalidArgument, do: fetchOpts(rheo.FetchOptions{Limit: -1})},
		{name: "fetch_limit_over_10000", want: rheo.ErrInvalidArgument, do: fetchOpts(rheo.FetchOptions{Limit: rheo.MaxLimit + 1})},
		{name: "fetch_negative_lease_duration", want: rheo.ErrInvalidArgument, do: fetchOpts(rheo.FetchOptions{LeaseDuration: -time.Second})},
		{name: "fetch_negative_wait", want: rheo.ErrInvalidArgument, do: fetchOpts(rheo.FetchOptions{Wait: -time.Second})},
		{name: "fetch_partition_out_of_range", want: rheo.ErrInvalidPartition, do: fetchOpts(rheo.FetchOptions{Partitions: []int{0, 2}})},
		{name: "fetch_consumer_id_control_char", want: rheo.ErrInvalidArgument, do: fetchOpts(rheo.FetchOptions{ConsumerID: "c\x01"})},
		{name: "fetch_consumer_id_over_200_bytes", want: rheo.ErrInvalidArgument, do: fetchOpts(rheo.FetchOptions{ConsumerID: long})},
		{name: "query_negative_limit", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Limit: -1})},
		{name: "query_limit_over_10000", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Limit: rheo.MaxLimit + 1})},
		{name: "query_unknown_order_field", want: rheo.ErrInvalidArgument, do: query(rheo.Query{OrderBy: []rheo.Order{{Field: "price"}}})},
		{name: "query_negative_after_sequence", want: rheo.ErrInvalidArgument, do: query(rheo.Query{AfterSequence: -1})},
		{name: "query_negative_until_sequence", want: rheo.ErrInvalidArgument, do: query(rheo.Query{UntilSequence: -2})},
		{name: "query_metadata_value_not_utf8", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Metadata: map[string]string{"k": "\xc8"}})},
		{name: "query_payload_value_not_utf8", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Payload: map[string]any{"k": "a\xff"}})},
		{name: "query_partition_out_of_range", want: rheo.ErrInvalidPartition, do: query(rheo.Query{Partitions: []int{5}})},
		{name: "query_payload_path_empty_segment", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Payload: map[string]any{"a..b": 1}})},
		{name: "query_payload_path_with_quote", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Payload: map[string]any{`a'b`: 1}})},
		{name: "query_payload_nan", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Payload: map[string]any{"a": math.NaN()}})},
		{name: "query_payload_unsupported_value", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Payload: map[string]any{"a": []int{1}}})},
		{name: "query_metadata_key_control_char", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Metadata: map[string]string{"k\n": "v"}})},
		{name: "query_cursor_garbage", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Cursor: "garbage"})},
		{name: "query_cursor_not_base64", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Cursor: "c1.!!!"})},
		{name: "query_cursor_not_a_cursor", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Cursor: "c1." + b64(`[1,2]`)})},
		{name: "query_cursor_partition_out_of_range", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Cursor: "c1." + b64(`{"7":1}`)})},
		{name: "query_cursor_negative_sequence", want: rheo.ErrInvalidArgument, do: query(rheo.Query{Cursor: "c1." + b64(`{"0":-1}`)})},
		{name: "query_page_cursor_garbage", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.QueryPage(w.ctx, rheo.Query{Stream: w.s, Cursor: "c1.zz"})
			return err
		}},
		{name: "query_all_cursor_garbage", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			for _, err := range w.c.QueryAll(w.ctx, rheo.Query{Stream: w.s, Cursor: "nope"}) {
				return err
			}
			return errors.New("QueryAll yielded nothing")
		}},
		{name: "dead_letters_negative_limit", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.DeadLetters(w.ctx, w.s, w.g, rheo.DeadLetterOptions{Limit: -1})
			return err
		}},
		{name: "dead_letters_limit_over_10000", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.DeadLetters(w.ctx, w.s, w.g, rheo.DeadLetterOptions{Limit: rheo.MaxLimit + 1})
			return err
		}},
		{name: "lag_partition_out_of_range", want: rheo.ErrInvalidPartition, do: func(w *world) error {
			_, err := w.c.Lag(w.ctx, w.s, w.g, 2)
			return err
		}},
		{name: "replay_negative_sequence", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return errOf(w.c.Replay(w.ctx, w.s, w.g, rheo.FromSequence(-1)))
		}},
		{name: "replay_partition_out_of_range", want: rheo.ErrInvalidPartition, do: func(w *world) error {
			return errOf(w.c.Replay(w.ctx, w.s, w.g, rheo.FromSequence(0), 0, 2))
		}},
		{name: "replay_event_id_control_char", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return errOf(w.c.Replay(w.ctx, w.s, w.g, rheo.Events("a\x00")))
		}},
		{name: "replay_matching_another_stream", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return errOf(w.c.Replay(w.ctx, w.s, w.g, rheo.Matching(rheo.Query{Stream: "elsewhere"})))
		}},
		{name: "replay_matching_bad_query", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return errOf(w.c.Replay(w.ctx, w.s, w.g, rheo.Matching(rheo.Query{OrderBy: []rheo.Order{{Field: "nope"}}})))
		}},
		{name: "reset_partition_out_of_range", want: rheo.ErrInvalidPartition, do: func(w *world) error {
			return errOf(w.c.ResetGroup(w.ctx, w.s, w.g, rheo.ResetOptions{Confirm: true, Partitions: []int{3}}))
		}},
		{name: "reset_start_beyond_high_watermark", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return errOf(w.c.ResetGroup(w.ctx, w.s, w.g, rheo.ResetOptions{Confirm: true, Start: rheo.AfterSequences(map[int]int64{1: 2})}))
		}},
		{name: "redrive_empty_event_id", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.Redrive(w.ctx, w.s, w.g, w.evs[1].ID, "")
			return err
		}},
		{name: "renew_negative_duration", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			_, err := w.c.Renew(w.ctx, w.held, -time.Second)
			return err
		}},
		{name: "nack_negative_delay", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return w.c.Nack(w.ctx, w.held, "x", rheo.Delay(-time.Second))
		}},
		{name: "nack_reason_invalid_utf8", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return w.c.Nack(w.ctx, w.held, "bad \xff byte")
		}},
		{name: "nack_reason_with_nul", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return w.c.Nack(w.ctx, w.held, "nul \x00 byte")
		}},
		{name: "reject_reason_invalid_utf8", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return w.c.Reject(w.ctx, w.held, "bad \xc3 byte")
		}},
		{name: "reject_reason_with_nul", want: rheo.ErrInvalidArgument, do: func(w *world) error {
			return w.c.Reject(w.ctx, w.held, "\x00")
		}},
		{name: "lease_with_truncated_receipt", do: func(w *world) error {
			return w.c.Ack(w.ctx, w.lease(func(l *rheo.Lease) { l.Receipt = l.Receipt[:len(l.Receipt)-1] }))
		}, check: func(t *testing.T, w *world, err error) { requireReceiptRefused(t, w.held, err) }},
	}...)
	badLeases := map[string]func(l *rheo.Lease){
		"malformed_lease_id":        func(l *rheo.Lease) { l.ID = "not-a-lease" },
		"truncated_lease_id":        func(l *rheo.Lease) { l.ID = l.ID[:len(l.ID)-1] },
		"empty_lease_id":            func(l *rheo.Lease) { l.ID = "" },
		"empty_receipt":             func(l *rheo.Lease) { l.Receipt = "" },
		"receipt_over_200_bytes":    func(l *rheo.Lease) { l.Receipt = long },
		"lease_event_sequence_zero": func(l *rheo.Lease) { l.Event.Sequence = 0 },
		"lease_empty_event_id":      func(l *rheo.Lease) { l.Event.ID = "" },
		"lease_empty_group":         func(l *rheo.Lease) { l.Group = "" },
	}
	for label, edit := range badLeases {
		for _, c := range leaseCalls(func(w *world) rheo.Lease { return w.lease(edit) }) {
			cases = append(cases, badCase{name: label + "_" + c.name, want: rheo.ErrInvalidArgument, do: c.do})
		}
	}
	for _, c := range leaseCalls(func(w *world) rheo.Lease {
		return w.lease(func(l *rheo.Lease) { l.Event.Partition = 2 })
	}) {
		cases = append(cases, badCase{name: "lease_partition_out_of_range_" + c.name, want: rheo.ErrInvalidPartition, do: c.do})
	}

	for _, bc := range cases {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, f)
			before := w.snapshot()
			err := bc.do(w)
			if bc.check != nil {
				bc.check(t, w, err)
				if err == nil {
					return // an accepted input: nothing more to prove
				}
			} else {
				require.ErrorIs(t, err, bc.want)
				require.NotEmpty(t, err.Error())
			}
			require.Equal(t, before, w.snapshot(), "a rejected input writes nothing")
			// The group's lease survived untouched.
			require.NoError(t, w.c.Ack(w.ctx, w.held))
		})
	}
}

func appendPayload(p string) func(w *world) error {
	return func(w *world) error {
		_, err := w.c.Append(w.ctx, w.s, rheo.Message{Payload: json.RawMessage(p)})
		return err
	}
}

// backendAppendTo appends two prepared events straight to the backend, the
// second routed to partition p.
func backendAppendTo(p int) func(w *world) error {
	return func(w *world) error {
		evs, err := w.c.PrepareAppend(w.ctx, w.s, []rheo.Message{{Key: "a"}, {Key: "b"}})
		if err != nil {
			return err
		}
		evs[1].Partition = p
		_, err = w.c.Backend().Append(w.ctx, w.s, evs)
		return err
	}
}

func readOpts(o rheo.ReadOptions) func(w *world) error {
	return func(w *world) error { _, err := w.c.Read(w.ctx, w.s, o); return err }
}

func fetchOpts(o rheo.FetchOptions) func(w *world) error {
	return func(w *world) error { _, err := w.c.Fetch(w.ctx, w.s, w.g, o); return err }
}

func query(q rheo.Query) func(w *world) error {
	return func(w *world) error {
		q.Stream = w.s
		_, err := w.c.Query(w.ctx, q)
		return err
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
