// Package backup keeps the base backups and the WAL archive of the projects: the project-level Store, on
// top of an Objects implementation (package dirstore: the local directory).
package backup

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Store is where base backups, the WAL archive and the timeline log of the projects live, as objects:
//
//	<project_id>/wal/<segment>                archived WAL segments (and timeline history, .backup files) of
//	                                          the project's first cluster (its archive "")
//	<project_id>/wal-<archive>/<segment>      those of a later cluster of the project (a major upgrade by
//	                                          logical replication makes a new cluster, whose segment names
//	                                          start over: Instance.WALArchive names its archive)
//	<project_id>/base/<key>/<path>            one file of a base backup each (the data directory's tree)
//	<project_id>/base/<key>.backup.json       the backup's manifest (BackupManifest), written last
//	<project_id>/timelines.json               the timeline switches of the project's restores
//	<project_id>/kv/<store_id>/<id>.rdb|.json its key-value store's RDB snapshots (kvsnap.go)
//	<project_id>/exports/<export_id>.dump     its exports (exports.go)
//	<project_id>/imports/<upload_id>.dump     its uploaded dumps for imports (exports.go, uploads.go)
//
// In the local directory store, <project_id>/exports and <project_id>/imports hold the exports and the
// uploaded dumps themselves or, with a bucket, the local cache of the bucket's (appliance/dumpcache).
type Store struct {
	Objects Objects
}

// New is the Store on o.
func New(o Objects) *Store { return &Store{Objects: o} }

func checkName(kind, v string) error {
	if CheckKey(v) != nil || strings.Contains(v, "/") {
		return fmt.Errorf("invalid %s %q", kind, v)
	}
	return nil
}

// CheckProjectID refuses a project id that cannot name the project's objects.
func CheckProjectID(projectID string) error { return checkName("project id", projectID) }

// walPrefix is where the WAL archive of one cluster of the project lives: "" is the project's first
// cluster (<project>/wal/, the layout of before there were several), any other name a later one's.
func walPrefix(projectID, archive string) string {
	if archive == "" {
		return projectID + "/wal/"
	}
	return projectID + "/wal-" + archive + "/"
}

// checkWAL refuses a project id or a WAL archive name ("" or a key segment) that cannot name objects.
func checkWAL(projectID, archive string) error {
	if err := checkName("project id", projectID); err != nil {
		return err
	}
	if archive == "" {
		return nil
	}
	return checkName("WAL archive", archive)
}

// CheckWALArchive refuses a WAL archive name that cannot name the archive's objects ("" is the project's
// first cluster's).
func CheckWALArchive(archive string) error { return checkWAL("p", archive) }

func basePrefix(projectID, key string) string { return projectID + "/base/" + key + "/" }
func manifestKey(projectID, key string) string {
	return projectID + "/base/" + key + ".backup.json"
}

// Prepare makes the places the project's WAL archive and base backups go (the directory store's
// directories, the instances' user's); nothing for an implementation without a Preparer. Idempotent.
func (s *Store) Prepare(ctx context.Context, projectID string) error {
	if err := checkName("project id", projectID); err != nil {
		return err
	}
	p, ok := s.Objects.(Preparer)
	if !ok {
		return nil
	}
	for _, prefix := range []string{walPrefix(projectID, ""), projectID + "/base/"} {
		if err := p.Prepare(ctx, prefix); err != nil {
			return fmt.Errorf("prepare the backup store of %s: %w", projectID, err)
		}
	}
	return nil
}

// WALCommands are the archive_command and restore_command through which PostgreSQL archives the WAL of
// the project's cluster whose archive is walArchive into the store and fetches it back. Only an Objects
// with a WALTransport has them.
func (s *Store) WALCommands(ctx context.Context, projectID, walArchive string) (archive, restore string, err error) {
	if err := checkWAL(projectID, walArchive); err != nil {
		return "", "", err
	}
	t, ok := s.Objects.(WALTransport)
	if !ok {
		return "", "", errors.New("this backup store has no WAL commands for PostgreSQL (the appliance must receive the WAL)")
	}
	return t.WALCommands(ctx, walPrefix(projectID, walArchive))
}

// WALArchived reports whether the project's WAL segment (a file name) is in the archive walArchive.
func (s *Store) WALArchived(ctx context.Context, projectID, walArchive, segment string) (bool, error) {
	if err := checkWAL(projectID, walArchive); err != nil {
		return false, err
	}
	_, err := s.Objects.Stat(ctx, walPrefix(projectID, walArchive)+segment)
	if errors.Is(err, ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// PutWAL stores a WAL file of the project's (a segment, a timeline history, a .backup or .partial file,
// by its name) in the archive walArchive, replacing any there; when it returns nil the file is stored
// durably. It is how the appliance archives for a store without a WALTransport.
func (s *Store) PutWAL(ctx context.Context, projectID, walArchive, name string, r io.Reader) (int64, error) {
	if err := checkWAL(projectID, walArchive); err != nil {
		return 0, err
	}
	if err := checkName("WAL file", name); err != nil {
		return 0, err
	}
	return s.Objects.Put(ctx, walPrefix(projectID, walArchive)+name, r)
}

// GetWAL opens a WAL file of the project's archive walArchive; a missing one is ErrNotExist (wrapped).
func (s *Store) GetWAL(ctx context.Context, projectID, walArchive, name string) (io.ReadCloser, error) {
	if err := checkWAL(projectID, walArchive); err != nil {
		return nil, err
	}
	if err := checkName("WAL file", name); err != nil {
		return nil, err
	}
	return s.Objects.Get(ctx, walPrefix(projectID, walArchive)+name)
}

// RemoveWAL deletes the whole WAL archive walArchive of the project (a cluster none of whose base backups
// is kept any more), and reports whether there was anything.
func (s *Store) RemoveWAL(ctx context.Context, projectID, walArchive string) (bool, error) {
	if err := checkWAL(projectID, walArchive); err != nil {
		return false, err
	}
	return s.Objects.DeleteAll(ctx, walPrefix(projectID, walArchive))
}

// HasWALCommands reports whether PostgreSQL can archive into the store and fetch from it by itself
// (WALCommands); otherwise the appliance carries the WAL (PutWAL, GetWAL).
func (s *Store) HasWALCommands() bool {
	_, ok := s.Objects.(WALTransport)
	return ok
}

var walSegmentName = regexp.MustCompile(`^[0-9A-F]{24}$`)

// PruneWAL deletes the archived WAL segments of the project's archive walArchive (24-hex-digit names
// only: history, .backup and .partial files stay) on start's timeline or an earlier one whose position
// sorts before start's, and returns how many.
func (s *Store) PruneWAL(ctx context.Context, projectID, walArchive, start string) (int, error) {
	if err := checkWAL(projectID, walArchive); err != nil {
		return 0, err
	}
	if !walSegmentName.MatchString(start) {
		return 0, fmt.Errorf("invalid WAL segment %q", start)
	}
	all, err := s.Objects.List(ctx, walPrefix(projectID, walArchive))
	if err != nil {
		return 0, err
	}
	var doomed []string
	for _, in := range all {
		name := strings.TrimPrefix(in.Key, walPrefix(projectID, walArchive))
		if !walSegmentName.MatchString(name) {
			continue
		}
		if name[:8] <= start[:8] && name[8:] < start[8:] {
			doomed = append(doomed, in.Key)
		}
	}
	if err := s.Objects.Delete(ctx, doomed...); err != nil {
		return 0, err
	}
	return len(doomed), nil
}

// BackupManifest is the object a base backup's files are complete with: written last.
type BackupManifest struct {
	Key          string    `json:"key"`
	Files        int       `json:"files"`
	SizeBytes    int64     `json:"size_bytes"`
	Timeline     int       `json:"timeline"`      // START TIMELINE of its backup_label
	StartSegment string    `json:"start_segment"` // the WAL segment of its START WAL LOCATION
	Dirs         []string  `json:"dirs"`          // every directory of the data directory's tree, empty ones included
	CompletedAt  time.Time `json:"completed_at"`
}

// StageBackup returns an empty local directory for pg_basebackup to write a plain-format base backup into
// (as the instances' OS user), which CommitBackup then stores. Only an Objects with a Stager has one.
func (s *Store) StageBackup(ctx context.Context, projectID, key string) (string, error) {
	st, err := s.stager(projectID, key)
	if err != nil {
		return "", err
	}
	return st.Stage(ctx, basePrefix(projectID, key))
}

func (s *Store) stager(projectID, key string) (Stager, error) {
	if err := checkName("project id", projectID); err != nil {
		return nil, err
	}
	if err := checkName("backup key", key); err != nil {
		return nil, err
	}
	st, ok := s.Objects.(Stager)
	if !ok {
		return nil, errors.New("this backup store cannot stage a base backup")
	}
	return st, nil
}

// CommitBackup stores the base backup staged in dir (StageBackup's) as the backup's objects, then its
// manifest: from then on it is complete. The backup's objects must not exist (RemoveBackup first).
func (s *Store) CommitBackup(ctx context.Context, projectID, key, dir string, now time.Time) (*BackupManifest, error) {
	st, err := s.stager(projectID, key)
	if err != nil {
		return nil, err
	}
	m := &BackupManifest{Key: key, Dirs: []string{}, CompletedAt: now.UTC()}
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if e.IsDir() {
			m.Dirs = append(m.Dirs, filepath.ToSlash(rel))
			return nil
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s in the base backup is not a regular file", rel)
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		m.Files++
		m.SizeBytes += fi.Size()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the staged base backup: %w", err)
	}
	label, err := os.ReadFile(filepath.Join(dir, "backup_label"))
	if err != nil {
		return nil, fmt.Errorf("the staged base backup: %w", err)
	}
	if m.Timeline, m.StartSegment, err = parseLabel(label); err != nil {
		return nil, err
	}
	if err := st.Commit(ctx, basePrefix(projectID, key)); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if _, err := s.Objects.Put(ctx, manifestKey(projectID, key), bytes.NewReader(data)); err != nil {
		return nil, err
	}
	return m, nil
}

// RemoveBackup deletes a base backup: its manifest first (it is no longer complete), then its files and
// whatever is staged for it. A missing one is not an error.
func (s *Store) RemoveBackup(ctx context.Context, projectID, key string) error {
	if err := checkName("project id", projectID); err != nil {
		return err
	}
	if err := checkName("backup key", key); err != nil {
		return err
	}
	if err := s.Objects.Delete(ctx, manifestKey(projectID, key)); err != nil {
		return err
	}
	_, err := s.Objects.DeleteAll(ctx, basePrefix(projectID, key))
	return err
}

// BackupStart reads the timeline and the WAL segment a base backup starts in from its backup_label object
// (both layouts have one).
func (s *Store) BackupStart(ctx context.Context, projectID, key string) (timeline int, segment string, err error) {
	if err := checkName("project id", projectID); err != nil {
		return 0, "", err
	}
	if err := checkName("backup key", key); err != nil {
		return 0, "", err
	}
	r, err := s.Objects.Get(ctx, basePrefix(projectID, key)+"backup_label")
	if err != nil {
		return 0, "", err
	}
	defer r.Close()
	label, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return 0, "", err
	}
	return parseLabel(label)
}

// parseLabel reads START TIMELINE and the file of START WAL LOCATION ("START WAL LOCATION: 0/2000028 (file
// 000000010000000000000002)") from a backup_label.
func parseLabel(label []byte) (timeline int, segment string, err error) {
	sc := bufio.NewScanner(bytes.NewReader(label))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "START WAL LOCATION: "); ok {
			_, file, ok := strings.Cut(v, "(file ")
			file = strings.TrimSuffix(strings.TrimSpace(file), ")")
			if ok && walSegmentName.MatchString(file) {
				segment = file
			}
		}
		if v, ok := strings.CutPrefix(sc.Text(), "START TIMELINE: "); ok {
			if timeline, err = strconv.Atoi(strings.TrimSpace(v)); err != nil {
				return 0, "", fmt.Errorf("backup_label: START TIMELINE: %w", err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, "", err
	}
	if segment == "" {
		return 0, "", errors.New("backup_label names no START WAL LOCATION file")
	}
	if timeline == 0 {
		return 0, "", errors.New("backup_label names no START TIMELINE")
	}
	return timeline, segment, nil
}

// legacyDirs are the directories of a PostgreSQL data directory that may be empty (initdb's list): a
// backup without a manifest (written by pg_basebackup straight into the directory store, before the store
// was objects) does not name its empty directories, so fetching it makes these.
var legacyDirs = []string{"global", "pg_wal", "pg_wal/archive_status", "pg_commit_ts", "pg_dynshmem", "pg_notify",
	"pg_serial", "pg_snapshots", "pg_subtrans", "pg_twophase", "pg_multixact", "pg_multixact/members",
	"pg_multixact/offsets", "base", "pg_replslot", "pg_tblspc", "pg_stat", "pg_stat_tmp", "pg_xact", "pg_logical",
	"pg_logical/snapshots", "pg_logical/mappings"}

// IsLocal reports whether the store keeps its objects as local files (Objects is Local: the directory
// store), on this machine's disk.
func (s *Store) IsLocal() bool {
	_, ok := s.Objects.(Local)
	return ok
}

// BackupDir is the local directory holding a complete base backup's files as its data directory (the
// store's Objects is Local, and the backup's manifest exists); "" when the store keeps none (a bucket), or
// keeps it otherwise (a backup of before the manifests).
func (s *Store) BackupDir(ctx context.Context, projectID, key string) (string, error) {
	if err := checkName("project id", projectID); err != nil {
		return "", err
	}
	if err := checkName("backup key", key); err != nil {
		return "", err
	}
	l, ok := s.Objects.(Local)
	if !ok {
		return "", nil
	}
	if _, err := s.Objects.Stat(ctx, manifestKey(projectID, key)); errors.Is(err, ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	return l.LocalDir(basePrefix(projectID, key))
}

// WriteBackupTar writes a base backup's data directory to w as a tar stream (directories 0700 first, then
// files 0600, paths relative to the data directory), for `tar -x` run as the instances' OS user. A backup
// is complete when its manifest exists, or, for a backup taken before the store was objects (no
// manifest), when its backup_manifest file does (pg_basebackup writes it last).
func (s *Store) WriteBackupTar(ctx context.Context, projectID, key string, w io.Writer) error {
	if err := checkName("project id", projectID); err != nil {
		return err
	}
	if err := checkName("backup key", key); err != nil {
		return err
	}
	prefix := basePrefix(projectID, key)
	var dirs []string
	if r, err := s.Objects.Get(ctx, manifestKey(projectID, key)); err == nil {
		var m BackupManifest
		err := json.NewDecoder(r).Decode(&m)
		r.Close()
		if err != nil {
			return fmt.Errorf("base backup %s: read its manifest: %w", key, err)
		}
		dirs = m.Dirs
	} else if errors.Is(err, ErrNotExist) {
		if _, err := s.Objects.Stat(ctx, prefix+"backup_manifest"); errors.Is(err, ErrNotExist) {
			return fmt.Errorf("base backup %s is not complete in the backup store (no manifest)", key)
		} else if err != nil {
			return err
		}
		dirs = slices.Clone(legacyDirs)
	} else {
		return err
	}
	files, err := s.Objects.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, f := range files {
		for d := path.Dir(strings.TrimPrefix(f.Key, prefix)); d != "."; d = path.Dir(d) {
			dirs = append(dirs, d)
		}
	}
	slices.Sort(dirs)
	dirs = slices.Compact(dirs)
	tw := tar.NewWriter(w)
	now := time.Now()
	for _, d := range dirs {
		if CheckKey(d) != nil {
			return fmt.Errorf("base backup %s: invalid directory %q in its manifest", key, d)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o700, ModTime: now}); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := s.copyObject(ctx, tw, f, strings.TrimPrefix(f.Key, prefix)); err != nil {
			return fmt.Errorf("base backup %s: %w", key, err)
		}
	}
	return tw.Close()
}

func (s *Store) copyObject(ctx context.Context, tw *tar.Writer, f Info, name string) error {
	r, err := s.Objects.Get(ctx, f.Key)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600, Size: f.Size, ModTime: f.ModTime}); err != nil {
		return err
	}
	n, err := io.Copy(tw, r)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if n != f.Size {
		return fmt.Errorf("%s: %d bytes, listed with %d", name, n, f.Size)
	}
	return nil
}

// Timelines reads the project's timeline log (nil when there is none).
func (s *Store) Timelines(ctx context.Context, projectID string) ([]byte, error) {
	if err := checkName("project id", projectID); err != nil {
		return nil, err
	}
	r, err := s.Objects.Get(ctx, projectID+"/timelines.json")
	if errors.Is(err, ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// PutTimelines replaces the project's timeline log (atomically and durably: a Put).
func (s *Store) PutTimelines(ctx context.Context, projectID string, data []byte) error {
	if err := checkName("project id", projectID); err != nil {
		return err
	}
	_, err := s.Objects.Put(ctx, projectID+"/timelines.json", bytes.NewReader(data))
	return err
}

// BackupSize is the bytes of a base backup's files.
func (s *Store) BackupSize(ctx context.Context, projectID, key string) (int64, error) {
	if err := checkName("project id", projectID); err != nil {
		return 0, err
	}
	if err := checkName("backup key", key); err != nil {
		return 0, err
	}
	return s.size(ctx, basePrefix(projectID, key))
}

func (s *Store) size(ctx context.Context, prefix string) (int64, error) {
	all, err := s.Objects.List(ctx, prefix)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, in := range all {
		n += in.Size
	}
	return n, nil
}

// ProjectSize is the bytes the store holds of a project (WAL archive, base backups, exports, uploads);
// 0 for a project it holds nothing of.
func (s *Store) ProjectSize(ctx context.Context, projectID string) (int64, error) {
	if err := checkName("project id", projectID); err != nil {
		return 0, err
	}
	return s.size(ctx, projectID+"/")
}

// RemoveProject deletes everything the store holds of a project (WAL archive, base backups and anything
// else under its prefix) and reports whether there was anything; a missing project is not an error.
func (s *Store) RemoveProject(ctx context.Context, projectID string) (bool, error) {
	if err := checkName("project id", projectID); err != nil {
		return false, err
	}
	found, err := s.Objects.DeleteAll(ctx, projectID+"/")
	if err != nil {
		return found, fmt.Errorf("remove the backup store of %s: %w", projectID, err)
	}
	return found, nil
}
