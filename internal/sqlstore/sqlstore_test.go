package sqlstore

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDollarRebindNumbersPlaceholders(t *testing.T) {
	require.Equal(t, "SELECT a FROM t WHERE x = $1 AND y IN ($2, $3)",
		DollarRebind("SELECT a FROM t WHERE x = ? AND y IN (?, ?)"))
	require.Equal(t, "SELECT 1", DollarRebind("SELECT 1"))
	q := "INSERT INTO t VALUES (" + Placeholders(12) + ")"
	require.True(t, strings.HasSuffix(DollarRebind(q), "$11, $12)"))
}

type fakeDialect struct{ Dialect }

func (fakeDialect) Types() map[string]string {
	return map[string]string{"{IDPK}": "SERIAL PRIMARY KEY", "{TEXT}": "TEXT", "{JSON}": "json", "{TABLEOPTS}": "",
		"{LEASES_BY_ATTEMPT}": "CREATE INDEX x ON t (a)", "{RETRIED_LEASES}": "CREATE INDEX y ON t (b)"}
}

func TestMigrationsSubstituteEveryToken(t *testing.T) {
	ms, err := Migrations(fakeDialect{})
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	for i, m := range ms {
		require.Equal(t, i+1, m.Version, "versions are contiguous from 1")
		require.NotEmpty(t, m.Statements)
		for _, st := range m.Statements {
			require.NotContains(t, st, "{", "%s: unsubstituted token in %q", m.Name, st)
			require.NotContains(t, st, "--", "%s: comment left in %q", m.Name, st)
		}
	}
	require.Contains(t, strings.Join(ms[0].Statements, ";"), "payload json NOT NULL")
}

func TestBuilderBindsEveryValue(t *testing.T) {
	var b Builder
	b.S("SELECT 1 WHERE a = ").Arg("x").S(" AND b IN (")
	List(&b, []int{1, 2, 3}).S(")")
	require.Equal(t, "SELECT 1 WHERE a = ? AND b IN (?, ?, ?)", b.SQL())
	require.Equal(t, []any{"x", 1, 2, 3}, b.Args())
}

func TestSplitHead(t *testing.T) {
	for _, tc := range []struct {
		head, id, etype, ekey string
		ok                    bool
	}{
		{"e1\x1forder.created\x1fcust-1", "e1", "order.created", "cust-1", true},
		{"e1\x1f\x1f", "e1", "", "", true},
		{"e1\x1ft\x1f", "e1", "t", "", true},
		{"e1\x1f\x1fk", "e1", "", "k", true},
		{"e1", "", "", "", false},
		{"e1\x1ft", "", "", "", false},
	} {
		id, etype, ekey, ok := splitHead(tc.head)
		if ok != tc.ok || ok && (id != tc.id || etype != tc.etype || ekey != tc.ekey) {
			t.Errorf("splitHead(%q) = %q, %q, %q, %v; want %q, %q, %q, %v", tc.head, id, etype, ekey, ok, tc.id, tc.etype, tc.ekey, tc.ok)
		}
	}
}
