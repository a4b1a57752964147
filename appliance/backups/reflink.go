package backups

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// onlineBackup takes the base backup into dir (the store's empty stage) as an online copy of the project's
// server (postgres.Instance.OnlineCopy: pg_backup_start, every file copied but pg_wal's, pg_backup_stop,
// backup_label and the WAL between), then writes its backup_manifest (writeManifest), so that
// pg_verifybackup checks it and the store takes it as it takes pg_basebackup's. With reflink (the stage
// is on the data directory's filesystem, which has them) the files are reflinked and the copy synced;
// else their bytes are copied: how a server whose installation has no pg_basebackup (a server-only
// distribution of another major) is backed up.
func (s *Service) onlineBackup(ctx context.Context, inst *store.Instance, adminPW, dir, label string, reflink bool) (postgres.CopyStats, error) {
	params := maps.Clone(instances.UntrackedSettings)
	params["statement_timeout"], params["application_name"] = "0", "appliance base backup"
	conn, err := instances.ConnectAdmin(ctx, inst, adminPW, "postgres", params)
	if err != nil {
		return postgres.CopyStats{}, fmt.Errorf("connect to the project's server: %w", err)
	}
	if err := os.Remove(dir); err != nil { // the copy makes its directory (mode 0700, the OS user's) itself
		conn.Close(context.WithoutCancel(ctx))
		return postgres.CopyStats{}, err
	}
	pgi := s.eng.Instance(inst)
	st, err := pgi.OnlineCopy(ctx, conn, dir, postgres.CopyOptions{Label: label, Reflink: reflink, Writeback: !reflink})
	if err != nil {
		return st, err
	}
	// A backup restores a server open to the project's clients: the copy of a fenced one (a logical
	// upgrade's new cluster before its cutover) carries the usual pg_hba.conf.
	if pgi.Fenced() {
		if err := s.plane.User.WriteFile(filepath.Join(dir, "pg_hba.conf"), postgres.HBA(false), 0o600); err != nil {
			return st, err
		}
	}
	manifest, err := backupManifest(dir, st.Label, st.StopLSN)
	if err != nil {
		return st, err
	}
	if err := s.plane.User.WriteFile(filepath.Join(dir, "backup_manifest"), manifest, 0o600); err != nil {
		return st, err
	}
	return st, nil
}

var (
	labelStartLSN      = regexp.MustCompile(`(?m)^START WAL LOCATION: ([0-9A-F]+/[0-9A-F]+) `)
	labelStartTimeline = regexp.MustCompile(`(?m)^START TIMELINE: ([0-9]+)$`)
)

// backupManifest is the backup_manifest of the copy in dir, in PostgreSQL's format (version 1, as
// pg_basebackup writes it, without file checksums: reading every byte is what a copy by reflink saves;
// pg_verifybackup then checks each file's presence and size, and the WAL from the backup's start to its
// stop, stopLSN): every file but pg_wal's, the WAL range from the label, and the manifest's SHA-256.
func backupManifest(dir, label, stopLSN string) ([]byte, error) {
	start := labelStartLSN.FindStringSubmatch(label)
	tl := labelStartTimeline.FindStringSubmatch(label)
	if start == nil || tl == nil {
		return nil, fmt.Errorf("the backup's label has no start location or timeline: %q", label)
	}
	var b bytes.Buffer
	b.WriteString("{ \"PostgreSQL-Backup-Manifest-Version\": 1,\n\"Files\": [")
	first := true
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "pg_wal" && d.IsDir() {
			return fs.SkipDir
		}
		if !d.Type().IsRegular() || rel == "backup_manifest" {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		name, _ := json.Marshal(rel)
		if !first {
			b.WriteString(",")
		}
		first = false
		fmt.Fprintf(&b, "\n{ \"Path\": %s, \"Size\": %d, \"Last-Modified\": \"%s\" }", name, fi.Size(),
			fi.ModTime().UTC().Format("2006-01-02 15:04:05 GMT"))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the copy for its manifest: %w", err)
	}
	fmt.Fprintf(&b, "\n],\n\"WAL-Ranges\": [\n{ \"Timeline\": %s, \"Start-LSN\": \"%s\", \"End-LSN\": \"%s\" }\n],\n",
		tl[1], start[1], strings.TrimSpace(stopLSN))
	sum := sha256.Sum256(b.Bytes())
	fmt.Fprintf(&b, "\"Manifest-Checksum\": \"%s\"}\n", hex.EncodeToString(sum[:]))
	return b.Bytes(), nil
}
