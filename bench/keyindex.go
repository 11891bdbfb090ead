package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// The bare key-index baseline (-scale-bare) measures what the scale case
// of a long stream measures of rheo's appends, on bare tables of the same
// store: a multi-row INSERT of 100 rows into a table of 1,000 rows and
// into one of -scale-events rows, alternately, each in its own
// transaction. Its rows carry the keys of the scale cycles (strconv.Itoa
// of the event's number), which land all over an index of the long
// table's keys, and the same payloads. Two tables of each size hold the
// rows: one with an index of the keys, as rheo's events table has, and one
// without, and the keyed pair also takes rows whose keys sort after every
// earlier one (as -scale-tail-keys gives rheo's). If the bare keyed tables'
// long/small ratio matches rheo's and falls without the key index or with
// tail keys, the extra cost of rheo's appends to a long stream is the
// store's B-tree, not rheo's.

// keyIndexVariant is one pair of tables, small and long, and the keys a
// cycle inserts into them.
type keyIndexVariant struct {
	name  string
	table string // the tables are table_small and table_long
	tail  bool   // keys after every earlier key, as scaleCase.tailKeys
}

var keyIndexVariants = []keyIndexVariant{
	{name: "keyed table, scattered keys", table: "keyed"},
	{name: "keyed table, tail keys", table: "keyed", tail: true},
	{name: "table without key index", table: "plain"},
}

// keyIndexResult is the mean time of one insert of 100 rows into the small
// and into the long table of a variant, over the same cycles.
type keyIndexResult struct {
	store, variant string
	small, long    time.Duration
}

// bareTables is a store's four filled tables: insert adds rows, one
// multi-row INSERT in a transaction of its own.
type bareTables struct {
	insert func(ctx context.Context, table string, keys, payloads []string) error
	// committed, when set, is called after each insert (SQLite's
	// checkpointer).
	committed func()
	cleanup   func()
}

// smallRows is the size of the small tables, that of the scale cases'
// small stream.
const smallRows = 1000

// scaleBare runs -scale-bare: the stores of -scale-stores that it measures
// (sqlite and postgres; it notes the others and skips them), then the
// table of their results.
func scaleBare(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.scaleEvents < smallRows || cfg.scaleCycles < 1 {
		return fmt.Errorf("-scale-events must be at least %d and -scale-cycles at least 1", smallRows)
	}
	var stores, skipped []string
	for s := range strings.SplitSeq(cfg.scaleStores, ",") {
		switch s = strings.TrimSpace(s); s {
		case "sqlite", "postgres":
			stores = append(stores, s)
		case "":
		default:
			skipped = append(skipped, s)
		}
	}
	if len(stores) == 0 {
		return fmt.Errorf("-scale-bare measures sqlite and postgres; -scale-stores %q names neither", cfg.scaleStores)
	}
	if len(skipped) > 0 {
		fmt.Fprintf(out, "-scale-bare measures sqlite and postgres only; skipping %s\n", strings.Join(skipped, ", "))
	}
	e, err := newEnv(ctx, cfg.pg, cfg.redis, cfg.parts, cfg.workers)
	if err != nil {
		return err
	}
	defer e.close()
	res, err := runKeyIndex(ctx, e, stores, cfg.scaleEvents, cfg.scaleCycles, out)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	printKeyIndex(out, res, cfg.scaleEvents)
	return nil
}

// runKeyIndex fills each store's bare tables and measures, cycle after
// cycle, one insert of 100 rows into the small and into the long table of
// every variant in turn, so that load elsewhere falls on all alike; the
// first 5 cycles warm up and do not count. Cycle i's rows are numbered
// i*100 to i*100+99, as the scale cycles' events are.
func runKeyIndex(ctx context.Context, e *env, stores []string, events, cycles int, out io.Writer) ([]keyIndexResult, error) {
	var res []keyIndexResult
	for _, store := range stores {
		r, err := keyIndexOne(ctx, e, store, events, cycles, out)
		if err != nil {
			return res, fmt.Errorf("%s, bare tables: %w", store, err)
		}
		for _, x := range r {
			fmt.Fprintf(out, "%-9s %-28s  insert 100 %s/%s (%.2f×)\n", x.store, x.variant, us(x.small), us(x.long), ratio(x.long, x.small))
		}
		res = append(res, r...)
	}
	return res, nil
}

func keyIndexOne(ctx context.Context, e *env, store string, events, cycles int, out io.Writer) ([]keyIndexResult, error) {
	start := time.Now()
	var t bareTables
	var err error
	switch store {
	case "postgres":
		t, err = bareTablesPG(ctx, e, events, out)
	case "sqlite":
		t, err = bareTablesSQLite(ctx, e, events)
	default:
		err = fmt.Errorf("no bare tables for store %q", store)
	}
	if err != nil {
		return nil, err
	}
	defer t.cleanup()
	fmt.Fprintf(out, "%-9s filled %s and %s rows per table in %s\n", store, thousands(smallRows), thousands(events), time.Since(start).Round(time.Second))
	sum := make([][2]time.Duration, len(keyIndexVariants)) // small, long
	keys, payloads := make([]string, 100), make([]string, 100)
	for i := range cycles + 5 {
		for v, kv := range keyIndexVariants {
			for j := range keys {
				n := i*100 + j
				keys[j] = cycleKey(n, kv.tail)
				payloads[j] = payloadString(n)
			}
			for s, size := range []string{"small", "long"} {
				t0 := time.Now()
				if err := t.insert(ctx, kv.table+"_"+size, keys, payloads); err != nil {
					return nil, err
				}
				d := time.Since(t0)
				if t.committed != nil {
					t.committed()
				}
				if i >= 5 { // after the warm-up
					sum[v][s] += d
				}
			}
		}
	}
	res := make([]keyIndexResult, len(keyIndexVariants))
	for v, kv := range keyIndexVariants {
		res[v] = keyIndexResult{store: store, variant: kv.name, small: sum[v][0] / time.Duration(cycles), long: sum[v][1] / time.Duration(cycles)}
	}
	return res, nil
}

// printKeyIndex writes the results as a table, one row per store and
// variant.
func printKeyIndex(out io.Writer, res []keyIndexResult, events int) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "store\tvariant\tinsert 100, %s rows\t%s rows\tlong / small\t\n", thousands(smallRows), thousands(events))
	for _, r := range res {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%.2f×\t\n", r.store, r.variant, us(r.small), us(r.long), ratio(r.long, r.small))
	}
	w.Flush()
}

// bareTableSizes are the rows each table holds before the cycles.
func bareTableSizes(events int) map[string]int {
	return map[string]int{"keyed_long": events, "plain_long": events, "keyed_small": smallRows, "plain_small": smallRows}
}

// fillChunk is the rows of one statement of a fill: a 10 M fill is ten
// transactions, and a cancel is seen between them as well as within.
const fillChunk = 1_000_000

// valuesList is "(a,b),(c,d),…" for rows pairs of placeholders, numbered
// from $1 when numbered, or all "?".
func valuesList(rows int, numbered bool) string {
	var b strings.Builder
	for j := range rows {
		if j > 0 {
			b.WriteByte(',')
		}
		if numbered {
			fmt.Fprintf(&b, "($%d,$%d)", 2*j+1, 2*j+2)
		} else {
			b.WriteString("(?,?)")
		}
	}
	return b.String()
}

func insertArgs(keys, payloads []string) []any {
	args := make([]any, 0, 2*len(keys))
	for j := range keys {
		args = append(args, keys[j], payloads[j])
	}
	return args
}

// checkLast fails unless the last row of table, by id, is row n-1 of a
// fill: its key and its payload as payloadString builds it, so the SQL that
// fills the tables stays in step with the events the cycles append.
func checkLast(table string, n int, key, payload string) error {
	if key != strconv.Itoa(n-1) || payload != payloadString(n-1) {
		return fmt.Errorf("the last row of %s is (%q, %q), want (%q, %q)", table, key, payload, strconv.Itoa(n-1), payloadString(n-1))
	}
	return nil
}

// bareDialect is what the stores' bare tables differ in: how a statement
// runs and reads the last row, a table's name, its columns, the fill
// statement (a %s for the table; arguments the first and last row number)
// and what follows each table's fill.
type bareDialect struct {
	exec    func(q string, args ...any) error
	last    func(q string, key, payload *string) error
	table   func(name string) string
	columns string
	fill    string
	after   func(table string) error
}

// fillBareTables creates the four tables, the keyed ones with their index
// of keys in place as rheo's is, fills each in statements of fillChunk rows
// and checks its last row (checkLast).
func fillBareTables(ctx context.Context, sizes map[string]int, d bareDialect) error {
	for _, name := range []string{"keyed_long", "plain_long", "keyed_small", "plain_small"} {
		tbl := d.table(name)
		if err := d.exec("CREATE TABLE " + tbl + " (" + d.columns + ")"); err != nil {
			return err
		}
		if strings.HasPrefix(name, "keyed") {
			if err := d.exec("CREATE INDEX " + name + "_ekey ON " + tbl + " (ekey)"); err != nil {
				return err
			}
		}
		for lo := 0; lo < sizes[name]; lo += fillChunk {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := d.exec(fmt.Sprintf(d.fill, tbl), lo, min(lo+fillChunk, sizes[name])-1); err != nil {
				return err
			}
		}
		var key, payload string
		if err := d.last("SELECT ekey, payload FROM "+tbl+" ORDER BY id DESC LIMIT 1", &key, &payload); err != nil {
			return err
		}
		if err := checkLast(name, sizes[name], key, payload); err != nil {
			return err
		}
		if err := d.after(tbl); err != nil {
			return err
		}
	}
	return nil
}

// bareTablesPG creates the tables in a fresh schema and fills them from
// generate_series, the key index in place as rheo's is; its keys have
// rheo's collation, "C". VACUUM ANALYZE then gives the planner its
// statistics, as the scale cases' ANALYZE does, and leaves autovacuum
// nothing to do during the cycles (10 M inserted rows would set it off),
// and a CHECKPOINT (when the role may) writes out the fill, so the cycles
// do not meet it.
func bareTablesPG(ctx context.Context, e *env, events int, out io.Writer) (t bareTables, err error) {
	schema, drop, err := e.schema(ctx, "bare")
	if err != nil {
		return t, err
	}
	// One connection for all: its statements are prepared once, and
	// each cycle's inserts go to the same backend.
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		drop()
		return t, err
	}
	t.cleanup = func() { conn.Release(); drop() }
	defer func() {
		if err != nil {
			t.cleanup()
		}
	}()
	sizes := bareTableSizes(events)
	err = fillBareTables(ctx, sizes, bareDialect{
		exec:    func(q string, args ...any) error { _, err := conn.Exec(ctx, q, args...); return err },
		last:    func(q string, key, payload *string) error { return conn.QueryRow(ctx, q).Scan(key, payload) },
		table:   func(name string) string { return schema + "." + name },
		columns: `id bigserial PRIMARY KEY, ekey text COLLATE "C" NOT NULL, payload text NOT NULL`,
		fill: `INSERT INTO %s (ekey, payload) SELECT i::text,
			format('{"order_id":%%s,"customer":"c-%%s","amount_cents":%%s,"currency":"EUR","status":"created","items":3}', i, i %% 977, 1000 + i %% 50000)
			FROM generate_series($1::bigint, $2::bigint) i`,
		// VACUUM ANALYZE: see above.
		after: func(tbl string) error { _, err := conn.Exec(ctx, "VACUUM ANALYZE "+tbl); return err },
	})
	if err != nil {
		return t, err
	}
	if !e.noCheckpoint {
		if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
			if ctx.Err() != nil {
				return t, err
			}
			e.noCheckpoint = true
			fmt.Fprintf(out, "postgres  no CHECKPOINT after the fill (%v); its dirty pages may be written during the cycles\n", err)
		}
	}
	stmts := map[string]string{}
	for name := range sizes {
		stmts[name] = "INSERT INTO " + schema + "." + name + " (ekey, payload) VALUES " + valuesList(100, true)
	}
	t.insert = func(ctx context.Context, table string, keys, payloads []string) error {
		_, err := conn.Exec(ctx, stmts[table], insertArgs(keys, payloads)...)
		return err
	}
	return t, nil
}

// bareTablesSQLite creates the tables in a fresh file, opened with the
// settings rheo's SQLite store gives its writer (WAL, synchronous NORMAL,
// a 16 MiB page cache, statement journals in memory, automatic checkpoints
// only past 20,000 pages) and with its checkpointer: a second connection
// that checkpoints after commits, at most every 100 ms, off the commit
// path. (openSQLite, with SQLite's defaults, checkpoints inside the commit
// that crosses 1,000 pages, which rheo's appends never do.) The fill is a
// recursive CTE, the key index in place as rheo's is, and a TRUNCATE
// checkpoint after it leaves the cycles an empty WAL.
func bareTablesSQLite(ctx context.Context, e *env, events int) (t bareTables, err error) {
	path, rm := e.file("bare")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return t, err
	}
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "synchronous(NORMAL)", "busy_timeout(5000)", "temp_store(MEMORY)", "cache_size(-16384)", "wal_autocheckpoint(20000)"} {
		q.Add("_pragma", p)
	}
	dsn := "file:" + path + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		rm()
		return t, err
	}
	db.SetMaxOpenConns(1)
	stmts := map[string]*sql.Stmt{}
	stopCkpt := func() {}
	t.cleanup = func() {
		stopCkpt()
		for _, s := range stmts {
			s.Close()
		}
		db.Close()
		rm()
	}
	defer func() {
		if err != nil {
			t.cleanup()
		}
	}()
	sizes := bareTableSizes(events)
	err = fillBareTables(ctx, sizes, bareDialect{
		exec:    func(q string, args ...any) error { _, err := db.ExecContext(ctx, q, args...); return err },
		last:    func(q string, key, payload *string) error { return db.QueryRowContext(ctx, q).Scan(key, payload) },
		table:   func(name string) string { return name },
		columns: "id INTEGER PRIMARY KEY, ekey TEXT NOT NULL, payload TEXT NOT NULL",
		fill: `WITH RECURSIVE s(n) AS (SELECT ? UNION ALL SELECT n + 1 FROM s WHERE n < ?)
			INSERT INTO %s (ekey, payload) SELECT CAST(n AS TEXT),
			printf('{"order_id":%%d,"customer":"c-%%d","amount_cents":%%d,"currency":"EUR","status":"created","items":3}', n, n %% 977, 1000 + n %% 50000)
			FROM s`,
		after: func(name string) (err error) {
			stmts[name], err = db.PrepareContext(ctx, "INSERT INTO "+name+" (ekey, payload) VALUES "+valuesList(100, false))
			return err
		},
	})
	if err != nil {
		return t, err
	}
	if _, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return t, err
	}
	kick, stop, err := sqliteCheckpointer(dsn)
	if err != nil {
		return t, err
	}
	stopCkpt = stop
	t.committed = kick
	t.insert = func(ctx context.Context, table string, keys, payloads []string) error {
		_, err := stmts[table].ExecContext(ctx, insertArgs(keys, payloads)...)
		return err
	}
	return t, nil
}

// sqliteCheckpointer runs PASSIVE checkpoints on a connection of its own,
// as rheo's SQLite store does: one after a kick, then none for 100 ms,
// kicks in between coalescing into one. stop ends it and waits.
func sqliteCheckpointer(dsn string) (kick, stop func(), err error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	ctx, cancel := context.WithCancel(context.Background())
	kicks, done := make(chan struct{}, 1), make(chan struct{})
	go func() {
		defer close(done)
		defer db.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case <-kicks:
			}
			db.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	kick = func() {
		select {
		case kicks <- struct{}{}:
		default:
		}
	}
	return kick, func() { cancel(); <-done }, nil
}
