package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// CopyOptions tune OnlineCopy.
type CopyOptions struct {
	Label   string // the backup's label, in backup_label (one line)
	Workers int    // files copied at once; 0 is DefaultCopyWorkers
	// Writeback starts writing each copied chunk to disk as soon as it is in the page cache
	// (sync_file_range SYNC_FILE_RANGE_WRITE: asynchronous, no wait), so that the disk works while the copy
	// goes on and a later sync of the copy (PostgreSQL's before it recovers one) finds little left to write.
	Writeback bool
	// Reflink copies each file by reflink (cloneFile: FICLONE) where the filesystem can, falling back to
	// copying its bytes per file; the copy is then synced (SyncTree) before OnlineCopy returns. For a
	// destination on the source's filesystem when ReflinkSupport says it has reflinks.
	Reflink bool
}

// DefaultCopyWorkers is how many files OnlineCopy copies at once by default. Copying within the page cache
// and creating files are CPU work: on the 2-core machine the appliance targets, 2 workers copy a 1 GB
// project in about 25 % less time than 1, and 4 no faster than 2 (bench/README.md, BenchmarkOnlineCopy).
const DefaultCopyWorkers = 2

// CopyStats says what an OnlineCopy copied and where its time went.
type CopyStats struct {
	Files       int           // regular files copied (WAL segments included)
	Bytes       int64         // their bytes
	WALSegments int           // WAL segments copied
	Start       time.Duration // the slot and pg_backup_start (the checkpoint)
	Copy        time.Duration // the data directory
	Stop        time.Duration // pg_backup_stop
	WAL         time.Duration // backup_label and the WAL segments
	Reflinked   int           // files copied by reflink (with CopyOptions.Reflink)
	Label       string        // the backup_label written
	StopLSN     string        // where the backup ended (pg_backup_stop's LSN)
	Sync        time.Duration // the copy's fsync, files and directories (with CopyOptions.Reflink)
}

// ErrTablespaces is returned by OnlineCopy for an instance with tablespaces: their directories are outside
// the data directory (pg_tblspc holds symbolic links to them) and a copy that recreated the links would
// share the source's tablespace directories. The appliance creates none and tenants cannot (CREATE
// TABLESPACE needs a superuser).
var ErrTablespaces = errors.New("the instance has tablespaces: the online copy copies the data directory only")

// excludedDirContents are the directories whose contents a copy leaves out (the directories are made,
// empty): what basebackup.c's excludeDirContents lists (their contents are reset or recreated when the
// server starts; pg_replslot's slots belong to the source), and log, the instances' log_directory (the
// source's logs are not the copy's).
var excludedDirContents = []string{"pg_stat_tmp", "pg_replslot", "pg_dynshmem", "pg_notify", "pg_serial",
	"pg_snapshots", "pg_subtrans", "log"}

// excludedFiles are the files at the top of the data directory a copy leaves out: basebackup.c's
// excludeFiles (the running postmaster's files, a backup's label, map and manifest, temporary files of
// ALTER SYSTEM and of the logging collector), the logging collector's current_logfiles (the copy's logs
// start anew), and the signal files that would make the copy a standby or a recovery of the source's
// archive.
var excludedFiles = []string{"postmaster.pid", "postmaster.opts", "backup_label", "tablespace_map",
	"backup_manifest", "postgresql.auto.conf.tmp", "current_logfiles", "current_logfiles.tmp",
	"standby.signal", "recovery.signal"}

// excludedPrefixes are left out wherever they are: temporary files and directories (removed when the server
// starts) and the relation cache's init files (rebuilt).
var excludedPrefixes = []string{"pgsql_tmp", "pg_internal.init"}

var (
	relationFile  = regexp.MustCompile(`^([0-9]+)(_(fsm|vm|init))?(\.[0-9]+)?$`)
	tempRelation  = regexp.MustCompile(`^t[0-9]+_[0-9]+(_(fsm|vm|init))?(\.[0-9]+)?$`)
	walSegment    = regexp.MustCompile(`^[0-9A-F]{24}$`)
	timelineFile  = regexp.MustCompile(`^[0-9A-F]{8}\.history$`)
	labelStartWAL = regexp.MustCompile(`(?m)^START WAL LOCATION: \S+ \(file ([0-9A-F]{24})\)$`)
	databaseDir   = regexp.MustCompile(`^base/[0-9]+$`)
)

// copyChunk is how much of a file one copy_file_range call copies before the context is checked again (and
// the chunk's writeback started).
const copyChunk = 16 << 20

// OnlineCopy copies the running instance into dst, a directory that must not exist yet, as a base backup by
// PostgreSQL's low-level API ("Making a Base Backup Using the Low Level API"), copying files on the
// filesystem rather than streaming them through the server as pg_basebackup does:
//
//  1. on conn, a temporary physical replication slot that reserves WAL at once (the WAL from the backup's
//     start on stays in pg_wal while the session lasts), then pg_backup_start(label, fast) — a fast
//     checkpoint — on the same session, which stays open;
//  2. the data directory copied file by file (copy_file_range, opts.Workers at once), without what
//     pg_basebackup leaves out (excludedDirContents, excludedFiles, excludedPrefixes, temporary relations,
//     the forks of unlogged relations but their init fork, pg_wal's contents) and without the server's
//     logs; pg_control last;
//  3. pg_backup_stop(wait_for_archive => false): its label file becomes backup_label, and the WAL segments
//     from the backup's start to its stop (and the timeline history files) are copied from pg_wal, each
//     marked archived (archive_status/<segment>.done) as pg_basebackup -X does;
//  4. the slot dropped and the session closed.
//
// Started, the copy recovers from the backup's checkpoint to its end (crash recovery: no recovery.signal)
// and is then consistent: the instance's data as of pg_backup_stop.
//
// conn is an AdminRole session to the instance in no transaction, whose statements should not time out
// (statement_timeout 0); OnlineCopy takes it over and closes it. The copy belongs to i.User: directories
// mode 0700, files the mode of their source. Files that vanish while the copy runs are skipped (a dropped
// table or database: the WAL replayed when the copy starts drops them too); a symbolic link anywhere in the
// data directory (but pg_wal itself) is refused, and so are tablespaces (ErrTablespaces). On any failure, a
// cancelled ctx included, the backup is ended, the slot dropped (both also end with the session), dst
// removed, and the instance is as it was.
func (i *Instance) OnlineCopy(ctx context.Context, conn *pgx.Conn, dst string, opts CopyOptions) (st CopyStats, err error) {
	slot := fmt.Sprintf("appliance_copy_%d", conn.PgConn().PID())
	major, _ := strconv.Atoi(strings.SplitN(conn.PgConn().ParameterStatus("server_version"), ".", 2)[0])
	started := false
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err != nil && started && !conn.IsClosed() { // the session's end would do the same, asynchronously
			conn.Exec(cctx, backupStopSQL(major))
		}
		if !conn.IsClosed() {
			conn.Exec(cctx, "SELECT pg_catalog.pg_drop_replication_slot($1) FROM pg_catalog.pg_replication_slots WHERE slot_name = $1", slot)
		}
		conn.Close(cctx)
		if err != nil {
			err = fmt.Errorf("online copy of instance %s: %w", i.ID, err)
		}
	}()
	if err := checkDir(dst); err != nil {
		return st, err
	}
	if i.User == nil {
		return st, errors.New("no OS user")
	}
	if major < 10 {
		return st, fmt.Errorf("server version %q: PostgreSQL 10 or later is needed", conn.PgConn().ParameterStatus("server_version"))
	}
	if strings.ContainsAny(opts.Label, "\n\r\x00") {
		return st, errors.New("the label must be one line")
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = DefaultCopyWorkers
	}
	src := i.DataDir()
	if err := os.Mkdir(dst, 0o700); err != nil { // an existing dst is not the copy's to remove
		return st, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dst)
		}
	}()
	if err := i.User.ChownOne(dst); err != nil {
		return st, err
	}

	t0 := time.Now()
	var segSize int64
	if err := conn.QueryRow(ctx, "SELECT setting::int8 FROM pg_catalog.pg_settings WHERE name = 'wal_segment_size'").Scan(&segSize); err != nil {
		return st, fmt.Errorf("read wal_segment_size: %w", err)
	}
	if segSize <= 0 || 0x100000000%segSize != 0 {
		return st, fmt.Errorf("wal_segment_size %d", segSize)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_create_physical_replication_slot($1, true, true)", slot); err != nil {
		return st, fmt.Errorf("create a temporary replication slot: %w", err)
	}
	started = true // from here the deferred function ends the backup (pg_backup_stop is harmless without one)
	if _, err := conn.Exec(ctx, backupStartSQL(major), opts.Label); err != nil {
		return st, fmt.Errorf("start the backup: %w", err)
	}
	st.Start = time.Since(t0)

	t0 = time.Now()
	c, err := newCopier(ctx, i.User, src, dst, opts.Writeback)
	c.reflink = opts.Reflink
	if err != nil {
		return st, err
	}
	defer c.close()
	files, err := c.plan(src, dst)
	if err != nil {
		return st, err
	}
	if err := c.copyAll(files, workers); err != nil {
		return st, err
	}
	// pg_control last, as pg_basebackup sends it (recovery reads the backup_label's checkpoint anyway).
	if err := c.copyFile(filepath.Join(src, "global", "pg_control"), filepath.Join(dst, "global", "pg_control"), false); err != nil {
		return st, err
	}
	st.Copy = time.Since(t0)

	t0 = time.Now()
	var stopLSN, label, spcmap, stopFile string
	if err := conn.QueryRow(ctx, backupStopSQL(major)).Scan(&stopLSN, &label, &spcmap, &stopFile); err != nil {
		return st, fmt.Errorf("stop the backup: %w", err)
	}
	started = false
	st.Stop = time.Since(t0)
	if strings.TrimSpace(spcmap) != "" {
		return st, ErrTablespaces
	}

	t0 = time.Now()
	m := labelStartWAL.FindStringSubmatch(label)
	if m == nil {
		return st, fmt.Errorf("the backup's label names no start WAL file: %q", label)
	}
	if err := c.copyWAL(filepath.Join(src, "pg_wal"), filepath.Join(dst, "pg_wal"), m[1], stopFile, segSize); err != nil {
		return st, err
	}
	if err := c.writeFile(filepath.Join(dst, "backup_label"), []byte(label)); err != nil {
		return st, err
	}
	st.WAL = time.Since(t0)
	st.Files, st.Bytes, st.WALSegments, st.Reflinked = c.files, c.bytes, c.segments, c.reflinked
	st.Label, st.StopLSN = label, stopLSN
	if opts.Reflink {
		if st.Sync, err = SyncTree(dst); err != nil {
			return st, err
		}
	}
	return st, nil
}

// backupStartSQL starts a non-exclusive backup ($1 the label) with a fast checkpoint.
func backupStartSQL(major int) string {
	if major >= 15 {
		return "SELECT pg_catalog.pg_backup_start($1, true)"
	}
	return "SELECT pg_catalog.pg_start_backup($1, true, false)"
}

// backupStopSQL ends the session's backup without waiting for the archiver: the stop location, the label
// file, the tablespace map and the WAL file holding the stop location's previous byte (pg_walfile_name: the
// last segment the backup needs).
func backupStopSQL(major int) string {
	fn := "pg_catalog.pg_backup_stop(false)"
	if major < 15 {
		fn = "pg_catalog.pg_stop_backup(false, false)"
	}
	return "SELECT lsn::text, labelfile, coalesce(spcmapfile, ''), pg_catalog.pg_walfile_name(lsn) FROM " + fn
}

// copier copies files into the copy: as the OS user, counting what it copied. It reads and writes through
// roots (os.Root) of the source and the copy: the instance's OS user owns both trees and could swap a
// directory for a symbolic link while the copy runs; no path the copier opens resolves outside them.
type copier struct {
	ctx            context.Context
	user           interface{ ChownFile(*os.File) error }
	writeback      bool
	reflink        bool // try cloneFile first
	src, dst       *os.Root
	srcDir, dstDir string

	mu              sync.Mutex
	files, segments int
	reflinked       int
	bytes           int64
}

type copyJob struct {
	src, dst string
	size     int64
}

func newCopier(ctx context.Context, user interface{ ChownFile(*os.File) error }, src, dst string, writeback bool) (*copier, error) {
	sr, err := os.OpenRoot(src)
	if err != nil {
		return nil, err
	}
	dr, err := os.OpenRoot(dst)
	if err != nil {
		sr.Close()
		return nil, err
	}
	return &copier{ctx: ctx, user: user, writeback: writeback, src: sr, dst: dr, srcDir: src, dstDir: dst}, nil
}

func (c *copier) close() {
	c.src.Close()
	c.dst.Close()
}

// within is path relative to dir, which it must be in.
func within(dir, path string) (string, error) {
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", fmt.Errorf("%s is outside %s", path, dir)
	}
	return rel, nil
}

// openIn opens path, which is in dir, through root.
func (c *copier) openIn(root *os.Root, dir, path string, flag int, perm os.FileMode) (*os.File, error) {
	rel, err := within(dir, path)
	if err != nil {
		return nil, err
	}
	return root.OpenFile(rel, flag, perm)
}

// readDir lists a directory of the source, by name.
func (c *copier) readDir(path string) ([]os.DirEntry, error) {
	f, err := c.openIn(c.src, c.srcDir, path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return entries, err
}

// plan walks the source data directory, makes the copy's directories and lists the files to copy (largest
// first, so that the workers end together).
func (c *copier) plan(src, dst string) ([]copyJob, error) {
	var jobs []copyJob
	var walk func(rel string) error
	walk = func(rel string) error {
		entries, err := c.readDir(filepath.Join(src, rel))
		if err != nil {
			if rel != "" && errors.Is(err, fs.ErrNotExist) { // a database dropped meanwhile
				return nil
			}
			return err
		}
		names := map[string]bool{}
		for _, e := range entries {
			names[e.Name()] = true
		}
		relationDir := rel == "global" || databaseDir.MatchString(rel)
		for _, e := range entries {
			if err := c.ctx.Err(); err != nil {
				return err
			}
			name := e.Name()
			r := filepath.Join(rel, name)
			if skipped(rel, name, names, relationDir) || r == filepath.Join("global", "pg_control") {
				continue
			}
			fi, err := c.src.Lstat(r)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			} else if err != nil {
				return err
			}
			switch {
			case rel == "" && name == "pg_wal": // its segments are copied after the backup's stop
				if err := c.mkdir(filepath.Join(dst, r)); err != nil {
					return err
				}
				if err := c.mkdir(filepath.Join(dst, r, "archive_status")); err != nil {
					return err
				}
				if fi, err := c.src.Stat(filepath.Join(r, "summaries")); err == nil && fi.IsDir() { // PostgreSQL 17
					if err := c.mkdir(filepath.Join(dst, r, "summaries")); err != nil {
						return err
					}
				}
			case fi.Mode()&fs.ModeSymlink != 0:
				if rel == "pg_tblspc" {
					return ErrTablespaces
				}
				return fmt.Errorf("%s is a symbolic link: the online copy copies regular files and directories only", r)
			case fi.IsDir():
				if err := c.mkdir(filepath.Join(dst, r)); err != nil {
					return err
				}
				if rel == "" && slices.Contains(excludedDirContents, name) {
					continue
				}
				if err := walk(r); err != nil {
					return err
				}
			case fi.Mode().IsRegular():
				jobs = append(jobs, copyJob{src: filepath.Join(src, r), dst: filepath.Join(dst, r), size: fi.Size()})
			}
			// Sockets, pipes and devices are not data: skipped, as pg_basebackup does.
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, err
	}
	slices.SortStableFunc(jobs, func(a, b copyJob) int { return cmp.Compare(b.size, a.size) })
	return jobs, nil
}

// skipped reports whether the entry name of the directory rel (whose entries are names) stays out of the
// copy.
func skipped(rel, name string, names map[string]bool, relationDir bool) bool {
	for _, p := range excludedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	if rel == "" && slices.Contains(excludedFiles, name) {
		return true
	}
	if !relationDir {
		return false
	}
	if rel != "global" && tempRelation.MatchString(name) {
		return true
	}
	// An unlogged relation's forks but its init fork: the server resets them from it when it starts.
	if m := relationFile.FindStringSubmatch(name); m != nil && m[3] != "init" && names[m[1]+"_init"] {
		return true
	}
	return false
}

// copyAll copies the files with n workers; the first error stops them.
func (c *copier) copyAll(jobs []copyJob, n int) error {
	ctx, cancel := context.WithCancelCause(c.ctx)
	defer cancel(nil)
	ch := make(chan copyJob)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for j := range ch {
				if err := c.copyFileCtx(ctx, j.src, j.dst, true); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

func (c *copier) copyFile(src, dst string, missingOK bool) error {
	return c.copyFileCtx(c.ctx, src, dst, missingOK)
}

// copyFileCtx copies src to dst (which must not exist) with copy_file_range, in chunks; a src that does not
// exist is skipped when missingOK. dst gets src's mode and the OS user.
func (c *copier) copyFileCtx(ctx context.Context, src, dst string, missingOK bool) error {
	in, err := c.openIn(c.src, c.srcDir, src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if missingOK && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	out, err := c.openIn(c.dst, c.dstDir, dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fi.Mode().Perm())
	if err != nil {
		return err
	}
	n, cloned, err := c.copyData(ctx, out, in)
	if err == nil {
		err = c.user.ChownFile(out)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	c.mu.Lock()
	c.files++
	c.bytes += n
	if cloned {
		c.reflinked++
	}
	c.mu.Unlock()
	return nil
}

// copyData is the one way the copy's files get their data: by reflink (cloneFile) when the copier may and
// the filesystem can, else by fill. It returns the bytes copied and whether they were reflinked.
func (c *copier) copyData(ctx context.Context, out, in *os.File) (int64, bool, error) {
	if c.reflink {
		switch err := cloneFile(out, in); {
		case err == nil:
			fi, err := out.Stat()
			if err != nil {
				return 0, true, err
			}
			return fi.Size(), true, nil
		case !errors.Is(err, errNoReflink):
			return 0, false, err
		}
	}
	n, err := c.fill(ctx, out, in)
	return n, false, err
}

// fill copies in into out to in's end (what it holds when the copy gets there: a file that grows or
// shrinks meanwhile is fine, the WAL replayed makes it right).
func (c *copier) fill(ctx context.Context, out, in *os.File) (int64, error) {
	var off int64
	for {
		if err := ctx.Err(); err != nil {
			return off, context.Cause(ctx)
		}
		n, err := io.Copy(out, io.LimitReader(in, copyChunk)) // *os.File to *os.File: copy_file_range
		if err != nil {
			return off, err
		}
		if c.writeback && n > 0 {
			// Asynchronous: the kernel queues the range's writeback and returns.
			_ = unix.SyncFileRange(int(out.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
		}
		off += n
		if n < copyChunk {
			return off, nil
		}
	}
}

// mkdir makes dir, mode 0700, the OS user's.
func (c *copier) mkdir(dir string) error {
	rel, err := within(c.dstDir, dir)
	if err != nil {
		return err
	}
	if err := c.dst.Mkdir(rel, 0o700); err != nil {
		return err
	}
	f, err := c.dst.Open(rel)
	if err != nil {
		return err
	}
	defer f.Close()
	return c.user.ChownFile(f)
}

// writeFile writes a new file of the copy, mode 0600, the OS user's.
func (c *copier) writeFile(path string, data []byte) error {
	f, err := c.openIn(c.dst, c.dstDir, path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = c.user.ChownFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyWAL copies the WAL segments from start to stop (file names; the slot kept them in pg_wal) and every
// timeline history file, each marked archived, as pg_basebackup -X does.
func (c *copier) copyWAL(srcWAL, dstWAL, start, stop string, segSize int64) error {
	entries, err := c.readDir(srcWAL)
	if err != nil {
		return err
	}
	var segments, histories []string
	for _, e := range entries {
		switch name := e.Name(); {
		case walSegment.MatchString(name) && name[8:] >= start[8:] && name[8:] <= stop[8:]:
			segments = append(segments, name)
		case timelineFile.MatchString(name):
			histories = append(histories, name)
		}
	}
	// Sorted by segment (the timeline does not count), they must run from start to stop without a gap.
	slices.SortFunc(segments, func(a, b string) int { return strings.Compare(a[8:], b[8:]) })
	perID := uint64(0x100000000 / segSize)
	segNo := func(name string) uint64 {
		hi, _ := strconv.ParseUint(name[8:16], 16, 32)
		lo, _ := strconv.ParseUint(name[16:24], 16, 32)
		return hi*perID + lo
	}
	next := segNo(start) // the segment number the next name must have (or the last one's: two timelines)
	for _, s := range segments {
		if n := segNo(s); n != next && n+1 != next {
			break
		}
		next = segNo(s) + 1
	}
	if next != segNo(stop)+1 {
		return fmt.Errorf("the WAL from %s to %s is not all in pg_wal", start, stop)
	}
	for _, name := range append(segments, histories...) {
		if err := c.copyFile(filepath.Join(srcWAL, name), filepath.Join(dstWAL, name), false); err != nil {
			return err
		}
		if walSegment.MatchString(name) {
			rel, err := within(c.dstDir, filepath.Join(dstWAL, name))
			if err != nil {
				return err
			}
			fi, err := c.dst.Stat(rel)
			if err != nil {
				return err
			}
			if fi.Size() != segSize {
				return fmt.Errorf("WAL segment %s has %d bytes, not %d", name, fi.Size(), segSize)
			}
			c.segments++
		}
		if err := c.writeFile(filepath.Join(dstWAL, "archive_status", name+".done"), nil); err != nil {
			return err
		}
	}
	return nil
}
