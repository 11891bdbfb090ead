package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestScaleBareSmoke runs -scale-bare on short tables with the default
// -scale-stores: it notes the stores it skips, prints a row with positive
// times for every variant on SQLite and PostgreSQL, and leaves no schema
// behind.
func TestScaleBareSmoke(t *testing.T) {
	ctx, cfg, _ := smokeEnv(t)
	cfg.scaleStores, cfg.scaleEvents, cfg.scaleCycles, cfg.parts, cfg.workers = "memory,sqlite,postgres,redis", 2000, 3, 1, 1
	var out bytes.Buffer
	if err := scaleBare(ctx, cfg, &out); err != nil {
		t.Fatalf("scale-bare: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "skipping memory, redis") {
		t.Errorf("no note of the skipped stores:\n%s", out.String())
	}
	for _, store := range []string{"sqlite", "postgres"} {
		for _, v := range keyIndexVariants {
			re := regexp.MustCompile(`(?m)^` + store + ` +` + regexp.QuoteMeta(v.name) + ` +([0-9.]+) µs +([0-9.]+) µs +([0-9.]+)× *$`)
			m := re.FindStringSubmatch(out.String())
			if m == nil {
				t.Errorf("no table row for %s, %s:\n%s", store, v.name, out.String())
				continue
			}
			for _, f := range m[1:] {
				if x, err := strconv.ParseFloat(f, 64); err != nil || x <= 0 {
					t.Errorf("%s, %s: %q in %q, want a positive figure", store, v.name, f, m[0])
				}
			}
		}
	}
	checkNothingLeft(ctx, t, cfg)
}

// TestScaleBareFlags: -scale-bare refuses a long table shorter than the
// small one, no cycles, and a store list without SQLite or PostgreSQL,
// before it connects to anything.
func TestScaleBareFlags(t *testing.T) {
	for _, cfg := range []config{
		{scaleStores: "sqlite", scaleEvents: 999, scaleCycles: 1},
		{scaleStores: "sqlite", scaleEvents: 1000, scaleCycles: 0},
		{scaleStores: "memory,redis", scaleEvents: 1000, scaleCycles: 1},
	} {
		if err := scaleBare(context.Background(), cfg, &bytes.Buffer{}); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// TestScaleBareCancel cancels -scale-bare as its cycles begin on each
// store, as Ctrl-C does: it returns the cancellation, and the store's
// schema or file is gone.
func TestScaleBareCancel(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			ctx, cfg, e := smokeEnv(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			out := &cancelOn{word: " filled ", cancel: cancel}
			_, err := runKeyIndex(ctx, e, []string{store}, 2000, 3, out)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v, want the cancellation\n%s", err, out.buf.String())
			}
			left, err := filepath.Glob(filepath.Join(e.tmp, "*"))
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 0 {
				t.Errorf("left %v behind", left)
			}
			checkNothingLeft(context.Background(), t, cfg)
		})
	}
}

// cancelOn records what is written to it and calls cancel once a write
// contains word.
type cancelOn struct {
	buf    bytes.Buffer
	word   string
	cancel func()
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.buf.Write(p)
	if strings.Contains(string(p), c.word) {
		c.cancel()
	}
	return len(p), nil
}
