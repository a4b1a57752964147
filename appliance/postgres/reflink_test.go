package postgres

import (
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/testtools"
)

// setupXFS is setup with the instances on a real XFS filesystem with reflinks, made for the test.
func setupXFS(t *testing.T) *bundle {
	t.Helper()
	b := setup(t)
	b.root = testtools.XFSMount(t, 2<<30)
	ok, err := ReflinkSupport(b.root)
	if err != nil || !ok {
		t.Fatalf("XFS with reflink=1 says reflinks: %v, %v", ok, err)
	}
	return b
}

// usedBytes is what the filesystem of dir has allocated.
func usedBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// TestReflinkSupport: ext4 (or tmpfs: the temporary directory here) has none, XFS made with reflink=1
// has them; the probe leaves nothing behind.
func TestReflinkSupport(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(tmp, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.EXT4_SUPER_MAGIC || st.Type == unix.TMPFS_MAGIC {
		if ok, err := ReflinkSupport(tmp); err != nil || ok {
			t.Errorf("the temporary directory (filesystem %#x): reflinks %v, %v; want false", st.Type, ok, err)
		}
	}
	mnt := testtools.XFSMount(t, 512<<20)
	if ok, err := ReflinkSupport(mnt); err != nil || !ok {
		t.Fatalf("XFS: reflinks %v, %v; want true", ok, err)
	}
	if entries, _ := os.ReadDir(mnt); len(entries) != 0 {
		t.Fatalf("the probe left %v", entries)
	}
	if _, err := ReflinkSupport(filepath.Join(mnt, "missing")); err == nil {
		t.Fatal("a missing directory: no error")
	}
}

// TestOnlineCopyByReflink: on XFS, an online copy of an instance under a stream of writes copies every
// file by reflink (the filesystem allocates a small part of what was copied), and the copy is consistent
// as of its backup's end: every transaction moved one unit into a ledger and appended one row to a log, so
// the copy's balances add up to its log's rows, its log is the source's up to its last row with the same
// contents, and that last row was written while the copy ran. The copy outlives its source: removed, the
// source takes nothing of the copy's data with it (extents are shared, the data is not).
func TestOnlineCopyByReflink(t *testing.T) {
	b := setupXFS(t)
	src := b.newInstance(t, "src", Settings{})
	conn := admin(t, src)
	exec1(t, conn, "CREATE TABLE public.ledger (k int PRIMARY KEY, bal int8 NOT NULL)")
	exec1(t, conn, "INSERT INTO public.ledger SELECT g, 0 FROM generate_series(1, 1000) g")
	exec1(t, conn, "CREATE TABLE public.log (id int8 PRIMARY KEY, k int NOT NULL, note text NOT NULL)")
	// 60 MB of padding, so that the copy has big files to clone while the writes go on.
	exec1(t, conn, "CREATE TABLE public.pad AS SELECT g, repeat(md5(g::text), 10) AS v FROM generate_series(1, 150000) g")
	exec1(t, conn, "CHECKPOINT")

	var before int64
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM public.log").Scan(&before); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var writeErr error
	writer := admin(t, src)
	going := make(chan struct{}) // closed after 50 writes, or when the writer ends
	started := sync.OnceFunc(func() { close(going) })
	wg.Go(func() {
		defer started()
		for id := int64(1); ctx.Err() == nil; id++ {
			if id == 50 {
				started()
			}
			_, err := writer.Exec(ctx, `WITH l AS (INSERT INTO public.log VALUES ($1::int8, ($1::int8 % 1000) + 1, md5($1::int8::text)) RETURNING k)
				UPDATE public.ledger SET bal = bal + 1 WHERE k = (SELECT k FROM l)`, id)
			if err != nil {
				if ctx.Err() == nil {
					writeErr = err
				}
				return
			}
		}
	})
	// The copy starts once the writes are going.
	select {
	case <-going:
	case <-t.Context().Done():
	}

	dir := filepath.Join(b.root, "copy")
	if err := b.user.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "pgdata")
	used := usedBytes(t, b.root)
	st, err := src.OnlineCopy(t.Context(), mustSession(t, src), dst, CopyOptions{Label: "reflink copy", Reflink: true})
	if err != nil {
		stop()
		wg.Wait()
		t.Fatal(err)
	}
	grown := usedBytes(t, b.root) - used
	var during int64
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM public.log").Scan(&during); err != nil {
		t.Fatal(err)
	}
	stop()
	wg.Wait()
	if writeErr != nil {
		t.Fatal(writeErr)
	}
	t.Logf("%+v; the filesystem grew by %d bytes", st, grown)
	if st.Reflinked != st.Files || st.Files < 500 || st.Bytes < 50<<20 {
		t.Fatalf("%d of %d files reflinked, %d bytes: want every file, and 50 MB at least", st.Reflinked, st.Files, st.Bytes)
	}
	// The writes during the copy unshare some blocks and the WAL grows: far less than a copy's bytes.
	if grown > st.Bytes/3 {
		t.Fatalf("the filesystem grew by %d bytes for %d bytes copied: not shared", grown, st.Bytes)
	}

	// The source is checked, then removed: the copy must start from its own files.
	var srcLog string
	var last int64
	cpInst, cp := startCopyInstance(t, b, dir)
	if err := cp.QueryRow(t.Context(), "SELECT coalesce(max(id), 0) FROM public.log").Scan(&last); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(t.Context(), "SELECT md5(string_agg(id || ':' || k || ':' || note, ',' ORDER BY id)) FROM public.log WHERE id <= $1", last).Scan(&srcLog); err != nil {
		t.Fatal(err)
	}
	conn.Close(context.Background())
	writer.Close(context.Background())
	if err := src.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(src.DataDir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the source's data directory is still there: %v", err)
	}
	// Its pages read back from disk, not from the server's buffers: a restart.
	cp.Close(context.Background())
	if err := cpInst.Restart(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	cp = admin(t, cpInst)
	var n, sum, pad int64
	var cpLog string
	err = cp.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM public.log), (SELECT sum(bal) FROM public.ledger),
		(SELECT md5(string_agg(id || ':' || k || ':' || note, ',' ORDER BY id)) FROM public.log), (SELECT count(*) FROM public.pad)`).Scan(&n, &sum, &cpLog, &pad)
	if err != nil {
		t.Fatal(err)
	}
	if n != last || sum != n || cpLog != srcLog || pad != 150000 {
		t.Fatalf("the copy holds %d log rows up to id %d, balances %d, log checksum %s (the source's %s), %d padding rows", n, last, sum, cpLog, srcLog, pad)
	}
	if last <= before || last > during {
		t.Fatalf("the copy's last write is %d: not one made while it ran (%d before, %d after)", last, before, during)
	}
	var checked int64
	if err := cp.QueryRow(t.Context(), "SELECT count(*) FROM public.pad WHERE v = repeat(md5(g::text), 10)").Scan(&checked); err != nil || checked != 150000 {
		t.Fatalf("the padding reads back %d intact rows of 150000 (%v)", checked, err)
	}
}

func mustSession(t *testing.T, inst *Instance) *pgx.Conn {
	t.Helper()
	c, err := inst.ConnectWith(t.Context(), adminPassword, "postgres", map[string]string{"statement_timeout": "0"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// treeSums is the SHA-256 of every regular file under root, by relative path.
func treeSums(t *testing.T, root string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRestoreByReflink: a base backup kept on XFS (pg_basebackup's, as the backup jobs write them into the
// local backup store) is restored into a new data directory by CopyTree: every file by reflink, the
// filesystem allocating a small part of it; the restored server starts and holds the backup's data; what
// it writes then leaves the stored backup byte for byte as it was (the extents were shared, the data is
// not), and so does the source's removal.
func TestRestoreByReflink(t *testing.T) {
	b := setupXFS(t)
	src := b.newInstance(t, "src", Settings{})
	conn := admin(t, src)
	exec1(t, conn, "CREATE TABLE public.t AS SELECT g, repeat(md5(g::text), 10) AS v FROM generate_series(1, 100000) g")
	stored := filepath.Join(b.root, "stored")
	if err := b.user.Mkdir(stored, 0o700); err != nil {
		t.Fatal(err)
	}
	bb, err := b.bin.Path("pg_basebackup")
	if err != nil {
		t.Fatal(err)
	}
	cmd := b.user.Command(bb, "-D", stored, "-F", "p", "-X", "stream", "--checkpoint=fast", "--no-password",
		"-h", "127.0.0.1", "-p", strconv.Itoa(src.Port), "-U", AdminRole)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+adminPassword, "PGSSLMODE=disable")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	exec1(t, conn, "INSERT INTO public.t SELECT g, 'after the backup' FROM generate_series(100001, 100010) g")
	before := treeSums(t, stored)

	dir := filepath.Join(b.root, "restored")
	if err := b.user.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := b.user.Mkdir(filepath.Join(dir, "pgdata"), 0o700); err != nil {
		t.Fatal(err)
	}
	used := usedBytes(t, b.root)
	st, err := CopyTree(t.Context(), b.user, stored, filepath.Join(dir, "pgdata"))
	if err != nil {
		t.Fatal(err)
	}
	grown := usedBytes(t, b.root) - used
	t.Logf("%+v; the filesystem grew by %d bytes", st, grown)
	if st.Files != len(before) || st.Reflinked != st.Files || st.Bytes < 30<<20 {
		t.Fatalf("%d of %d files reflinked (%d stored), %d bytes", st.Reflinked, st.Files, len(before), st.Bytes)
	}
	if grown > st.Bytes/10 {
		t.Fatalf("the filesystem grew by %d bytes for %d bytes copied: not shared", grown, st.Bytes)
	}
	conn.Close(context.Background())
	if err := src.Remove(context.Background()); err != nil {
		t.Fatal(err)
	}

	rInst, r := startCopyInstance(t, b, dir)
	var n, intact int64
	if err := r.QueryRow(t.Context(), "SELECT count(*), count(*) FILTER (WHERE v = repeat(md5(g::text), 10)) FROM public.t").Scan(&n, &intact); err != nil {
		t.Fatal(err)
	}
	if n != 100000 || intact != 100000 {
		t.Fatalf("the restored server holds %d rows, %d intact; want the backup's 100000", n, intact)
	}
	// The restored server rewrites every page of the table and checkpoints: the stored backup is untouched.
	exec1(t, r, "UPDATE public.t SET v = 'rewritten'")
	exec1(t, r, "VACUUM FULL public.t")
	exec1(t, r, "CHECKPOINT")
	r.Close(context.Background())
	if err := rInst.Stop(t.Context(), nil, daemon.StopFast); err != nil {
		t.Fatal(err)
	}
	after := treeSums(t, stored)
	if len(after) != len(before) {
		t.Fatalf("the stored backup had %d files, has %d", len(before), len(after))
	}
	for p, sum := range before {
		if after[p] != sum {
			t.Errorf("the stored backup's %s changed", p)
		}
	}
}
