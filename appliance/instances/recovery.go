package instances

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// CopySessionName is the application_name of the session a clone's online copy runs on (its backup and
// its temporary replication slot end with it).
const CopySessionName = "appliance online copy"

// copySessionSettings are the startup parameters of the session an online copy runs on.
var copySessionSettings = func() map[string]string {
	m := map[string]string{"statement_timeout": "0", "application_name": CopySessionName}
	for k, v := range UntrackedSettings {
		m[k] = v
	}
	return m
}()

// CloneSpec is where a clone's data comes from: its source project's running instance.
type CloneSpec struct {
	// Source is nil only with Recovery when no server of the source runs any more (an appliance
	// rebuilt from its bucket recovers each project from its own archive): nothing is archived first.
	Source        *store.Instance
	AdminPassword string // the source's admin password: the clone starts with it, until Provision gives it its own
	Label         string // the online copy's backup label
	// Recovery, when not nil, makes the clone as of a past time instead: a base backup recovered from the
	// source's WAL archive.
	Recovery *RecoverySpec
	// Fill, when not nil, gives the data directory whole instead (a staged copy, promoted: StagedFill):
	// nothing is copied nor recovered.
	Fill func(ctx context.Context, exec daemon.ExecFunc, dataDir string) error
}

// cloneFill is how a clone's data directory is made: the online copy of its source's running server
// (postgres.Instance.OnlineCopy: pg_backup_start, a file copy, pg_backup_stop and the WAL in between;
// consistent on its own), or, as of a past time, recoveryFill. The copy's steps go into steps (init.* in
// the job's timings_ms).
func (m *Manager) cloneFill(exec daemon.ExecFunc, c *CloneSpec, steps *Timer) func(context.Context, string) error {
	if c.Fill != nil {
		return func(ctx context.Context, dataDir string) error { return c.Fill(ctx, exec, dataDir) }
	}
	if c.Recovery != nil {
		return func(ctx context.Context, dataDir string) error { return m.recoveryFill(ctx, exec, c, dataDir) }
	}
	return func(ctx context.Context, dataDir string) error {
		// Its statements leave no trace, and the checkpoint is not cut short by the project's
		// statement_timeout (which applies to the admin's sessions too).
		conn, err := ConnectAdmin(ctx, c.Source, c.AdminPassword, "postgres", copySessionSettings)
		if err != nil {
			return fmt.Errorf("copy project %s: %w", c.Source.ProjectID, err)
		}
		st, err := m.Instance(c.Source).OnlineCopy(ctx, conn, dataDir, m.copyOptions(c.Label))
		if err != nil {
			return fmt.Errorf("copy project %s: %w", c.Source.ProjectID, err)
		}
		steps.Part("init.start_backup", st.Start)
		steps.Part("init.copy", st.Copy)
		steps.Part("init.stop_backup", st.Stop)
		steps.Part("init.wal", st.WAL)
		if st.Reflinked > 0 {
			steps.Part("init.sync", st.Sync)
		}
		return nil
	}
}

// copyOptions are an online copy's: by reflink where the instances' filesystem has them (the copy synced),
// else a byte copy whose writeback starts as it goes (PostgreSQL syncs it when it starts).
func (m *Manager) copyOptions(label string) postgres.CopyOptions {
	return postgres.CopyOptions{Label: label, Writeback: !m.cfg.Reflink, Reflink: m.cfg.Reflink}
}

// Target is where a recovery stops: a named restore point, a time, the end of the archive (End), or
// (none of them) the end of the base backup; on Timeline (0: the backup's own, or the current one; with
// End, the latest the archive holds).
type Target struct {
	Time     time.Time
	Name     string
	Timeline int
	// End replays every WAL file the archive holds, then promotes.
	End bool
}

// RecoverySpec is a recovery from a base backup and a WAL archive (JobID names it in the recovery
// settings).
type RecoverySpec struct {
	JobID   string
	Archive Archive // the archive the source writes into, and the base backup
	Target  Target
}

// Archive is what the engine needs of a project's backup store (appliance/backup): whether a WAL segment
// is stored, the restore_command that fetches segments back, and one base backup written into a data
// directory. The root builds it from the store; the engine never sees where the objects live.
type Archive struct {
	// Archived reports whether the WAL segment (a file name such as 000000010000000000000003) is stored.
	Archived func(ctx context.Context, segment string) (bool, error)
	// RestoreCommand is PostgreSQL's restore_command for the project's WAL archive.
	RestoreCommand string
	// FetchBase writes the base backup into dataDir (which must not exist), as the instances' OS user.
	FetchBase func(ctx context.Context, exec daemon.ExecFunc, dataDir string) error
}

// recoveryMarker starts the recovery settings a clone as of a past time gets in its postgresql.auto.conf.
const recoveryMarker = "\n# appliance: preview recovery\n"

// recoveryFill makes a clone's data directory as of a past time: its base backup copied, with settings
// that recover from the source's WAL archive to the target and then promote. The clone's first start runs
// the recovery (Provision waits for the promotion, then drops the settings).
func (m *Manager) recoveryFill(ctx context.Context, exec daemon.ExecFunc, c *CloneSpec, dataDir string) error {
	spec := c.Recovery
	// Everything up to the target must be in the archive (a recent target's WAL may not be yet). Without a
	// running source, the archive is all there is.
	if c.Source != nil {
		if _, _, err := ArchiveNow(ctx, c.Source, c.AdminPassword, spec.Archive.Archived); err != nil {
			return fmt.Errorf("archive the project's WAL: %w", err)
		}
	}
	if err := spec.Archive.FetchBase(ctx, exec, dataDir); err != nil {
		os.RemoveAll(dataDir)
		return fmt.Errorf("copy the base backup: %w", err)
	}
	auto := dataDir + "/postgresql.auto.conf"
	original, err := os.ReadFile(auto)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	conf := recoveryConf(spec.JobID, spec.Archive.RestoreCommand, spec.Target)
	if err := m.writeUserFile(auto, append(append(original, recoveryMarker...), conf...)); err != nil {
		return err
	}
	return m.writeUserFile(dataDir+"/recovery.signal", nil)
}

// finishRecovery waits until a clone as of a past time has recovered and promoted, then drops its
// recovery settings. A clone without them returns at once.
func (m *Manager) finishRecovery(ctx context.Context, pgi *postgres.Instance, parentPW string, since time.Time) error {
	auto := pgi.DataDir() + "/postgresql.auto.conf"
	b, err := os.ReadFile(auto)
	if err != nil {
		return err
	}
	i := strings.Index(string(b), recoveryMarker)
	if i < 0 {
		return nil
	}
	if err := waitPromoted(ctx, pgi, parentPW, since); err != nil {
		return fmt.Errorf("recover to the target: %w", err)
	}
	return m.writeUserFile(auto, b[:i])
}

// recoveryConf is what makes a server recover to the target and promote, fetching WAL with restoreCmd (the
// backup store's restore_command).
func recoveryConf(jobID, restoreCmd string, t Target) []byte {
	var c strings.Builder
	fmt.Fprintf(&c, "\n# appliance: restore %s\n", jobID)
	fmt.Fprintf(&c, "restore_command = %s\n", QuoteLiteral(restoreCmd))
	switch {
	case t.Name != "":
		fmt.Fprintf(&c, "recovery_target_name = %s\n", QuoteLiteral(t.Name))
	case !t.Time.IsZero():
		fmt.Fprintf(&c, "recovery_target_time = %s\n", QuoteLiteral(t.Time.UTC().Format("2006-01-02 15:04:05.999999-07")))
	case t.End: // no target: recovery ends where the archive does
	default:
		c.WriteString("recovery_target = 'immediate'\n")
	}
	switch {
	case t.Timeline > 0:
		fmt.Fprintf(&c, "recovery_target_timeline = '%d'\n", t.Timeline)
	case t.End:
		c.WriteString("recovery_target_timeline = 'latest'\n")
	default:
		c.WriteString("recovery_target_timeline = 'current'\n")
	}
	c.WriteString("recovery_target_action = 'promote'\n")
	return []byte(c.String())
}

// waitPromoted waits until the server left recovery (recovery_target_action = promote).
func waitPromoted(ctx context.Context, cand *postgres.Instance, password string, since time.Time) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if _, running, _ := cand.Status(); !running {
			return fmt.Errorf("recovery stopped before reaching the target: %s", strings.Join(cand.LogMessages(since, 4), "; "))
		}
		if conn, err := cand.Admin(ctx, password); err == nil {
			var inRecovery bool
			err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery)
			conn.Close(context.WithoutCancel(ctx))
			if err == nil && !inRecovery {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("recovery did not reach the target within 10 minutes")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ArchiveNow commits a transaction (so that the WAL holds a commit record timed after "at", which a
// recovery to a time before it needs to stop), closes the current WAL segment and waits until the archiver
// stored it (archived says so). It returns the time taken just before that commit and the timeline it is on.
func ArchiveNow(ctx context.Context, inst *store.Instance, adminPW string, archived func(context.Context, string) (bool, error)) (at time.Time, timeline int, err error) {
	at, timeline, _, err = SwitchArchived(ctx, inst, adminPW, archived)
	return at, timeline, err
}

// SwitchArchived is ArchiveNow that also returns the WAL position the switch ended the segment at (what
// pg_switch_wal returns): a server replaying the archive has everything written before once its replay
// reached it.
func SwitchArchived(ctx context.Context, inst *store.Instance, adminPW string, archived func(context.Context, string) (bool, error)) (at time.Time, timeline int, lsn string, err error) {
	conn, err := ConnectAdmin(ctx, inst, adminPW, "postgres", nil)
	if err != nil {
		return at, 0, "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	at = time.Now().UTC() // the wall clock, as the commit timestamps recovery compares targets with
	if _, err := conn.Exec(ctx, "SELECT txid_current()"); err != nil {
		return at, 0, "", fmt.Errorf("commit a marker transaction: %w", err)
	}
	if timeline, _, err = CurrentTimeline(ctx, conn); err != nil {
		return at, 0, "", fmt.Errorf("read the timeline: %w", err)
	}
	var seg string
	if err := conn.QueryRow(ctx, "SELECT w::text, pg_walfile_name(w) FROM (SELECT pg_switch_wal() AS w) s").Scan(&lsn, &seg); err != nil {
		return at, 0, "", fmt.Errorf("switch WAL: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var last, failed *string
		if err := conn.QueryRow(ctx, "SELECT last_archived_wal, last_failed_wal FROM pg_stat_archiver").Scan(&last, &failed); err != nil {
			return at, 0, "", err
		}
		if ok, err := archived(ctx, seg); err != nil {
			return at, 0, "", err
		} else if ok {
			return at, timeline, lsn, nil
		}
		if time.Now().After(deadline) {
			return at, 0, "", fmt.Errorf("WAL segment %s was not archived within a minute (last archived: %s, last failed: %s)", seg, deref(last), deref(failed))
		}
		select {
		case <-ctx.Done():
			return at, 0, "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "none"
	}
	return *s
}

// CurrentTimeline is the WAL timeline a primary writes on, and its current WAL position.
func CurrentTimeline(ctx context.Context, conn *pgx.Conn) (int, string, error) {
	var seg, lsn string
	if err := conn.QueryRow(ctx, "SELECT pg_walfile_name(pg_current_wal_lsn()), pg_current_wal_lsn()::text").Scan(&seg, &lsn); err != nil {
		return 0, "", err
	}
	tli, err := strconv.ParseInt(seg[:8], 16, 32)
	return int(tli), lsn, err
}

// writeUserFile writes a file owned by the instances' OS user (mode 0600).
func (m *Manager) writeUserFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	return m.cfg.User.Chown(path)
}

// HistoryAbove reports whether the WAL archive holds the history file of a timeline above tl, which a
// recovery that follows the archive's latest timeline would take (a branch the server on tl does not
// follow: a move's target promoted its copy, then the move was rolled back). Only tl+1 is asked for:
// PostgreSQL numbers a new timeline the newest it finds + 1, looking for the history files in order.
// archived is the archive's Archived.
func HistoryAbove(ctx context.Context, archived func(context.Context, string) (bool, error), tl int) (bool, error) {
	if tl <= 0 {
		return false, fmt.Errorf("invalid timeline %d", tl)
	}
	return archived(ctx, fmt.Sprintf("%08X.history", tl+1))
}

// Branched is where NewTimeline moved a server: from timeline From to To, at the WAL position At (where
// To branched off From), at the time Switched.
type Branched struct {
	From, To int
	At       string
	Switched time.Time
}

// NewTimeline moves the stopped server of inst onto a new timeline above every one the WAL archive
// holds, if the archive holds one above the server's own (HistoryAbove), and leaves it running (still
// fenced if it was). The server starts with recovery settings that recover from the archive
// (restoreCmd) on its own timeline, with no target — recovery ends at the end of its own WAL, nothing
// replayed but its last checkpoint — and promotes: PostgreSQL takes the next timeline after the newest
// history file it finds in the archive, whose history says it branched off the server's at its end. The
// settings are dropped once it promoted. ok is false, the server untouched (not started), when the archive
// holds no timeline above its own. (A timeline another copy may have promoted to, its history file not
// archived yet, is put there first as a placeholder: PlaceholderHistory.)
func (m *Manager) NewTimeline(ctx context.Context, exec daemon.ExecFunc, inst *store.Instance, adminPW, restoreCmd, jobID string,
	archived func(context.Context, string) (bool, error)) (b Branched, ok bool, err error) {
	pgi := m.Instance(inst)
	if _, running, err := pgi.Status(); err != nil {
		return b, false, err
	} else if running {
		return b, false, fmt.Errorf("instance %s runs: its timeline is moved only while it is stopped", inst.ID)
	}
	if b.From, _, err = StoppedTimeline(ctx, pgi); err != nil {
		return b, false, err
	}
	if above, err := HistoryAbove(ctx, archived, b.From); err != nil || !above {
		return b, false, err
	}
	auto := pgi.DataDir() + "/postgresql.auto.conf"
	original, err := os.ReadFile(auto)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return b, false, err
	}
	if i := strings.Index(string(original), recoveryMarker); i >= 0 { // an earlier attempt's
		original = original[:i]
	}
	conf := recoveryConf(jobID, restoreCmd, Target{End: true, Timeline: b.From})
	if err := m.writeUserFile(auto, append(append(original, recoveryMarker...), conf...)); err != nil {
		return b, false, err
	}
	if err := m.writeUserFile(pgi.DataDir()+"/recovery.signal", nil); err != nil {
		return b, false, err
	}
	since := time.Now()
	if err := pgi.Start(ctx, exec); err != nil {
		return b, false, fmt.Errorf("start the server to move it to a new timeline: %w", err)
	}
	if err := m.finishRecovery(ctx, pgi, adminPW, since); err != nil {
		return b, false, err
	}
	conn, err := pgi.Admin(ctx, adminPW)
	if err != nil {
		return b, false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if b.To, _, err = CurrentTimeline(ctx, conn); err != nil {
		return b, false, err
	}
	b.Switched = time.Now().UTC()
	if b.To <= b.From+1 {
		return b, false, fmt.Errorf("the server promoted to timeline %d, not above the archive's %d", b.To, b.From+1)
	}
	data, err := os.ReadFile(fmt.Sprintf("%s/pg_wal/%08X.history", pgi.DataDir(), b.To))
	if err != nil {
		return b, false, err
	}
	if _, at, err := ParentTimeline(data); err == nil {
		b.At = at
	}
	return b, true, nil
}

// ParentTimeline reads a timeline's history file: the timeline it branched off and where (its last
// line: parent timeline, switch point, reason).
func ParentTimeline(history []byte) (parent int, at string, err error) {
	for _, line := range strings.Split(strings.TrimSpace(string(history)), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && !strings.HasPrefix(f[0], "#") {
			if n, err := strconv.Atoi(f[0]); err == nil {
				parent, at = n, f[1]
			}
		}
	}
	if parent == 0 {
		return 0, "", errors.New("the history file names no parent timeline")
	}
	return parent, at, nil
}

// StoppedTimeline is the timeline and the position of a stopped server's last checkpoint (pg_controldata).
func StoppedTimeline(ctx context.Context, pgi *postgres.Instance) (int, string, error) {
	controldata, err := pgi.Bin.Path("pg_controldata")
	if err != nil {
		return 0, "", err
	}
	var out strings.Builder
	cmd := pgi.User.Command(controldata, "-D", pgi.DataDir())
	cmd.Stdout = &out
	cmd.Env = append(cmd.Env, "LC_ALL=C")
	if err := daemon.DefaultExec(ctx, cmd); err != nil {
		return 0, "", fmt.Errorf("pg_controldata of instance %s: %w", pgi.ID, err)
	}
	tl, at := 0, ""
	for _, line := range strings.Split(out.String(), "\n") {
		k, v, ok := strings.Cut(line, ":")
		switch k, v = strings.TrimSpace(k), strings.TrimSpace(v); {
		case !ok:
		case k == "Latest checkpoint's TimeLineID":
			tl, _ = strconv.Atoi(v)
		case k == "Latest checkpoint location":
			at = v
		}
	}
	if tl <= 0 || at == "" {
		return 0, "", fmt.Errorf("pg_controldata of instance %s names no timeline or checkpoint", pgi.ID)
	}
	return tl, at, nil
}

// PlaceholderHistory is a history file of timeline parent+1, branched off parent at lsn: parent's own
// history file (read from the stopped server's pg_wal; timeline 1 has none) and its line. It stands in the
// archive for a timeline another copy may have promoted to without its history file archived yet (a move's
// target killed right after its promotion): PostgreSQL looks for the history files of the timelines above
// one in order and stops at the first missing one, so a server moved above it (NewTimeline) would
// otherwise be out of sight of every recovery to the latest timeline. The copy's own, if archived later,
// branches off parent as well.
func PlaceholderHistory(pgi *postgres.Instance, parent int, lsn, why string) ([]byte, error) {
	var b []byte
	if parent > 1 {
		own, err := os.ReadFile(fmt.Sprintf("%s/pg_wal/%08X.history", pgi.DataDir(), parent))
		if err != nil {
			return nil, fmt.Errorf("timeline %d's history: %w", parent, err)
		}
		b = append([]byte(strings.TrimRight(string(own), "\n")), '\n')
	}
	why = strings.Join(strings.Fields(why), " ") // one line
	return fmt.Appendf(b, "%d\t%s\t%s\n", parent, lsn, why), nil
}
