package instances

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/daemon"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// A staged copy is a project's instance prepared on a node before it moves there (appliance/moves): its
// newest base backup restored into <instances>/<id>.stage-<key> and started as a standby on a scratch
// loopback port, replaying the project's WAL archive (restore_command from the backup store,
// standby.signal) while the project still serves on its own node. At the cutover StagedFill stops it
// and hands its data directory to the provisioning of the instance (whose recovery then replays only what
// the archive holds beyond it, and promotes). Until then nothing of the project's records names it.

// stageMarker starts the standby settings a staged copy gets in its postgresql.auto.conf.
const stageMarker = "\n# appliance: staged standby\n"

// StageSpec is a staged copy of a project's instance.
type StageSpec struct {
	// Instance is the instance's record as it will be on this node (its directory here, its binaries).
	Instance *store.Instance
	// Key names the staging (the move's job id).
	Key           string
	AdminPassword string  // the project's admin password (the base backup's)
	Archive       Archive // the project's WAL archive and the base backup to stage
}

// stagedInstance is the scratch server of inst's staging key.
func (m *Manager) stagedInstance(inst *store.Instance, key string) *postgres.Instance {
	return &postgres.Instance{ID: inst.ID + "-stage", Dir: filepath.Join(filepath.Dir(inst.Dir), inst.ID+".stage-"+key),
		Bin: m.Instance(inst).Bin, User: m.cfg.User, NoSync: m.cfg.NoSync}
}

// Stage makes the staged copy and starts it as a standby of the archive (a copy left by an earlier
// attempt is removed first). It returns once the standby accepts connections.
func (m *Manager) Stage(ctx context.Context, spec StageSpec) error {
	if strings.ContainsAny(spec.Key, "/\\") || spec.Key == "" || spec.Key == "." || spec.Key == ".." {
		return fmt.Errorf("stage: invalid key %q", spec.Key)
	}
	m.RemoveStaged(ctx, spec.Instance)
	st := m.stagedInstance(spec.Instance, spec.Key)
	var err error
	if st.Port, err = postgres.FreePort(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(st.Dir), 0o711); err != nil {
		return err
	}
	if err := m.cfg.User.Mkdir(st.Dir, 0o700); err != nil {
		return err
	}
	cert, key, ca, err := m.cfg.CA.InstanceTLS(m.cfg.CertHosts...)
	if err != nil {
		return fmt.Errorf("stage: instance certificate: %w", err)
	}
	if err := st.WriteTLS(cert, key, ca); err != nil {
		return err
	}
	if err := st.MarkInitialized(); err != nil { // postgres.Instance starts only directories marked so
		return err
	}
	if err := spec.Archive.FetchBase(ctx, nil, st.DataDir()); err != nil {
		return fmt.Errorf("stage: copy the base backup: %w", err)
	}
	auto := filepath.Join(st.DataDir(), "postgresql.auto.conf")
	original, err := os.ReadFile(auto)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var c strings.Builder
	c.WriteString(stageMarker)
	fmt.Fprintf(&c, "restore_command = %s\n", QuoteLiteral(spec.Archive.RestoreCommand))
	c.WriteString("recovery_target_timeline = 'latest'\n")
	// A segment not archived yet is asked for again soon (the default waits 5 s between tries).
	c.WriteString("wal_retrieve_retry_interval = '200ms'\n")
	c.WriteString("hot_standby = on\n")
	if err := m.writeUserFile(auto, append(append(original, c.String()...), '\n')); err != nil {
		return err
	}
	if err := m.writeUserFile(filepath.Join(st.DataDir(), "standby.signal"), nil); err != nil {
		return err
	}
	if err := startScratch(ctx, nil, st); err != nil {
		return fmt.Errorf("stage: start the standby: %w", err)
	}
	return m.writeUserFile(filepath.Join(st.Dir, stagePortFile), []byte(strconv.Itoa(st.Port)))
}

// stagePortFile, in a staged copy's directory, holds its standby's port.
const stagePortFile = "stage.port"

// staged is the scratch server of a staged copy that exists, with its port.
func (m *Manager) staged(inst *store.Instance, key string) (*postgres.Instance, error) {
	st := m.stagedInstance(inst, key)
	b, err := os.ReadFile(filepath.Join(st.Dir, stagePortFile))
	if err != nil {
		return nil, err
	}
	if st.Port, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		return nil, err
	}
	return st, nil
}

// StagedReplayLSN is where the staged standby of inst (staging key) has replayed to ("" none yet).
func (m *Manager) StagedReplayLSN(ctx context.Context, inst *store.Instance, key, adminPW string) (string, error) {
	st, err := m.staged(inst, key)
	if err != nil {
		return "", err
	}
	if _, running, _ := st.Status(); !running {
		return "", fmt.Errorf("the staged standby (%s) does not run", st.Dir)
	}
	conn, err := st.Admin(ctx, adminPW)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return replayLSN(ctx, conn)
}

// replayLSN is where the server conn is connected to has replayed WAL to ("" none yet).
func replayLSN(ctx context.Context, conn *pgx.Conn) (string, error) {
	var lsn *string
	if err := conn.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn()::text").Scan(&lsn); err != nil {
		return "", err
	}
	if lsn == nil {
		return "", nil
	}
	return *lsn, nil
}

// CheckpointStaged makes the staged standby write what it replayed to disk (CHECKPOINT: a restartpoint at
// the last checkpoint it replayed), so that the checkpoints of its promotion and stop at the cutover have
// only what it replays after this to write.
func (m *Manager) CheckpointStaged(ctx context.Context, inst *store.Instance, key, adminPW string) error {
	st, err := m.staged(inst, key)
	if err != nil {
		return err
	}
	conn, err := st.Admin(ctx, adminPW)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "CHECKPOINT")
	return err
}

// PromoteStaged promotes the staged standby of inst (staging key): it ends its recovery where its replay
// is (pg_promote, a new timeline), and returns that position. offArchive: its restore_command is dropped
// first, so that the promotion asks the archive for nothing (each fetch runs the WAL program: the
// timeline's choice probes the archive for the next timelines' history files, and the new timeline's
// history for its parent's) — for a caller that knows the archive holds no history file of a later
// timeline than the one replayed (the choice is then the same).
func (m *Manager) PromoteStaged(ctx context.Context, inst *store.Instance, key, adminPW string, offArchive bool) (string, error) {
	st, err := m.staged(inst, key)
	if err != nil {
		return "", err
	}
	if offArchive {
		auto := filepath.Join(st.DataDir(), "postgresql.auto.conf")
		b, err := os.ReadFile(auto)
		if err != nil {
			return "", err
		}
		if i := strings.Index(string(b), stageMarker); i >= 0 {
			conf := string(b[:i]) + stageMarker + "restore_command = ''\nrecovery_target_timeline = 'latest'\nhot_standby = on\n"
			if err := m.writeUserFile(auto, []byte(conf)); err != nil {
				return "", err
			}
		}
	}
	conn, err := st.Admin(ctx, adminPW)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	lsn, err := replayLSN(ctx, conn)
	if err != nil {
		return "", err
	}
	if lsn == "" {
		return "", errors.New("the staged standby replayed nothing")
	}
	if offArchive {
		if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			return "", err
		}
	}
	var promoted bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&promoted); err != nil {
		return "", fmt.Errorf("promote the staged standby: %w", err)
	}
	if !promoted {
		return "", errors.New("the staged standby was not promoted within 60 s")
	}
	return lsn, nil
}

// StagedFill is a fill (CloneSpec.Fill) that hands the staged copy's data directory over: its server
// stopped, its standby settings dropped, its data directory moved to dataDir.
func (m *Manager) StagedFill(inst *store.Instance, key string) func(context.Context, daemon.ExecFunc, string) error {
	return func(ctx context.Context, exec daemon.ExecFunc, dataDir string) error {
		st, err := m.staged(inst, key)
		if err != nil {
			return fmt.Errorf("the staged copy: %w", err)
		}
		if err := st.Stop(ctx, exec, daemon.StopFast); err != nil {
			return fmt.Errorf("stop the staged copy: %w", err)
		}
		auto := filepath.Join(st.DataDir(), "postgresql.auto.conf")
		b, err := os.ReadFile(auto)
		if err != nil {
			return err
		}
		if i := strings.Index(string(b), stageMarker); i >= 0 {
			if err := m.writeUserFile(auto, b[:i]); err != nil {
				return err
			}
		}
		if err := os.Remove(filepath.Join(st.DataDir(), "standby.signal")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if err := os.Rename(st.DataDir(), dataDir); err != nil {
			return fmt.Errorf("move the staged data in: %w", err)
		}
		return os.RemoveAll(st.Dir)
	}
}

// RemoveStaged stops and removes every staged copy of inst on this node.
func (m *Manager) RemoveStaged(ctx context.Context, inst *store.Instance) {
	dirs, _ := filepath.Glob(filepath.Join(filepath.Dir(inst.Dir), inst.ID+".stage-*"))
	for _, dir := range dirs {
		key := strings.TrimPrefix(filepath.Base(dir), inst.ID+".stage-")
		m.removeCandidate(ctx, m.stagedInstance(inst, key))
	}
}

// RemoveAllStaged removes every staged copy in instancesDir (what interrupted move-ins left, at the node's
// start; their standbys stopped first) and returns the instances whose copies it removed.
func (m *Manager) RemoveAllStaged(ctx context.Context, instancesDir string) []string {
	dirs, _ := filepath.Glob(filepath.Join(instancesDir, "*.stage-*"))
	var removed []string
	for _, dir := range dirs {
		id, _, _ := strings.Cut(filepath.Base(dir), ".stage-")
		if id == "" || slices.Contains(removed, id) {
			continue
		}
		removed = append(removed, id)
		m.RemoveStaged(ctx, &store.Instance{ID: id, Dir: filepath.Join(instancesDir, id)})
	}
	return removed
}
