package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
	"github.com/theappliance/appliance/appliance/wake"
)

// BenchmarkSpliceFront measures the cost of a TCP splice front (appliance/wake's Splice, the relay a
// front in the path of every connection would run) for pgbench -S (select-only) at 16 clients: runs
// straight to PostgreSQL and through the front alternate, each FRONT_BENCH_SECONDS (default 10) long,
// FRONT_BENCH_ROUNDS (default 3) times, with TLS (sslmode=require, what clients use) and without. It
// reports each run's TPS and the ratio of the means. See bench/README.md.
func BenchmarkSpliceFront(b *testing.B) {
	if _, err := exec.LookPath("pgbench"); err != nil {
		b.Fatalf("pgbench is required (postgresql-client): %v", err)
	}
	secs, rounds := envInt(b, "FRONT_BENCH_SECONDS", 10), envInt(b, "FRONT_BENCH_ROUNDS", 3)
	srv := pgtest.Start(b, postgres.Settings{MaxConnections: 50})
	pgPort := srv.Instance.Port

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(pgPort)))
				if err != nil {
					return
				}
				defer s.Close()
				wake.Splice(c, s)
			}()
		}
	}()
	frontPort := ln.Addr().(*net.TCPAddr).Port

	ctx := context.Background()
	pgb := func(port int, sslmode string, args ...string) string {
		cmd := exec.CommandContext(ctx, "pgbench", append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", postgres.AdminRole}, args...)...)
		cmd.Env = append(os.Environ(), "PGPASSWORD="+pgtest.AdminPassword, "PGSSLMODE="+sslmode, "PGDATABASE=postgres")
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("pgbench %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	pgb(pgPort, "disable", "-i", "-s", "1", "-q")
	tpsRe := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	run := func(port int, sslmode string) float64 {
		out := pgb(port, sslmode, "-S", "-c", "16", "-j", "2", "-T", strconv.Itoa(secs), "-n")
		m := tpsRe.FindStringSubmatch(out)
		if m == nil {
			b.Fatalf("no tps in pgbench's output:\n%s", out)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, sslmode := range []string{"require", "disable"} {
			var direct, front []float64
			for r := 0; r < rounds; r++ {
				// Alternate which goes first, so a drift of the machine's load falls on both alike.
				if r%2 == 0 {
					direct = append(direct, run(pgPort, sslmode))
					front = append(front, run(frontPort, sslmode))
				} else {
					front = append(front, run(frontPort, sslmode))
					direct = append(direct, run(pgPort, sslmode))
				}
			}
			md, mf := mean(direct), mean(front)
			b.Logf("sslmode=%s  direct tps %s mean %.0f | front tps %s mean %.0f | ratio %.3f",
				sslmode, fmtTPS(direct), md, fmtTPS(front), mf, mf/md)
			b.ReportMetric(mf/md, "ratio-"+sslmode)
		}
	}
	b.Logf("%d rounds of %d s each, ended %s", rounds, secs, time.Now().UTC().Format(time.RFC3339))
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func fmtTPS(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ",")
}
