package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rheo-go/rheo"
)

// Group statuses, worst first.
const (
	statusStuck   = "stuck"
	statusDead    = "dead letters"
	statusBehind  = "behind"
	statusHealthy = "healthy"
)

// groupRow is one group's health as the overview and the group page show it.
type groupRow struct {
	Stream, Group string
	Info          rheo.GroupInfo
	Status        string
	StatusClass   string
	Why           string
	Err           string
}

type streamRow struct {
	rheo.StreamInfo
	Events int64
	Groups []groupRow
	Err    string
}

type overviewView struct {
	Streams []streamRow
	Counts  map[string]int
	Groups  int
}

// health classifies a group: stuck when its frontier has not moved for
// StuckAfter while it had lag (as the dashboard observed), dead letters when
// it has any, behind when its oldest pending event is older than
// BehindAfter, healthy otherwise. The worst applies.
func (d *Dashboard) health(info rheo.GroupInfo, now time.Time) groupRow {
	d.series.record(info.Lag, now)
	row := groupRow{Stream: info.Stream, Group: info.Group, Info: info, Status: statusHealthy}
	stalled := d.series.stalledFor(info.Stream, info.Group, now)
	switch {
	case info.Lag.Total > 0 && stalled >= d.cfg.stuckAfter:
		row.Status = statusStuck
		row.Why = "frontier has not moved for " + humanDuration(stalled)
	case info.DeadLetters > 0:
		row.Status = statusDead
		row.Why = formatInt(info.DeadLetters) + " dead letters"
	case info.Lag.Total > 0 && !info.OldestPending.IsZero() && now.Sub(info.OldestPending) >= d.cfg.behindAfter:
		row.Status = statusBehind
		row.Why = "oldest pending event is " + humanDuration(now.Sub(info.OldestPending)) + " old"
	}
	row.StatusClass = strings.ReplaceAll(row.Status, " ", "-")
	return row
}

// gatherOverview reads every stream and group with bounded parallelism: a
// handful of cheap calls per group (lag, counts, the first pending event),
// never a scan of events.
func (d *Dashboard) gatherOverview(ctx context.Context) (overviewView, error) {
	streams, err := d.c.ListStreams(ctx)
	if err != nil {
		return overviewView{}, err
	}
	v := overviewView{Streams: make([]streamRow, len(streams)), Counts: map[string]int{}}
	sem := make(chan struct{}, max(d.cfg.parallel, 1))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, st := range streams {
		v.Streams[i].StreamInfo = st
		wg.Go(func() {
			sem <- struct{}{}
			row := &v.Streams[i]
			state, err := d.c.Stream(ctx, st.Name)
			if err == nil {
				for p, hw := range state.HighWatermarks {
					row.Events += hw - state.TrimmedThrough[p] // retained events
				}
				var names []string
				names, err = d.c.ListGroups(ctx, st.Name)
				row.Groups = make([]groupRow, len(names))
				for j, g := range names {
					row.Groups[j] = groupRow{Stream: st.Name, Group: g}
				}
			}
			<-sem
			if err != nil {
				row.Err = err.Error()
				return
			}
			// One GroupInfos call per stream reads what its groups share once.
			names := make([]string, len(row.Groups))
			for j, g := range row.Groups {
				names[j] = g.Group
			}
			sem <- struct{}{}
			infos, errs := d.c.GroupInfos(ctx, st.Name, names)
			<-sem
			now := d.cfg.clock.Now()
			for j := range row.Groups {
				g := &row.Groups[j]
				if errs[j] != nil {
					g.Err, g.Status, g.StatusClass = errs[j].Error(), "error", "error"
					continue
				}
				*g = d.health(infos[j], now)
				mu.Lock()
				v.Counts[g.Status]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, s := range v.Streams {
		v.Groups += len(s.Groups)
	}
	return v, ctx.Err()
}

func (d *Dashboard) overview(w http.ResponseWriter, r *http.Request) {
	v, err := d.gatherOverview(r.Context())
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	d.render(w, r, http.StatusOK, "overview", view{Title: "Overview", Nav: "overview", Live: true, Data: v})
}

// deadLetterPage is how many dead letters the group page shows at once.
const deadLetterPage = 20

type deadRow struct {
	rheo.DeadLetter
	Payload string
	Meta    []keyValue
}

type groupView struct {
	Stream     rheo.StreamInfo
	Row        groupRow
	Chart      chart
	Leases     []rheo.Lease
	LeasesNote string
	Dead       []deadRow
	After      string // this page of dead letters starts after this event ID
	Next       string // the next page's cursor; "" on the last page
}

func (d *Dashboard) groupPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	stream, group := r.PathValue("stream"), r.PathValue("group")
	st, err := d.c.Stream(ctx, stream)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	info, err := d.c.GroupInfo(ctx, stream, group)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	now := d.cfg.clock.Now()
	v := groupView{Stream: st.StreamInfo, Row: d.health(info, now), After: r.URL.Query().Get("after")}
	v.Chart = newChart(d.series.history(stream, group))
	v.Leases, err = d.c.Leases(ctx, stream, group, rheo.LeaseListOptions{Limit: leasePage})
	switch {
	case errors.Is(err, rheo.ErrUnsupported):
		v.LeasesNote = "This store cannot list leases."
	case err != nil:
		d.failErr(w, r, err)
		return
	case len(v.Leases) == leasePage:
		v.LeasesNote = "Showing the first " + strconv.Itoa(leasePage) + " leases."
	}
	dls, err := d.c.DeadLetters(ctx, stream, group, rheo.DeadLetterOptions{Limit: deadLetterPage, After: v.After})
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	for _, dl := range dls {
		v.Dead = append(v.Dead, deadRow{DeadLetter: dl, Payload: prettyJSON(dl.Event.Payload), Meta: sortedMeta(dl.Event.Metadata)})
	}
	if len(dls) == deadLetterPage {
		v.Next = dls[len(dls)-1].EventID
	}
	d.render(w, r, http.StatusOK, "group", view{Title: group + " · " + stream, Nav: "overview", Live: true, Data: v})
}

// leasePage is how many current leases the group page lists.
const leasePage = 50

// searchPage is the default number of events per search page.
const searchPage = 50

type searchView struct {
	Streams  []rheo.StreamInfo
	Form     url.Values
	Searched bool
	Error    string
	Events   []rheo.Event
	NextURL  string
}

// parseSearch turns the search form into a Query; it returns an error that
// names the field at fault.
func parseSearch(f url.Values) (rheo.Query, error) {
	q := rheo.Query{Stream: f.Get("stream"), Type: f.Get("type"), Key: f.Get("key"), Cursor: f.Get("cursor"), Limit: searchPage}
	var err error
	if q.Metadata, err = parsePairs("metadata", f.Get("metadata"), func(s string) (string, error) { return s, nil }); err != nil {
		return q, err
	}
	if q.Payload, err = parsePairs("payload", f.Get("payload"), parseValue); err != nil {
		return q, err
	}
	if q.From, err = parseTime("from", f.Get("from")); err != nil {
		return q, err
	}
	if q.To, err = parseTime("to", f.Get("to")); err != nil {
		return q, err
	}
	if s := f.Get("limit"); s != "" {
		if q.Limit, err = strconv.Atoi(s); err != nil || q.Limit < 1 || q.Limit > 1000 {
			return q, errors.New("limit must be a number from 1 to 1000")
		}
	}
	return q, nil
}

// parsePairs reads "name=value" lines.
func parsePairs[V any](field, text string, value func(string) (V, error)) (map[string]V, error) {
	var m map[string]V
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, raw, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, errors.New(field + ": want one name=value per line, got " + strconv.Quote(line))
		}
		v, err := value(strings.TrimSpace(raw))
		if err != nil {
			return nil, errors.New(field + " " + strconv.Quote(k) + ": " + err.Error())
		}
		if m == nil {
			m = map[string]V{}
		}
		m[k] = v
	}
	return m, nil
}

// parseValue reads a payload filter value: a JSON number, true, false, null
// or a quoted string; anything else is taken as a plain string.
func parseValue(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err == nil && !dec.More() {
		switch v.(type) {
		case nil, bool, string, json.Number:
			return v, nil
		}
		return nil, errors.New("only strings, numbers, booleans and null can be matched")
	}
	return s, nil
}

// parseTime accepts RFC 3339 and the browser's datetime-local form (taken as UTC).
func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New(field + ": " + strconv.Quote(s) + " is not a time (want 2006-01-02T15:04:05Z or 2006-01-02T15:04)")
}

func (d *Dashboard) search(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	f := r.URL.Query()
	streams, err := d.c.ListStreams(ctx)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	v := searchView{Streams: streams, Form: f}
	status := http.StatusOK
	if f.Get("stream") != "" {
		v.Searched = true
		q, err := parseSearch(f)
		var page rheo.Page
		if err == nil {
			page, err = d.c.QueryPage(ctx, q)
		}
		switch {
		case err == nil:
			v.Events = page.Events
			if page.NextCursor != "" {
				next := url.Values{}
				for k, vs := range f {
					if k != "cursor" {
						next[k] = vs
					}
				}
				next.Set("cursor", page.NextCursor)
				v.NextURL = basePath(r) + "/events?" + next.Encode()
			}
		case errors.Is(err, rheo.ErrStreamNotFound):
			status, v.Error = http.StatusNotFound, err.Error()
		case errors.Is(err, rheo.ErrBackendUnavailable), errors.Is(err, context.Canceled):
			d.failErr(w, r, err)
			return
		default:
			status, v.Error = http.StatusBadRequest, err.Error()
		}
	}
	d.render(w, r, status, "search", view{Title: "Events", Nav: "events", Data: v})
}

// Event states in a group.
const (
	stateBelow   = "below frontier"
	statePending = "pending"
	stateLeased  = "leased"
	stateDead    = "dead-lettered"
)

type eventGroup struct {
	Group    string
	State    string
	Class    string
	Detail   string
	Frontier int64
}

type eventView struct {
	Event   rheo.Event
	Payload string
	Meta    []keyValue
	Groups  []eventGroup
}

// lookupEvent reads the event at (partition, seq) with one bounded read.
func (d *Dashboard) lookupEvent(ctx context.Context, stream, part, seq string) (rheo.Event, error) {
	p, err1 := strconv.Atoi(part)
	s, err2 := strconv.ParseInt(seq, 10, 64)
	if err1 != nil || err2 != nil || s < 1 {
		return rheo.Event{}, rheo.Errorf(rheo.ErrInvalidArgument, "event position %q/%q is not a partition and a sequence", part, seq)
	}
	evs, err := d.c.Read(ctx, stream, rheo.ReadOptions{Partition: p, After: s - 1, Limit: 1})
	if err != nil {
		return rheo.Event{}, err
	}
	if len(evs) == 0 || evs[0].Sequence != s {
		return rheo.Event{}, rheo.Errorf(rheo.ErrStreamNotFound, "stream %q has no event at partition %d sequence %d (never appended, or trimmed)", stream, p, s)
	}
	return evs[0], nil
}

// eventState says where an event stands in a group: dead-lettered, below
// the committed frontier (acked), leased, or pending (available, delayed or
// not yet offered). Each is one indexed lookup, never a scan.
func (d *Dashboard) eventState(ctx context.Context, e rheo.Event, group string) (eventGroup, error) {
	eg := eventGroup{Group: group}
	lag, err := d.c.Lag(ctx, e.Stream, group, e.Partition)
	if err != nil {
		return eg, err
	}
	eg.Frontier = lag.Partitions[0].Frontier
	// A dead letter is a valid dead-letter cursor; anything else is not.
	_, err = d.c.DeadLetters(ctx, e.Stream, group, rheo.DeadLetterOptions{After: e.ID, Limit: 1})
	switch {
	case err == nil:
		eg.State = stateDead
		return eg, nil
	case !errors.Is(err, rheo.ErrCursorNotFound):
		return eg, err
	}
	if e.Sequence <= eg.Frontier {
		eg.State, eg.Detail = stateBelow, "acked"
		return eg, nil
	}
	ls, err := d.c.Leases(ctx, e.Stream, group, rheo.LeaseListOptions{EventIDs: []string{e.ID}, Limit: 1})
	switch {
	case errors.Is(err, rheo.ErrUnsupported):
		eg.State, eg.Detail = statePending, "this store cannot tell whether it is leased"
	case err != nil:
		return eg, err
	case len(ls) == 1:
		l := ls[0]
		eg.State = stateLeased
		eg.Detail = "by " + l.ConsumerID + ", attempt " + strconv.Itoa(l.Attempt) + ", expires " + formatUntil(d.cfg.clock.Now(), l.ExpiresAt)
	default:
		eg.State = statePending
	}
	return eg, nil
}

var stateClass = map[string]string{stateBelow: "below", statePending: "pending", stateLeased: "leased", stateDead: "dead"}

func (d *Dashboard) eventPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	e, err := d.lookupEvent(ctx, r.PathValue("stream"), r.PathValue("partition"), r.PathValue("seq"))
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	groups, err := d.c.ListGroups(ctx, e.Stream)
	if err != nil {
		d.failErr(w, r, err)
		return
	}
	v := eventView{Event: e, Payload: prettyJSON(e.Payload), Meta: sortedMeta(e.Metadata)}
	for _, g := range groups {
		eg, err := d.eventState(ctx, e, g)
		if err != nil {
			d.failErr(w, r, err)
			return
		}
		eg.Class = stateClass[eg.State]
		v.Groups = append(v.Groups, eg)
	}
	d.render(w, r, http.StatusOK, "event", view{Title: "Event " + e.ID, Nav: "events", Data: v})
}
