package pglog

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestMain removes the benchmarks' generated log after the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if big.dir != "" {
		os.RemoveAll(big.dir)
	}
	os.Exit(code)
}

// bigSize is the size of the benchmarks' log file: 1 GiB.
const bigSize = 1 << 30

// big is the benchmarks' log, generated once per test binary run (it takes a few seconds).
var big struct {
	once  sync.Once
	dir   string
	path  string
	lines int
	err   error
}

// bigLog returns Dirs holding one day's jsonlog file of bigSize bytes: lines as PostgreSQL 15 writes
// them (connections, durations with and without their statement, checkpoints, errors with a statement),
// about 250 bytes on average (the size of PostgreSQL 15's shortest lines), 1 in 100 an ERROR.
func bigLog(b *testing.B) Dirs {
	b.Helper()
	big.once.Do(func() {
		big.dir, big.err = os.MkdirTemp("", "pglog-bench-")
		if big.err != nil {
			return
		}
		big.path = filepath.Join(big.dir, "postgresql-2026-11-25.json")
		big.lines, big.err = writeBigLog(big.path, bigSize)
	})
	if big.err != nil {
		b.Fatal(big.err)
	}
	return Dirs{Live: big.dir}
}

func writeBigLog(path string, size int64) (int, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	var written int64
	n := 0
	for written < size {
		ts := t0.Add(time.Duration(n)*17*time.Millisecond).Format("2006-01-02 15:04:05.000") + " UTC"
		pid := 10000 + n%5000
		var line string
		switch n % 100 {
		case 0:
			line = fmt.Sprintf(`{"timestamp":"%s","user":"app","dbname":"app","pid":%d,"remote_host":"10.0.0.7","session_id":"6b06e181.%x","line_num":%d,"ps":"INSERT","session_start":"2026-11-25 00:00:00 UTC","vxid":"3/%d","txid":%d,"error_severity":"ERROR","state_code":"23505","message":"duplicate key value violates unique constraint \"orders_pkey\"","detail":"Key (id)=(%d) already exists.","statement":"insert into orders (id, total) values ($1, $2)","application_name":"api","backend_type":"client backend","query_id":0}`,
				ts, pid, pid, n%97, n, 700+n, n)
		case 1, 2, 3, 4, 5, 6, 7, 8, 9, 10:
			line = fmt.Sprintf(`{"timestamp":"%s","pid":%d,"session_id":"6b06e17c.ba8","line_num":%d,"session_start":"2026-11-25 00:00:00 UTC","txid":0,"error_severity":"LOG","message":"checkpoint starting: time","backend_type":"checkpointer","query_id":0}`,
				ts, 2984, n)
		case 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30:
			line = fmt.Sprintf(`{"timestamp":"%s","user":"app","dbname":"app","pid":%d,"session_id":"6b06e181.%x","line_num":1,"ps":"authentication","error_severity":"LOG","message":"connection authorized: user=app database=app","backend_type":"client backend","query_id":0}`,
				ts, pid, pid)
		case 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50:
			line = fmt.Sprintf(`{"timestamp":"%s","user":"app","dbname":"app","pid":%d,"session_id":"6b06e181.%x","line_num":%d,"error_severity":"LOG","message":"duration: %d.%03d ms  statement: select * from orders where id = %d","backend_type":"client backend","query_id":0}`,
				ts, pid, pid, n%97, n%900, n%1000, n)
		default: // log_duration = on
			line = fmt.Sprintf(`{"timestamp":"%s","user":"app","dbname":"app","pid":%d,"session_id":"6b06e181.%x","line_num":%d,"error_severity":"LOG","message":"duration: %d.%03d ms","backend_type":"client backend","query_id":0}`,
				ts, pid, pid, n%97, n%900, n%1000)
		}
		k, err := w.WriteString(line + "\n")
		if err != nil {
			f.Close()
			return 0, err
		}
		written += int64(k)
		n++
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Sync(); err != nil { // clean pages, so that evict can drop them
		f.Close()
		return 0, err
	}
	return n, f.Close()
}

func reportSize(b *testing.B) {
	st, err := os.Stat(big.path)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(st.Size())/float64(big.lines), "B/line")
}

// BenchmarkNewest200 is what a log viewer's first page costs: Read of the newest 200 entries of a 1 GiB
// file, from its end backwards.
func BenchmarkNewest200(b *testing.B) {
	d := bigLog(b)
	b.ReportAllocs()
	Read(d, Query{Limit: 200}) // warm: the page cache holds what it reads (a Cold benchmark may have run)
	for b.Loop() {
		es, _, err := Read(d, Query{Limit: 200, ExcludeUsers: []string{"appliance_admin"}})
		if err != nil || len(es) != 200 {
			b.Fatalf("%d entries, %v", len(es), err)
		}
	}
	reportSize(b)
}

// BenchmarkNewest200Cold is BenchmarkNewest200 with the file's pages dropped from the page cache before
// each read (outside the timed part): the first page of a viewer after the file was last read long ago.
func BenchmarkNewest200Cold(b *testing.B) {
	d := bigLog(b)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		evict(b, big.path)
		b.StartTimer()
		es, _, err := Read(d, Query{Limit: 200, ExcludeUsers: []string{"appliance_admin"}})
		if err != nil || len(es) != 200 {
			b.Fatalf("%d entries, %v", len(es), err)
		}
	}
}

// BenchmarkNewest200Errors is the same with severity=error: 1 line in 100 matches, so about 20,000
// lines (5 MB) are read backwards.
func BenchmarkNewest200Errors(b *testing.B) {
	d := bigLog(b)
	b.ReportAllocs()
	for b.Loop() {
		es, _, err := Read(d, Query{Limit: 200, Severities: map[string]bool{"error": true}})
		if err != nil || len(es) != 200 {
			b.Fatalf("%d entries, %v", len(es), err)
		}
	}
}

// BenchmarkNaiveForward200 is the reader that Read's backward read replaces: read the whole file
// forwards, keep the last 200 lines, decode only those. It is the cheapest forward reader (it decodes
// 200 lines, not all of them).
func BenchmarkNaiveForward200(b *testing.B) {
	bigLog(b)
	b.ReportAllocs()
	naiveNewest(big.path, 200) // warm: the page cache holds the whole file (a Cold benchmark may have run)
	for b.Loop() {
		es, err := naiveNewest(big.path, 200)
		if err != nil || len(es) != 200 {
			b.Fatalf("%d entries, %v", len(es), err)
		}
	}
}

// BenchmarkNaiveForward200Cold is BenchmarkNaiveForward200 from a cold page cache.
func BenchmarkNaiveForward200Cold(b *testing.B) {
	bigLog(b)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		evict(b, big.path)
		b.StartTimer()
		es, err := naiveNewest(big.path, 200)
		if err != nil || len(es) != 200 {
			b.Fatalf("%d entries, %v", len(es), err)
		}
	}
}

func naiveNewest(path string, n int) ([]Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ring := make([][]byte, n)
	ends := make([]int64, n)
	k := 0
	_, err = readForward(f, 0, func(line []byte, end int64) bool {
		ring[k%n] = append(ring[k%n][:0], line...)
		ends[k%n] = end
		k++
		return true
	})
	if err != nil && err != io.EOF {
		return nil, err
	}
	m := newMatcher(Query{}, false)
	var out []Entry
	for i := max(0, k-n); i < k; i++ {
		if e, _, ok := m.check(ring[i%n]); ok {
			e.Cursor = pos{dayOf(time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)), ends[i%n]}.String()
			out = append(out, e)
		}
	}
	return out, nil
}
