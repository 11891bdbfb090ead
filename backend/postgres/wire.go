package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The append of a batch sends its events as arrays, one per column: about
// 200 kB for 1,000 events. pgx encodes an array parameter element by
// element through an interface (boxing each string) into a buffer it
// shrinks back after every statement, so each append grew that buffer and
// the message buffer from nothing again: a profile of a producer
// appending batches of 1,000 showed that encoding at about half of the
// client's CPU, most of it allocating and growing buffers. The fast path
// of an append therefore encodes its parameters itself, in PostgreSQL's
// binary array format, into a buffer kept between appends, and runs the
// statement through pgconn. A connection with a query tracer keeps pgx's
// own path, so that its traces still see the append.

// Type OIDs of the append's parameters.
const (
	oidText      = 25
	oidInt8      = 20
	oidInt4      = 23
	oidTextArray = 1009
	oidInt4Array = 1007
	oidInt8Array = 1016
)

// wireBuf holds a statement's binary parameters.
type wireBuf struct {
	buf  []byte
	ends []int // where each parameter ends in buf
	vals [][]byte
	fmts []int16
}

// maxKeptWire bounds the buffer a wireBuf keeps for the next append; a
// larger one (a batch of very large payloads) is left to the collector.
const maxKeptWire = 4 << 20

var wireBufs = sync.Pool{New: func() any { return new(wireBuf) }}

func getWire() *wireBuf {
	w := wireBufs.Get().(*wireBuf)
	w.buf, w.ends, w.vals, w.fmts = w.buf[:0], w.ends[:0], w.vals[:0], w.fmts[:0]
	return w
}

func putWire(w *wireBuf) {
	if cap(w.buf) > maxKeptWire {
		return
	}
	clear(w.vals)
	wireBufs.Put(w)
}

// end closes the parameter being written.
func (w *wireBuf) end() { w.ends = append(w.ends, len(w.buf)) }

// params slices buf into the parameters, once all are written (appends
// may move buf).
func (w *wireBuf) params() ([][]byte, []int16) {
	start := 0
	for _, end := range w.ends {
		w.vals = append(w.vals, w.buf[start:end:end])
		w.fmts = append(w.fmts, 1)
		start = end
	}
	return w.vals, w.fmts
}

func (w *wireBuf) u32(v uint32) { w.buf = binary.BigEndian.AppendUint32(w.buf, v) }

// arrayHeader writes a one-dimensional array header of n elements.
func (w *wireBuf) arrayHeader(n int, hasNull bool, elem uint32) {
	w.u32(1)
	if hasNull {
		w.u32(1)
	} else {
		w.u32(0)
	}
	w.u32(elem)
	w.u32(uint32(n))
	w.u32(1) // lower bound
}

// int8 writes a bigint parameter.
func (w *wireBuf) int8(v int64) {
	w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(v))
	w.end()
}

// text writes a text parameter.
func (w *wireBuf) text(s string) {
	w.buf = append(w.buf, s...)
	w.end()
}

// textArray writes a text[] parameter of n elements, element i being
// at(i); nil is NULL.
func (w *wireBuf) textArray(n int, at func(int) []byte) {
	size, hasNull := 20, false
	for i := range n {
		s := at(i)
		size += 4 + len(s)
		hasNull = hasNull || s == nil
	}
	w.buf = slices.Grow(w.buf, size)
	w.arrayHeader(n, hasNull, oidText)
	for i := range n {
		s := at(i)
		if s == nil {
			w.u32(0xFFFFFFFF)
			continue
		}
		w.u32(uint32(len(s)))
		w.buf = append(w.buf, s...)
	}
	w.end()
}

// stringArray is textArray over strings (never NULL).
func (w *wireBuf) stringArray(n int, at func(int) string) {
	size := 20
	for i := range n {
		size += 4 + len(at(i))
	}
	w.buf = slices.Grow(w.buf, size)
	w.arrayHeader(n, false, oidText)
	for i := range n {
		s := at(i)
		w.u32(uint32(len(s)))
		w.buf = append(w.buf, s...)
	}
	w.end()
}

func (w *wireBuf) int4Array(n int, at func(int) int32) {
	w.buf = slices.Grow(w.buf, 20+8*n)
	w.arrayHeader(n, false, oidInt4)
	for i := range n {
		w.u32(4)
		w.u32(uint32(at(i)))
	}
	w.end()
}

func (w *wireBuf) int8Array(n int, at func(int) int64) {
	w.buf = slices.Grow(w.buf, 20+12*n)
	w.arrayHeader(n, false, oidInt8)
	for i := range n {
		w.u32(8)
		w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(at(i)))
	}
	w.end()
}

// wirePath is how a connection runs statements whose parameters a
// backend encodes.
type wirePath int

const (
	// wireOff: through pgx (a connection with a query tracer, which sees
	// only pgx's own path, or one whose server types differ from the
	// encoding's).
	wireOff wirePath = iota
	// wirePrepared: prepared once per connection, as pgx's default mode
	// (QueryExecModeCacheStatement) does.
	wirePrepared
	// wireUnnamed: sent unnamed with every run, as pgx's other modes do,
	// so that it works behind a transaction pooler.
	wireUnnamed
)

// wireMaxPrepared bounds the append statements a connection keeps
// prepared: one per schema whose backend appended through it (about 160
// kB of server memory each). A pool shared by the backends of many
// schemas deallocates the least recently prepared one beyond it, as pgx's
// statement cache does with its own statements.
const wireMaxPrepared = 8

// wireConn is what a connection knows of the wire path: read from the
// connection's own configuration (a tracer or an exec mode set in a
// pool's BeforeConnect counts), once, and kept in the connection's
// CustomData.
type wireConn struct {
	path     wirePath
	prepared []string // the statements prepared by wireRun, least recent first
}

const wireConnKey = "rheo.postgres.wire"

func wireConnOf(conn *pgx.Conn) *wireConn {
	data := conn.PgConn().CustomData()
	if wc, ok := data[wireConnKey].(*wireConn); ok {
		return wc
	}
	cfg := conn.Config()
	wc := &wireConn{path: wireUnnamed}
	switch {
	case cfg.Tracer != nil:
		wc.path = wireOff
	case cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement:
		wc.path = wirePrepared
	}
	data[wireConnKey] = wc
	return wc
}

// prepare prepares sql on conn (named by its text, as pgx names what
// Prepare is given), deallocating the least recently prepared statement
// beyond wireMaxPrepared.
func (wc *wireConn) prepare(ctx context.Context, conn *pgx.Conn, sql string) (*pgconn.StatementDescription, error) {
	if i := slices.Index(wc.prepared, sql); i < 0 {
		if len(wc.prepared) >= wireMaxPrepared {
			if err := conn.Deallocate(ctx, wc.prepared[0]); err != nil {
				return nil, err
			}
			wc.prepared = slices.Delete(wc.prepared, 0, 1)
		}
		wc.prepared = append(wc.prepared, sql)
	} else if i < len(wc.prepared)-1 {
		wc.prepared = append(slices.Delete(wc.prepared, i, i+1), sql)
	}
	return conn.Prepare(ctx, sql, sql)
}

// wireQuery runs sql with the binary parameters of w (of types oids) on
// conn, whose wire state is wc, and calls row with each result row's
// binary values.
func wireQuery(ctx context.Context, conn *pgx.Conn, wc *wireConn, sql string, oids []uint32, w *wireBuf, row func([][]byte) error) error {
	vals, fmts := w.params()
	for attempt := 0; ; attempt++ {
		err := wireRun(ctx, conn, wc, sql, oids, vals, fmts, row)
		var pe *pgconn.PgError
		if err != nil && wc.path == wirePrepared && attempt == 0 && errors.As(err, &pe) && (pe.Code == "0A000" || pe.Code == "26000") {
			// The statement is gone (DEALLOCATE, DISCARD ALL) or no
			// longer fits the tables (0A000, which the statement's
			// fixed result types leave to other changes). Neither ran
			// it: prepare it anew and run it once more, as pgx does
			// with the statements it caches.
			if err := conn.Deallocate(ctx, sql); err != nil {
				return err
			}
			continue
		}
		return err
	}
}

func wireRun(ctx context.Context, conn *pgx.Conn, wc *wireConn, sql string, oids []uint32, vals [][]byte, fmts []int16, row func([][]byte) error) error {
	results := []int16{1}
	var rr *pgconn.ResultReader
	if wc.path == wirePrepared {
		sd, err := wc.prepare(ctx, conn, sql)
		if err != nil {
			return err
		}
		if !slices.Equal(sd.ParamOIDs, oids) {
			return errWireTypes
		}
		rr = conn.PgConn().ExecPrepared(ctx, sd.Name, vals, fmts, results)
	} else {
		rr = conn.PgConn().ExecParams(ctx, sql, vals, oids, fmts, results)
	}
	var rowErr error
	for rr.NextRow() {
		if rowErr == nil {
			rowErr = row(rr.Values())
		}
	}
	if _, err := rr.Close(); err != nil {
		return err
	}
	return rowErr
}

// errWireTypes reports a prepared statement whose parameter types, as the
// server resolved them, are not those of the encoding (a search_path that
// puts a type of another schema before pg_catalog's): caught before
// anything is sent, and the connection then runs the statement through
// pgx, which encodes for whatever types the server asks.
var errWireTypes = errors.New("postgres: append statement parameter types differ from their encoding")
