package pgstat

import (
	"fmt"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// comm may hold spaces and parentheses; fields: state ppid ... utime(14) stime(15) cutime(16) cstime(17) ... rss(24).
	line := "4242 (postgres: a) (b) S 4200 4242 4242 0 -1 4194560 3000 0 0 0 120 30 7 3 20 0 1 0 12345 222707712 2048 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	s, ok := parseStat([]byte(line))
	if !ok || s.ppid != 4200 || s.ticks != 160 || s.rss != 2048 || s.start != 12345 {
		t.Errorf("parseStat: %+v %v", s, ok)
	}
	if _, ok := parseStat([]byte("4242 (cut) S 1 2 3")); ok {
		t.Error("parseStat accepted a truncated line")
	}
}

func TestParseIndexDDL(t *testing.T) {
	for _, tc := range []struct {
		ddl, table, method, columns string
	}{
		{"CREATE INDEX ON public.orders USING btree (customer_id)", "public.orders", "btree", "[customer_id]"},
		{`CREATE INDEX ON "My Schema"."Odd ""table""" USING hash ("Col", b text_pattern_ops)`, `"My Schema"."Odd ""table"""`, "hash", `[Col b]`},
		{"CREATE INDEX ON orders USING gist (geom)", "orders", "gist", "[geom]"},
	} {
		d, err := parseIndexDDL(tc.ddl)
		if err != nil || d.table != tc.table || d.method != tc.method || fmt.Sprint(d.columns) != tc.columns {
			t.Errorf("parseIndexDDL(%q) = %+v, %v", tc.ddl, d, err)
		}
	}
	for _, bad := range []string{"", "CREATE INDEX ON t USING btree", "CREATE INDEX ON t USING btree (a", "DROP TABLE t", `CREATE INDEX ON "t USING btree (a)`, "CREATE INDEX ON t USING btree (a) x"} {
		if d, err := parseIndexDDL(bad); err == nil {
			t.Errorf("parseIndexDDL(%q) = %+v", bad, d)
		}
	}
}

func TestQueryHash(t *testing.T) {
	h := QueryHash("app", "SELECT * FROM t WHERE a = $1")
	if len(h) != 32 || h != QueryHash("app", "SELECT *\n\tFROM t  WHERE a = $1 ") {
		t.Errorf("hash %q, or white space matters", h)
	}
	if h == QueryHash("other", "SELECT * FROM t WHERE a = $1") || h == QueryHash("app", "SELECT * FROM t WHERE b = $1") {
		t.Error("the database or the text does not matter")
	}
	if QueryHash("ab", "c") == QueryHash("a", "bc") {
		t.Error("database and text run together")
	}
}

// TestReadWholeProcFile: a /proc file longer than a page (which one read(2) of such a file never passes)
// is read to its end.
func TestReadWholeProcFile(t *testing.T) {
	b, ok := readWholeProcFile("/proc/self/smaps", make([]byte, 0, 16))
	if !ok || len(b) <= 4096 || b[len(b)-1] != '\n' {
		t.Fatalf("read %d bytes (%v), want the whole of /proc/self/smaps (more than a page)", len(b), ok)
	}
	one := make([]byte, 64<<10)
	if n, _ := readProcFile("/proc/self/smaps", one); n > 4096 {
		t.Logf("this kernel gave %d bytes in one read", n)
	}
	if _, ok := readWholeProcFile("/proc/no-such-file", nil); ok {
		t.Fatal("a missing file was read")
	}
}

func TestPendingBytes(t *testing.T) {
	const seg = 16 << 20
	at := func(sec int64) *time.Time { v := time.Unix(sec, 0); return &v }
	for _, c := range []struct {
		name string
		a    Archiver
		lsn  int64
		want int64
	}{
		{"nothing archived, nothing failed", Archiver{}, 5 * seg, 0},
		{"archived up to segment 2", Archiver{ArchivedWAL: "000000010000000000000002", ArchivedAt: at(10)}, 5*seg + 100, 2*seg + 100},
		{"never archived, segment 1 failing", Archiver{FailedWAL: "000000010000000000000001", FailedAt: at(10)}, 3*seg + 7, 2*seg + 7},
		{"archived 2, then 3 failing", Archiver{ArchivedWAL: "000000010000000000000002", ArchivedAt: at(10), FailedWAL: "000000010000000000000003", FailedAt: at(20)}, 6 * seg, 3 * seg},
		{"an old failure, archived since", Archiver{ArchivedWAL: "000000010000000000000004", ArchivedAt: at(30), FailedWAL: "000000010000000000000001", FailedAt: at(20)}, 6 * seg, seg},
	} {
		if got := pendingBytes(&c.a, c.lsn, seg); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestIndexCovers: an existing index provides a suggestion when its method is the suggestion's and its
// leading key columns are the suggestion's columns.
func TestIndexCovers(t *testing.T) {
	pkey := existingIndex{method: "btree", columns: []string{"id"}}
	pair := existingIndex{method: "btree", columns: []string{"status", "total"}}
	for _, tc := range []struct {
		idx     existingIndex
		method  string
		columns []string
		want    bool
	}{
		{pkey, "btree", []string{"id"}, true},
		{pkey, "hash", []string{"id"}, false},
		{pkey, "btree", []string{"id", "status"}, false},
		{pair, "btree", []string{"status"}, true},
		{pair, "btree", []string{"total", "status"}, true},
		{pair, "btree", []string{"total"}, false},
		{existingIndex{method: "btree", columns: []string{""}}, "btree", []string{""}, true}, // never asked: the advisor's columns are names
		{pkey, "btree", nil, false},
	} {
		if got := tc.idx.covers(tc.method, tc.columns); got != tc.want {
			t.Errorf("%+v covers %s %v: %v, want %v", tc.idx, tc.method, tc.columns, got, tc.want)
		}
	}
}
