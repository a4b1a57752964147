package appliance

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// RecoveryProgressFile is the name, in the data directory, of the record of a recovery under way (see
// docs/api-decisions.md, "Recover: rerunnable, in parallel"). recover writes it before anything else and
// removes it once every project is restored: a data directory holding it is a recovery to finish.
const RecoveryProgressFile = "recovery-progress.json"

// Project states in the record.
const (
	RecoveryPending  = "pending"  // not restored yet (or its attempt was interrupted: wiped and done again)
	RecoveryRestored = "restored" // rebuilt and recorded running; a rerun verifies it and keeps it
	RecoveryFailed   = "failed"   // its last attempt failed; a rerun tries again
)

// RecoveryProgress is the record of one recovery into a data directory: the metadata snapshot it put
// there, whether that is in place, whether the records were reconciled, and each project's state. Its
// methods are safe for concurrent use; each change is written at once (to a temporary file, synced, then
// renamed).
type RecoveryProgress struct {
	mu   sync.Mutex
	path string
	rec  recoveryRecord
}

type recoveryRecord struct {
	Version     int    `json:"version"` // 1
	BackupStore string `json:"backup_store"`
	// Snapshot is the metadata snapshot this recovery put into the data directory (the manifest's id, its
	// time and store generation).
	Snapshot           string    `json:"snapshot"`
	SnapshotCreated    time.Time `json:"snapshot_created"`
	SnapshotGeneration uint64    `json:"snapshot_generation"`
	StartedAt          time.Time `json:"started_at"`
	Runs               int       `json:"runs"`
	// MetadataInstalled: meta.db, the CA, secret.key and recovery.key are in place (and from then on are
	// this recovery's: never put back again).
	MetadataInstalled bool `json:"metadata_installed"`
	// Reconciled: the records were fitted to this machine and Projects lists the projects to rebuild.
	Reconciled bool              `json:"reconciled"`
	Projects   []ProjectRecovery `json:"projects"`
}

// ProjectRecovery is one project's entry in the record.
type ProjectRecovery struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	State string `json:"state"`
	// Notes are what reconcile changed (ports moved), shown with the project's report.
	Notes []string `json:"notes,omitempty"`
	// Where its restore ended (State restored).
	BackupKey string     `json:"backup_key,omitempty"`
	LSN       string     `json:"lsn,omitempty"`
	At        *time.Time `json:"at,omitempty"`
	Timeline  int        `json:"timeline,omitempty"`
	Error     string     `json:"error,omitempty"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// ErrNoRecoveryProgress is LoadRecoveryProgress's error when the data directory holds no record.
var ErrNoRecoveryProgress = errors.New("no recovery under way")

// NewRecoveryProgress writes the first record of a recovery into dataDir (made if need be) of the
// snapshot it is about to put there: before anything else is written into the directory.
func NewRecoveryProgress(dataDir, backupStore, snapshot string, created time.Time, generation uint64, now time.Time) (*RecoveryProgress, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	p := &RecoveryProgress{path: filepath.Join(dataDir, RecoveryProgressFile), rec: recoveryRecord{Version: 1, BackupStore: backupStore,
		Snapshot: snapshot, SnapshotCreated: created, SnapshotGeneration: generation, StartedAt: now, Runs: 1}}
	return p, p.save()
}

// LoadRecoveryProgress reads the record in dataDir (ErrNoRecoveryProgress: none) and counts one more run.
func LoadRecoveryProgress(dataDir string) (*RecoveryProgress, error) {
	p := &RecoveryProgress{path: filepath.Join(dataDir, RecoveryProgressFile)}
	b, err := os.ReadFile(p.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoRecoveryProgress
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &p.rec); err != nil {
		return nil, fmt.Errorf("%s: %w", p.path, err)
	}
	if p.rec.Version != 1 || p.rec.Snapshot == "" {
		return nil, fmt.Errorf("%s: not a record of recover's (version %d, snapshot %q)", p.path, p.rec.Version, p.rec.Snapshot)
	}
	return p, nil
}

// Path is the record's file.
func (p *RecoveryProgress) Path() string { return p.path }

// Snapshot is the metadata snapshot's id, time and generation.
func (p *RecoveryProgress) Snapshot() (id string, created time.Time, generation uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rec.Snapshot, p.rec.SnapshotCreated, p.rec.SnapshotGeneration
}

// BackupStore is the --backup-store of the run that began the recovery.
func (p *RecoveryProgress) BackupStore() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rec.BackupStore
}

// MetadataInstalled reports whether the snapshot's files are in place.
func (p *RecoveryProgress) MetadataInstalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rec.MetadataInstalled
}

// NewRun counts one more run of recover on the record.
func (p *RecoveryProgress) NewRun() error {
	return p.change(func(r *recoveryRecord) { r.Runs++ })
}

// Runs is how many runs of recover worked on the record (this one included).
func (p *RecoveryProgress) Runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rec.Runs
}

// SetMetadataInstalled records that the snapshot's files are in place.
func (p *RecoveryProgress) SetMetadataInstalled() error {
	return p.change(func(r *recoveryRecord) { r.MetadataInstalled = true })
}

// Projects is a copy of the projects' entries, in the order they are rebuilt (nil before reconcile).
func (p *RecoveryProgress) Projects() []ProjectRecovery {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.rec.Projects)
}

// Counts is how many projects are in each state.
func (p *RecoveryProgress) Counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := map[string]int{}
	for _, e := range p.rec.Projects {
		n[e.State]++
	}
	return n
}

// Done reports whether the records were reconciled and every project is restored.
func (p *RecoveryProgress) Done() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rec.Reconciled && !slices.ContainsFunc(p.rec.Projects, func(e ProjectRecovery) bool { return e.State != RecoveryRestored })
}

// Remove deletes the record: the recovery is finished.
func (p *RecoveryProgress) Remove() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := os.Remove(p.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(p.path))
}

func (p *RecoveryProgress) reconciled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rec.Reconciled
}

// setProjects records the projects reconcile chose, all pending.
func (p *RecoveryProgress) setProjects(es []ProjectRecovery) error {
	return p.change(func(r *recoveryRecord) { r.Projects, r.Reconciled = es, true })
}

// setProject replaces a project's entry.
func (p *RecoveryProgress) setProject(e ProjectRecovery) error {
	return p.change(func(r *recoveryRecord) {
		if i := slices.IndexFunc(r.Projects, func(o ProjectRecovery) bool { return o.ID == e.ID }); i >= 0 {
			r.Projects[i] = e
		}
	})
}

func (p *RecoveryProgress) change(fn func(*recoveryRecord)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(&p.rec)
	return p.save()
}

// save writes the record (p.mu held, or p not shared yet).
func (p *RecoveryProgress) save() error {
	b, err := json.MarshalIndent(&p.rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := p.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write the recovery's record: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p.path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(p.path))
	}
	if err != nil {
		return fmt.Errorf("write the recovery's record: %w", err)
	}
	return nil
}

// syncDir makes a directory's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
