package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
)

// BenchmarkUpEphemeralVsEntrypoint runs, alternating (ours first on even rounds, the reference first on
// odd ones), BENCH_RUNS (default 10) rounds of BenchmarkUpEphemeral's run and of a native replay of what the
// official postgres image's docker-entrypoint.sh does on a first `docker run postgres` with an empty volume
// (docker-library/postgres, 15/bookworm/docker-entrypoint.sh, see entrypointColdStart), with this
// machine's PostgreSQL 15 as the instances' OS user. No Docker here: the reference has no image pull, no
// container start, no overlay filesystem, so it is a lower bound for `docker run postgres`. It reports the
// medians and the ratios ours / reference, to the first SELECT 1 and from the stop to nothing left.
func BenchmarkUpEphemeralVsEntrypoint(b *testing.B) {
	runs := envInt(b, "BENCH_RUNS", 10)
	b.Logf("load average before: %s", loadavg())
	bin, args, templates := upEphemeralSetup(b)
	pg, err := postgres.FindBinaries("")
	if err != nil {
		b.Fatal(err)
	}
	u, err := daemon.DefaultOSUser()
	if err != nil {
		b.Fatal(err)
	}
	parent := referenceParent()
	var oursSel, oursDown, refSel, refDown []time.Duration
	for i := range runs {
		ours := func() {
			_, sel, down := upEphemeralOnce(b, bin, args, templates, true)
			oursSel, oursDown = append(oursSel, sel), append(oursDown, down)
		}
		ref := func() {
			sel, down, steps := entrypointColdStart(b, u, pg, parent)
			fmt.Fprintf(os.Stderr, "reference run: first SELECT 1 %v, stop -> nothing left %v (%s)\n",
				sel.Round(time.Millisecond), down.Round(time.Millisecond), steps)
			refSel, refDown = append(refSel, sel), append(refDown, down)
		}
		if i%2 == 0 {
			ours()
			ref()
		} else {
			ref()
			ours()
		}
	}
	b.Logf("%d rounds, alternating; reference data directory under %s", runs, parent)
	b.Logf("up --ephemeral -> first project's SELECT 1: median %v (%s ms)", median(oursSel).Round(time.Millisecond), joinMS(oursSel))
	b.Logf("docker-entrypoint.sh steps -> first SELECT 1: median %v (%s ms)", median(refSel).Round(time.Millisecond), joinMS(refSel))
	b.Logf("ratio ours / reference: %.2f to the first SELECT 1; teardown %v / %v = %.2f",
		ms(median(oursSel))/ms(median(refSel)), median(oursDown).Round(time.Millisecond), median(refDown).Round(time.Millisecond),
		ms(median(oursDown))/ms(median(refDown)))
	b.Logf("load average after: %s", loadavg())
	b.ReportMetric(ms(median(oursSel)), "ms-ours-select1")
	b.ReportMetric(ms(median(refSel)), "ms-ref-select1")
	b.ReportMetric(ms(median(oursSel))/ms(median(refSel)), "ratio-select1")
	b.ReportMetric(ms(median(oursDown)), "ms-ours-teardown")
	b.ReportMetric(ms(median(refDown)), "ms-ref-teardown")
}

// referenceParent is where the reference's data directory goes: BENCH_DATA_DIR, else where `up
// --ephemeral` puts its own (/dev/shm when TMPDIR is unset and it is a tmpfs, else the temporary
// directory), so both write to the same kind of filesystem.
func referenceParent() string {
	if d := os.Getenv("BENCH_DATA_DIR"); d != "" {
		return d
	}
	var fs syscall.Statfs_t
	if os.Getenv("TMPDIR") == "" && syscall.Statfs("/dev/shm", &fs) == nil && fs.Type == 0x01021994 {
		return "/dev/shm"
	}
	return os.TempDir()
}

// entrypointColdStart replays docker-entrypoint.sh's first start (empty PGDATA, POSTGRES_PASSWORD set,
// POSTGRES_USER and POSTGRES_DB left at "postgres", no init scripts), step by step as the script runs them,
// and returns the time from the start to the first SELECT 1 answered over TCP with the password, and from
// the stop (SIGINT: the image's STOPSIGNAL) to the server gone and its directory removed:
//
//  1. docker_init_database_dir: initdb --username=postgres --pwfile=<password file> (no -A: initdb's
//     default, trust for local connections; the image's LANG is en_US.utf8, this machine has only C.UTF-8);
//  2. pg_setup_hba_conf: `postgres -C password_encryption` (scram-sha-256), then "host all all all
//     scram-sha-256" appended to pg_hba.conf;
//  3. docker_temp_server_start: pg_ctl -w start with an empty listen_addresses (the unix socket only);
//  4. docker_setup_db: psql's "SELECT 1 FROM pg_database WHERE datname = :'db'" over the socket (the script
//     runs it always; the CREATE DATABASE that follows only when POSTGRES_DB is missing: not here);
//  5. docker_temp_server_stop: pg_ctl -m fast -w stop;
//  6. exec postgres: the real server, listening on TCP (the image's listen_addresses = '*'; here
//     127.0.0.1 and a free port); the client connects (retrying every 5 ms) and runs SELECT 1.
//
// The socket directory is the data directory's parent (the image's is /var/run/postgresql).
func entrypointColdStart(b *testing.B, u *daemon.OSUser, pg postgres.Binaries, parent string) (sel, down time.Duration, steps string) {
	ctx := b.Context()
	prog := func(name string) string {
		p, err := pg.Path(name)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	port, err := postgres.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	root, err := os.MkdirTemp(parent, "entrypoint-ref-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(root)
	if err := u.Mkdir(root, 0o700); err != nil {
		b.Fatal(err)
	}
	pgdata := filepath.Join(root, "data")
	const password = "reference-password"
	run := func(stdin string, program string, args ...string) string {
		cmd := u.Command(program, args...)
		cmd.Env = append(cmd.Env, "LANG=C.UTF-8", "PGHOST="+root, "PGPORT="+strconv.Itoa(port))
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("%s %s: %v\n%s", filepath.Base(program), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	var marks []string
	t0 := time.Now()
	mark := func(name string) { marks = append(marks, fmt.Sprintf("%s %.0f", name, ms(time.Since(t0)))) }

	// The script hands initdb the password through a pipe (process substitution); a file the user can read.
	pwfile := filepath.Join(root, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := u.ChownOne(pwfile); err != nil {
		b.Fatal(err)
	}
	run("", prog("initdb"), "-D", pgdata, "--username=postgres", "--pwfile="+pwfile)
	mark("initdb")
	auth := strings.TrimSpace(run("", prog("postgres"), "-D", pgdata, "-C", "password_encryption"))
	f, err := os.OpenFile(filepath.Join(pgdata, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := fmt.Fprintf(f, "\nhost all all all %s\n", auth); err != nil {
		b.Fatal(err)
	}
	f.Close()
	mark("hba")
	sock := "-c unix_socket_directories=" + root + " -p " + strconv.Itoa(port)
	// -l: the server would hold the output pipe open (the script's server writes to the container's stderr)
	run("", prog("pg_ctl"), "-D", pgdata, "-l", filepath.Join(root, "temp-server.log"), "-o", "-c listen_addresses='' "+sock, "-w", "start")
	mark("temp-start")
	if out := run("SELECT 1 FROM pg_database WHERE datname = :'db' ;\n", prog("psql"), "-v", "ON_ERROR_STOP=1",
		"--username", "postgres", "--no-password", "--no-psqlrc", "--dbname", "postgres", "--set", "db=postgres", "--tuples-only"); strings.TrimSpace(out) != "1" {
		b.Fatalf("psql: the database postgres is missing: %q", out)
	}
	mark("psql")
	run("", prog("pg_ctl"), "-D", pgdata, "-m", "fast", "-w", "stop")
	mark("temp-stop")
	server := u.Command(prog("postgres"), "-D", pgdata, "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+root, "-p", strconv.Itoa(port))
	server.Env = append(server.Env, "LANG=C.UTF-8")
	if err := server.Start(); err != nil {
		b.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			server.Process.Kill()
			server.Wait()
		}
	}()
	url := fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", password, port)
	for tries := 1; ; tries++ {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			var one int
			err = conn.QueryRow(ctx, "SELECT 1").Scan(&one)
			conn.Close(ctx)
			if err != nil {
				b.Fatal(err)
			}
			break
		}
		if tries > 2000 {
			b.Fatalf("the server never answered: %v", err)
		}
		time.Sleep(pollInterval)
	}
	sel = time.Since(t0)
	mark("select1")

	t1 := time.Now()
	server.Process.Signal(syscall.SIGINT)
	var ee *exec.ExitError
	if err := server.Wait(); err != nil && !errors.As(err, &ee) {
		b.Fatal(err)
	}
	stopped = true
	if err := os.RemoveAll(root); err != nil {
		b.Fatal(err)
	}
	down = time.Since(t1)
	return sel, down, "ms from the start: " + strings.Join(marks, ", ")
}
