package postgres

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/theappliance/appliance/appliance/daemon"
)

// ManifestEnd reads the end of the WAL a base backup needs (its backup_manifest's last "WAL-Ranges" entry,
// which pg_basebackup writes): the backup's stop position and timeline.
func ManifestEnd(backupDir string) (lsn string, timeline int, err error) {
	b, err := os.ReadFile(filepath.Join(backupDir, "backup_manifest"))
	if err != nil {
		return "", 0, err
	}
	var m struct {
		WALRanges []struct {
			Timeline int    `json:"Timeline"`
			EndLSN   string `json:"End-LSN"`
		} `json:"WAL-Ranges"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return "", 0, fmt.Errorf("backup_manifest: %w", err)
	}
	if len(m.WALRanges) == 0 {
		return "", 0, errors.New("backup_manifest has no WAL-Ranges")
	}
	last := m.WALRanges[len(m.WALRanges)-1]
	if !lsnPattern.MatchString(last.EndLSN) {
		return "", 0, fmt.Errorf("backup_manifest: End-LSN %q", last.EndLSN)
	}
	return last.EndLSN, last.Timeline, nil
}

// maxCheckSegments bounds the WAL DataChangedSince reads: more is taken as a change.
const maxCheckSegments = 64

var lsnPattern = regexp.MustCompile(`^[0-9A-F]{1,8}/[0-9A-F]{1,8}$`)

// housekeeping are the WAL records a server writes without any change of its data: checkpoints, segment
// switches, a backup's end, hint-bit page images (data checksums), running-transactions snapshots.
var housekeeping = map[string]bool{
	"XLOG CHECKPOINT_SHUTDOWN": true, "XLOG CHECKPOINT_ONLINE": true, "XLOG SWITCH": true, "XLOG BACKUP_END": true,
	"XLOG FPI_FOR_HINT": true, "XLOG NOOP": true, "Standby RUNNING_XACTS": true,
}

// walRecord is a line of pg_waldump: "rmgr: Heap len (rec/tot): ..., lsn: 0/0300A1B8, prev ..., desc: INSERT ...".
var walRecord = regexp.MustCompile(`^rmgr: (\S+)\s.*lsn: ([0-9A-F]+/[0-9A-F]+), prev [0-9A-F/]+, desc: (\S+)`)

// DataChangedSince reports whether a stopped server's WAL after lsn on timeline (a base backup's end, from
// ManifestEnd) holds any record that changes data — anything but housekeeping — up to its last checkpoint
// (a clean shutdown's: the server must have been stopped cleanly). The segments are read from pg_wal, or
// through archived (the WAL archive) for those a checkpoint removed, gathered in a scratch directory of the
// instance. It fails when it cannot tell (a segment missing, the WAL not read to the checkpoint): the
// caller then assumes a change. detail names the first change.
func (i *Instance) DataChangedSince(ctx context.Context, lsn string, timeline int, archived func(ctx context.Context, segment string) (io.ReadCloser, error)) (changed bool, detail string, err error) {
	if _, running, _ := i.Status(); running {
		return false, "", fmt.Errorf("instance %s runs", i.ID)
	}
	if !lsnPattern.MatchString(lsn) {
		return false, "", fmt.Errorf("invalid LSN %q", lsn)
	}
	controldata, err := i.Bin.Path("pg_controldata")
	if err != nil {
		return false, "", err
	}
	waldump, err := i.Bin.Path("pg_waldump")
	if err != nil {
		return false, "", err
	}
	var out bytes.Buffer
	cmd := i.User.Command(controldata, "-D", i.DataDir())
	cmd.Stdout = &out
	cmd.Env = append(cmd.Env, "LC_ALL=C")
	if err := daemon.DefaultExec(ctx, cmd); err != nil {
		return false, "", err
	}
	ctl := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			ctl[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	if st := ctl["Database cluster state"]; st != "shut down" {
		return false, "", fmt.Errorf("instance %s was not shut down cleanly (%q)", i.ID, st)
	}
	end := ctl["Latest checkpoint location"]
	tli, _ := strconv.Atoi(ctl["Latest checkpoint's TimeLineID"])
	segSize, _ := strconv.ParseUint(ctl["Bytes per WAL segment"], 10, 64)
	switch {
	case !lsnPattern.MatchString(end) || tli == 0:
		return false, "", fmt.Errorf("instance %s: pg_controldata names no checkpoint", i.ID)
	case segSize == 0 || segSize&(segSize-1) != 0 || segSize > 1<<30:
		return false, "", fmt.Errorf("instance %s: pg_controldata names no WAL segment size", i.ID)
	case tli != timeline:
		return true, fmt.Sprintf("the server is on timeline %d, the backup on %d", tli, timeline), nil
	case lsnValue(end) < lsnValue(lsn):
		return true, fmt.Sprintf("the server's last checkpoint %s is before the backup's end %s", end, lsn), nil
	}
	first, last := lsnValue(lsn)/segSize, lsnValue(end)/segSize
	if last-first >= maxCheckSegments {
		return true, fmt.Sprintf("%d WAL segments since the backup", last-first+1), nil
	}
	scratch := filepath.Join(i.Dir, "walcheck")
	_ = os.RemoveAll(scratch)
	if err := i.User.Mkdir(scratch, 0o700); err != nil {
		return false, "", err
	}
	defer os.RemoveAll(scratch)
	perID := 0x100000000 / segSize
	for seg := first; seg <= last; seg++ {
		name := fmt.Sprintf("%08X%08X%08X", tli, seg/perID, seg%perID)
		data, err := os.ReadFile(filepath.Join(i.DataDir(), "pg_wal", name))
		if err != nil && archived != nil {
			var r io.ReadCloser
			if r, err = archived(ctx, name); err == nil {
				data, err = io.ReadAll(io.LimitReader(r, int64(segSize)+1))
				r.Close()
			}
		}
		if err != nil {
			return false, "", fmt.Errorf("WAL segment %s: %w", name, err)
		}
		if err := i.User.WriteFile(filepath.Join(scratch, name), data, 0o600); err != nil {
			return false, "", err
		}
	}
	// No --end: pg_waldump reads past a record that starts at --end and fails on it. It stops with an
	// error after the last segment; what counts is that it read up to the checkpoint.
	out.Reset()
	cmd = i.User.Command(waldump, "--path", scratch, "--timeline", strconv.Itoa(tli), "--start", lsn)
	cmd.Stdout = &out
	runErr := daemon.DefaultExec(ctx, cmd)
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := walRecord.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if lsnValue(m[2]) > lsnValue(end) {
			break
		}
		if kind := m[1] + " " + m[3]; !housekeeping[kind] {
			return true, "a " + kind + " record at " + m[2], nil
		}
		if lsnValue(m[2]) == lsnValue(end) {
			return false, "", nil // read to the checkpoint: nothing but housekeeping
		}
	}
	if runErr != nil {
		return false, "", fmt.Errorf("read the WAL from %s to %s: %w", lsn, end, runErr)
	}
	return false, "", fmt.Errorf("the WAL from %s did not reach the checkpoint %s", lsn, end)
}

// lsnValue is an LSN ("X/Y") as a number.
func lsnValue(lsn string) uint64 {
	hi, lo, _ := strings.Cut(lsn, "/")
	h, _ := strconv.ParseUint(hi, 16, 32)
	l, _ := strconv.ParseUint(lo, 16, 32)
	return h<<32 | l
}
