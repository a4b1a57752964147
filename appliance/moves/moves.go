// Package moves moves a project from its cluster node to another one (POST /v1/projects/{id}/move) and
// drains a node of its projects before it is removed (appliance cluster remove-node). The data travels
// through the off-machine backup store. First, while the source still serves, the target stages a copy:
// the newest base backup (a fresh one taken first when there is none or it is old) restored and started as
// a standby of the WAL archive, caught up with a WAL switch the source archived. Then the pause: on the
// source the project's writes stop (pooler stopped, server fenced), its last WAL is archived and its
// server stops; the target's standby replays that last segment, is promoted and becomes the project's
// instance there (nodeloss's rebuild, from the staged copy), and opens. The source keeps its directory
// aside (instances/<id>.moved-<time>, never deleted). A failure before the pause removes the staged copy
// and leaves the source serving; one after puts the records back and the source serves again — unless the
// target had opened the project (OpenedBy): then the move stands, whatever became of the move-in. The two jobs
// talk through the store's meta (stagePrefix, cutoverPrefix). The rest of the domain only through Host
// (the root's moveHost).
package moves

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/cluster/lease"
	"github.com/theappliance/appliance/appliance/nodeloss"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// Job types.
const (
	// JobMove runs on the source node (the project's): it enqueues JobMoveIn on the target, waits for its
	// staged copy, pauses (archive, stop), waits for JobMoveIn's cutover; then it keeps the source's
	// directory aside (or, the move-in failed before it opened the project on the target, resumes).
	JobMove = "project.move"
	// JobMoveIn runs on the target node: a copy staged there, then, at the cutover, promoted and opened.
	JobMoveIn = "project.move_in"
	// JobDrain moves every project of a node to the others (appliance cluster remove-node enqueues it).
	JobDrain = "cluster.drain"
)

// EventMoved is appended as a project opens on the node it moved to.
const EventMoved = "project.moved"

// metaPrefix keys, in the store's meta, a running move of a project: the move job's id (one at a time).
const metaPrefix = "move/"

// recordsPrefix keys the project's and its instance's records as they were before the target rebuilt
// it (JSON): a failed move-in puts them back.
const recordsPrefix = "move_records/"

// Host is what the area uses of the rest of the domain (the root's moveHost).
type Host interface {
	// Enqueue enqueues a job of prj inside tx (the project's latest job; pinned to its node).
	Enqueue(tx *store.Tx, prj *store.Project, jobType, lock string, payload any) (*store.Job, error)
	// Notify wakes the job runner.
	Notify()
	// AuditSystem records, inside tx, an audit event the system did.
	AuditSystem(tx *store.Tx, action, orgID, projectID string, metadata any) error
	// AppendEvent appends, inside tx, an event of the event log.
	AppendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error
	// Rooms measures the live active nodes (placement's Rooms), best first.
	Rooms(tx *store.Tx, live map[string]bool) ([]Room, error)
	// Pause stops the project's writes on this node: pooler stopped, server fenced and its client
	// sessions ended, a WAL switch archived in the backup store, the server stopped. It returns the WAL
	// position the switch ended the last archived segment at, and the timeline.
	Pause(ctx context.Context, projectID string) (lsn string, timeline int, err error)
	// Resume starts the project's server and pooler on this node again and lets clients in (a failed
	// move's undoing; a running server is left running).
	Resume(ctx context.Context, projectID string) error
	// Rebuild is nodeloss's: the project's records moved to this node, its instance rebuilt from the
	// backup store, watched; its URLs name this node's public host.
	Rebuild(ctx context.Context, projectID, from string) (*nodeloss.Rebuilt, error)
	// Discard stops and removes this node's copy of the project's instance (a failed move-in's).
	Discard(ctx context.Context, projectID string) error
	// StopLocal stops this node's server and pooler of the project's instance if they run.
	StopLocal(ctx context.Context, projectID string) error
	// On the target: Stage restores the project's newest base backup (of the cluster it runs) into a
	// staging directory named by key and starts it as a standby of the WAL archive, and returns the
	// backup's key; StagedReplay is where that standby replayed to; RebuildStaged is Rebuild from that copy
	// (the base backup backupKey's; promoted first; its server started fenced, admitting no client until
	// opened is written in the transaction that records the project active here: the move's commit;
	// started is called once the server and pooler run, before that transaction); RemoveStaged stops and
	// removes every staged copy of the project here.
	Stage(ctx context.Context, projectID, key string) (backupKey string, err error)
	StagedReplay(ctx context.Context, projectID, key string) (lsn string, err error)
	// CheckpointStaged writes what the staged standby replayed to disk (a restartpoint).
	CheckpointStaged(ctx context.Context, projectID, key string) error
	// PromoteStaged ends the staged standby's recovery where its replay is and returns that position
	// (timeline: the one the source wrote on, 0 unknown).
	PromoteStaged(ctx context.Context, projectID, key string, timeline int) (lsn string, err error)
	// opened is written in the transaction that records the project active here (the move's commit).
	RebuildStaged(ctx context.Context, projectID, from, key, backupKey string, started func(context.Context), opened func(*store.Tx) error) (*nodeloss.Rebuilt, error)
	RemoveStaged(ctx context.Context, projectID string) error
	// On the source: CatchUp commits, switches the WAL and waits until the segment is in the archive,
	// and returns the switch's position; WALSince is how many bytes of WAL the server wrote since lsn;
	// TakeBackup takes a base backup of the project within run.
	CatchUp(ctx context.Context, projectID string) (lsn string, err error)
	WALSince(ctx context.Context, projectID, lsn string) (int64, error)
	TakeBackup(ctx context.Context, run *scheduler.Run, projectID, label string) (backupKey string, err error)
	// Step calls the job-step hook of test builds (Deps.JobStepHook; nothing in a release build).
	Step(ctx context.Context, jobID, step string)
	// InstancesDir is this node's directory of instances.
	InstancesDir() string
	// SetRuntime sets the project's runtime status.
	SetRuntime(projectID, status string)
}

// Room is a node's room for one more project (placement's NodeRoom, what a move needs of it).
type Room struct {
	Node      *store.Node
	PortsFree int
}

// Config is the area's settings.
type Config struct {
	// NodeID is this node of the cluster ("" on a single node).
	NodeID string
}

// Deps are the area's collaborators.
type Deps struct {
	DB    *store.DB
	Log   *slog.Logger
	Clock func() time.Time
	// Members is this node's place in its cluster (nil: a single node).
	Members lease.Membership
	// BackupStore tells whether the appliance has an off-machine backup store (up --backup-store).
	BackupStore bool
	Host        Host
}

// Service is the move area.
type Service struct {
	cfg           Config
	db            *store.DB
	log           *slog.Logger
	now           func() time.Time
	members       lease.Membership
	backupObjects bool
	host          Host
	// poll is how often a job waits on another's state.
	poll time.Duration
}

// New builds the area.
func New(cfg Config, deps Deps) *Service {
	return &Service{cfg: cfg, db: deps.DB, log: deps.Log, now: deps.Clock, members: deps.Members,
		backupObjects: deps.BackupStore, host: deps.Host, poll: 100 * time.Millisecond}
}

// RegisterJobs registers the area's jobs.
func (s *Service) RegisterJobs(r *scheduler.Runner) {
	r.Handle(JobMove, s.moveJob)
	r.Handle(JobMoveIn, s.moveInJob)
	r.Handle(JobDrain, s.drainJob)
}

// movePayload is JobMove's payload.
type movePayload struct {
	To string `json:"to_node"`
}

// moveInPayload is JobMoveIn's payload: Key (the move job's id) names its staging ("": no staging, the
// rebuild from the store in the pause, as the first version did).
type moveInPayload struct {
	From string `json:"from_node"`
	Key  string `json:"key,omitempty"`
}

// Result is JobMove's result.
type Result struct {
	From         string `json:"from_node"`
	To           string `json:"to_node"`
	WritePauseMS int64  `json:"write_pause_ms"`
	LSN          string `json:"lsn"`
	BackupKey    string `json:"backup_key"`
	KeptAside    string `json:"kept_aside,omitempty"`
	// StagingMS is how long the target took to stage its copy (base backup restored, standby started,
	// replayed up to the catch-up point), before the pause; the source served meanwhile.
	StagingMS int64 `json:"staging_ms"`
	// FreshBackup is the base backup the move took first ("": the newest one was recent enough).
	FreshBackup string `json:"fresh_backup,omitempty"`
	// StepsMS: backup (a fresh base backup first, if one was taken) and staging, before the pause; then
	// the write pause's parts: pause (pooler stopped, server fenced, last WAL archived, server stopped, on
	// the source) and cutover (the staged copy's last replay, promotion and opening on the target).
	StepsMS  map[string]int64 `json:"steps_ms,omitempty"`
	Warnings []string         `json:"warnings"`
}

// moveInResult is JobMoveIn's result.
type moveInResult struct {
	LSN       string   `json:"lsn"`
	BackupKey string   `json:"backup_key"`
	Notes     []string `json:"notes,omitempty"`
	StagingMS int64    `json:"staging_ms,omitempty"`
	// StepsMS times the cutover's steps on the target: replay (the staged copy's last segment), then the
	// rebuild's (rebuild.*).
	StepsMS map[string]int64 `json:"steps_ms,omitempty"`
}

// Audit records, inside tx, the operator's request (the root's principal).
type Audit func(tx *store.Tx, prj *store.Project, metadata any) error

// Move is POST /v1/projects/{projectID}/move (platform operators): checks, then enqueues the move of the
// project to node on its node. Each refusal changes nothing.
func (s *Service) Move(ctx context.Context, projectID, node string, audit Audit) (*store.Job, error) {
	if s.cfg.NodeID == "" || s.members == nil {
		return nil, apperr.Conflict("this appliance is a single node: there is no other node to move a project to")
	}
	if node == "" {
		return nil, apperr.Invalid("node is required: the id of the node to move the project to (appliance cluster nodes lists them)")
	}
	live, err := s.live(ctx)
	if err != nil {
		return nil, err
	}
	var j *store.Job
	err = s.db.Update(func(tx *store.Tx) error {
		prj, err := store.Projects.Get(tx, projectID)
		if errors.Is(err, store.ErrNotFound) || err == nil && prj.State == api.ProjectDeleted {
			return apperr.NotFound("project %s not found", projectID)
		} else if err != nil {
			return err
		}
		if err := s.Check(tx, prj, node, live); err != nil {
			return err
		}
		j, err = s.enqueue(tx, prj, node)
		if err != nil {
			return err
		}
		if audit != nil {
			return audit(tx, prj, map[string]any{"from_node": store.ProjectNode(tx, prj), "to_node": node, "job_id": j.ID})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.host.Notify()
	return j, nil
}

// live is the set of nodes holding a lease.
func (s *Service) live(ctx context.Context) (map[string]bool, error) {
	members, err := s.members.Live(ctx)
	if err != nil {
		return nil, apperr.Internal(err, "read the cluster's live nodes")
	}
	live := map[string]bool{}
	for _, m := range members {
		live[m.Node] = true
	}
	return live, nil
}

// Check says why prj cannot move to node now (nil: it can): node unknown (400), the node it is on, a
// node without a lease or not active, a project not active, a target without a free port pair, no
// off-machine backup store or the project's WAL not archived in it, a move already running (409). A
// project without a base backup may move: the move takes one first.
func (s *Service) Check(tx *store.Tx, prj *store.Project, node string, live map[string]bool) error {
	from := store.ProjectNode(tx, prj)
	target, err := store.Nodes.Get(tx, node)
	if errors.Is(err, store.ErrNotFound) {
		return apperr.Invalid("no node %s in this cluster (appliance cluster nodes lists them)", node)
	} else if err != nil {
		return err
	}
	if node == from {
		return apperr.Conflict("project %s is on node %s already", prj.ID, node)
	}
	if id := tx.Meta(metaPrefix + prj.ID); id != "" {
		return apperr.Conflict("project %s is being moved already (job %s)", prj.ID, id)
	}
	if prj.State != api.ProjectActive || (prj.RuntimeStatus != "" && prj.RuntimeStatus != api.RuntimeActive) {
		return apperr.Conflict("project %s is %s (runtime status %s): only an active, running project can move", prj.ID, prj.State, prj.RuntimeStatus)
	}
	if !live[from] {
		return apperr.Conflict("project %s's node %s holds no lease: a move needs it alive (a lost node's projects are restored elsewhere: POST .../restore-elsewhere)", prj.ID, from)
	}
	if target.State != store.NodeActive || !live[node] {
		return apperr.Conflict("node %s is not alive (state %s, lease held: %v): a project moves only to a node that runs", node, target.State, live[node])
	}
	if !s.backupObjects {
		return apperr.Conflict("no off-machine backup store (up --backup-store): a move carries the project's data through it (its base backup and WAL archive), so without one no project can move between nodes")
	}
	// No base backup yet is no refusal: the move takes one first (freshBackupNeeded). Without the WAL
	// archive the target could not replay what the project wrote since that backup.
	if inst, err := store.Instances.Get(tx, prj.PrimaryInstanceID); err == nil && inst.WALArchiveOff {
		return apperr.Conflict("project %s's WAL is not archived in the backup store (archiving is off): the target replays the project's writes from that archive, so it cannot move", prj.ID)
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	rooms, err := s.host.Rooms(tx, live)
	if err != nil {
		return err
	}
	for _, r := range rooms {
		if r.Node.ID == node {
			if r.PortsFree < 2 {
				return apperr.Conflict("node %s has no free pair of ports left (its range %d-%d is taken): no room for project %s", node, target.PortsFirst, target.PortsLast, prj.ID)
			}
			return nil
		}
	}
	return apperr.Conflict("node %s has no room measure (not active, or holds no lease)", node)
}

// StagingOn is the node a running move of the project stages its copy on ("" when none runs, or the
// project is on that node already: the cutover made the copy its instance). Placement counts the staged
// standby there (the plan's memory, the storage limit) from the move's start, the fresh base backup taken
// first included, to the move's end: the target reserves the room before the standby takes it.
func StagingOn(tx *store.Tx, prj *store.Project) string {
	id := tx.Meta(metaPrefix + prj.ID)
	if id == "" {
		return ""
	}
	j, err := store.Jobs.Get(tx, id)
	if err != nil || j.Type != JobMove {
		return ""
	}
	var pl movePayload
	if json.Unmarshal(j.Payload, &pl) != nil || pl.To == "" || pl.To == store.ProjectNode(tx, prj) {
		return ""
	}
	return pl.To
}

// PausedBy tells whether a running move paused the project on its node (the source): its writes stopped
// and its server stopped or stopping, the move job (retried after a crash) deciding what comes next: a
// pause it did not finish is undone (the source serves again), a finished one is the target's cutover
// (the project opens there, or, that failing, here again). A node starting does not start such a
// project's server: it would take writes (or, fenced, at least WAL) the target's copy never sees.
//
// Once the target opened the project (OpenedBy) the move happened: the project is the target's, and the
// target's start serves it (the source's start fences its stale copy, another node's project).
func PausedBy(tx *store.Tx, projectID string) bool {
	if tx.Meta(metaPrefix+projectID) == "" || OpenedBy(tx, projectID) {
		return false
	}
	var rec records
	raw := tx.Meta(recordsPrefix + projectID)
	return raw != "" && json.Unmarshal([]byte(raw), &rec) == nil && !rec.PausedAt.IsZero()
}

// UnopenedOn tells whether node is the target of a running move that paused the project and moved its
// records there without opening it (the rebuild interrupted: no word stateOpened). Such a move is rolled
// back by the source (the project serves there again): the target's copy is not the project's, and a
// server of it left running (PostgreSQL outlives the appliance) is stopped by the target's start.
func UnopenedOn(tx *store.Tx, projectID, node string) bool {
	if !PausedBy(tx, projectID) {
		return false
	}
	var rec records
	if json.Unmarshal([]byte(tx.Meta(recordsPrefix+projectID)), &rec) != nil || rec.Project == nil {
		return false
	}
	p, err := store.Projects.Get(tx, projectID)
	return err == nil && store.ProjectNode(tx, p) == node && store.ProjectNode(tx, rec.Project) != node
}

// CutoverTold tells whether the running move of the project told its target where the source paused (the
// cutover's PausedLSN): from then on the target may have promoted its copy — a new timeline, whose history
// file its archiver may put into the project's WAL archive at any time, even after a rollback (the target
// killed, then started again). A source resumed then moves itself to a timeline above that one first.
func CutoverTold(tx *store.Tx, projectID string) bool {
	c, ok := runningMoveWord(tx, projectID, cutoverPrefix, func(c cutover) string { return c.Key })
	return ok && c.PausedLSN != ""
}

// runningMoveWord reads one side's word of the project's running move (the meta key prefix+projectID): ok
// when there is a running move (its mark) and the word is this move's (key says whose it is).
func runningMoveWord[W any](tx *store.Tx, projectID, prefix string, key func(W) string) (w W, ok bool) {
	mark := tx.Meta(metaPrefix + projectID)
	raw := tx.Meta(prefix + projectID)
	if mark == "" || raw == "" || json.Unmarshal([]byte(raw), &w) != nil {
		return w, false
	}
	return w, key(w) == mark
}

// OpenedBy tells whether the running move of the project (its mark) opened it on its target: the target
// wrote its word "opened" (stageState) in the transaction of the rebuild's last records (the project
// active there, its copy's placement epoch recorded in its directory before its server started). From
// then on the move happened, whatever becomes of the move-in job: the source does not take the project
// back (the target acknowledged writes only its copy holds).
func OpenedBy(tx *store.Tx, projectID string) bool {
	st, ok := runningMoveWord(tx, projectID, stagePrefix, func(st stageState) string { return st.Key })
	return ok && st.State == stateOpened
}

// enqueue enqueues prj's move to node (on its node) and marks it running.
func (s *Service) enqueue(tx *store.Tx, prj *store.Project, node string) (*store.Job, error) {
	j, err := s.host.Enqueue(tx, prj, JobMove, prj.ID, movePayload{To: node})
	if err != nil {
		return nil, err
	}
	return j, tx.SetMeta(metaPrefix+prj.ID, j.ID)
}

// records is the project's and its instance's records before the move-in (recordsPrefix), and how far the
// move went: MoveIn set, the target stages; PausedAt set, the source is pausing; LSN set, it paused and
// the cutover is the target's.
type records struct {
	Project   *store.Project  `json:"project"`
	Instance  *store.Instance `json:"instance"`
	MoveIn    string          `json:"move_in_job"`
	StagingAt time.Time       `json:"staging_at"`
	StagedAt  time.Time       `json:"staged_at"`
	BackupMS  int64           `json:"backup_ms,omitempty"`
	Backup    string          `json:"fresh_backup,omitempty"`
	PausedAt  time.Time       `json:"paused_at"`
	StoppedAt time.Time       `json:"stopped_at"`
	LSN       string          `json:"lsn"`
}

// The staging's coordination between the two nodes' jobs, in the store's meta (JSON): stagePrefix is the
// target's (stageState), cutoverPrefix the source's (cutover). Each job writes its own key only.
const (
	stagePrefix   = "move_stage/"
	cutoverPrefix = "move_cutover/"
)

// stageState is what the target says of its staged copy.
type stageState struct {
	// State is "standby" (the copy runs, replaying the archive), "staged" (it replayed up to the
	// source's catch-up point) or stateOpened (promoted, the project's records name the target and it
	// opened there: the move happened).
	State     string `json:"state"`
	Key       string `json:"key"` // the move's (a word left by an earlier move is not this one's)
	BackupKey string `json:"backup_key"`
	ReplayLSN string `json:"replay_lsn,omitempty"`
	StagingMS int64  `json:"staging_ms,omitempty"`
	// OpenedAt is when the target opened the project (stateOpened).
	OpenedAt time.Time `json:"opened_at,omitzero"`
}

// cutover is what the source says: the catch-up point (its WAL switched and archived while it still
// serves), then the position it paused at (writes stopped, last WAL archived, server stopped), or that the
// move is abandoned (the target removes its copy).
type cutover struct {
	Key        string `json:"key"` // the move's
	CatchUpLSN string `json:"catch_up_lsn,omitempty"`
	PausedLSN  string `json:"paused_lsn,omitempty"`
	Timeline   int    `json:"timeline,omitempty"`
	Abort      string `json:"abort,omitempty"`
}

// Fresh base backup rule: the target stages from the newest base backup and replays the archive since;
// that replay happens before the pause, but it bounds how long the staging takes. A move takes a fresh base
// backup first (on the source, while it serves) when the newest is of another cluster than the one the
// project runs, or is older than FreshBackupAge, or more than FreshBackupWAL bytes of WAL were written
// since its end.
const (
	FreshBackupAge = 24 * time.Hour
	FreshBackupWAL = 256 << 20
)

// Waits of the staging: how long the target waits for the source's next word, and how long for its copy's
// replay to reach the source's catch-up point.
var (
	waitSource  = 10 * time.Minute
	waitReplay  = 30 * time.Minute
	waitPaused  = time.Minute
	errAbandons = errors.New("the move was abandoned")
	holdStep    = 10 * time.Second
	// holdCutover bounds the test builds' hold at StepCutover: the source paused there, and a test kills
	// and starts again a node meanwhile (it releases the hold once done).
	holdCutover = 30 * time.Second
)

// stateOpened is the target's word once the rebuild opened the project there (OpenedBy).
const stateOpened = "opened"

// Job steps (JobStepHook) of a move-in at which a test build may hold it, up to 10 s (StepCutover 30 s),
// until the test releases it, or until its staged standby stops running (a test kills it there):
// StepStandby once the standby runs, before the source is told; StepStaged once it caught up, before the
// source is told (and pauses); StepCutover once the source paused (fenced, last WAL archived, server
// stopped), before the copy's last replay and promotion; StepStarted once the rebuild started the
// promoted copy's server (fenced: the admin's logins alone) and pooler, before the transaction that writes
// the word opened (held up to 30 s, whether or not a staged copy runs); StepOpened once the rebuild opened
// the project on the target (its records name it, it takes writes), before the move-in job completes (held up to 30 s,
// whether or not a staged copy runs: there is none left).
const (
	StepStandby = "move-standby"
	StepStaged  = "move-staged"
	StepCutover = "move-cutover"
	StepStarted = "move-started"
	StepOpened  = "move-opened"
)

// moveJob is JobMove, on the source node. Its steps are kept in the store's meta (recordsPrefix), so that a
// retry (the node restarted) goes on from where the last attempt was: while the target stages it waits for
// it again; interrupted in the pause it resumes the source and abandons the move; after the pause it waits
// for the move-in and finishes or rolls back.
func (s *Service) moveJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var pl movePayload
	if err := run.DecodePayload(&pl); err != nil {
		return nil, err
	}
	id := run.Job.ProjectID
	res := Result{From: s.cfg.NodeID, To: pl.To, Warnings: []string{}}
	var prj *store.Project
	var inst *store.Instance
	var rec records
	load := func() error {
		return s.db.View(func(tx *store.Tx) error {
			var err error
			if prj, err = store.Projects.Get(tx, id); err != nil {
				return err
			}
			if inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); err != nil {
				return err
			}
			if raw := tx.Meta(recordsPrefix + id); raw != "" {
				return json.Unmarshal([]byte(raw), &rec)
			}
			return nil
		})
	}
	if err := load(); err != nil {
		return nil, s.end(id, err)
	}
	save := func(tx *store.Tx) error {
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		return tx.SetMeta(recordsPrefix+id, string(b))
	}
	if rec.MoveIn == "" {
		if node := projectNode(s.db, prj); node != s.cfg.NodeID {
			return nil, s.end(id, fmt.Errorf("project %s is on node %s, not on this node %s: nothing to move from here", id, node, s.cfg.NodeID))
		}
		if run.Job.Attempts > 1 {
			// An earlier attempt stopped before handing over: the source serves (again) first.
			if err := s.host.Resume(ctx, id); err != nil {
				return nil, scheduler.Transient(fmt.Errorf("resume the project on this node after an interrupted attempt: %w", err))
			}
		}
		rec = records{Project: prj, Instance: inst}
		if why := s.freshBackupNeeded(ctx, id, inst); why != "" {
			_ = run.Progress(map[string]any{"step": "backup", "why": why})
			t := time.Now()
			key, err := s.host.TakeBackup(ctx, run, id, "move")
			if err != nil {
				return nil, s.end(id, fmt.Errorf("take a fresh base backup to stage the move from (%s): %w", why, err))
			}
			rec.Backup, rec.BackupMS = key, time.Since(t).Milliseconds()
		}
		// The move-in on the target: it stages a copy, then, at the cutover, opens it.
		rec.StagingAt = s.now()
		err := s.db.Update(func(tx *store.Tx) error {
			j := &store.Job{Type: JobMoveIn, OrganizationID: prj.OrganizationID, ProjectID: id, InstanceID: inst.ID,
				LockedResource: "move-in/" + id, Node: pl.To, MaxAttempts: 1}
			raw, _ := json.Marshal(moveInPayload{From: s.cfg.NodeID, Key: run.Job.ID})
			j.Payload = raw
			if err := scheduler.Enqueue(tx, j); err != nil {
				return err
			}
			rec.MoveIn = j.ID
			return save(tx)
		})
		if err != nil {
			return nil, s.end(id, fmt.Errorf("enqueue the move-in on node %s: %w", pl.To, err))
		}
		s.host.Notify()
	}
	if rec.PausedAt.IsZero() {
		// Staging: the target restores the newest base backup and replays the archive as a standby, while
		// this node serves. A failure there leaves the project here untouched.
		_ = run.Progress(map[string]any{"step": "staging", "move_in_job": rec.MoveIn})
		// A failure abandons the move; the node's shutdown does not (the job's retry waits again).
		staging := func(err error) error {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return s.abandon(ctx, id, run.Job.ID, rec, false, err)
		}
		if _, err := s.waitStage(ctx, rec.MoveIn, id, run.Job.ID, "standby"); err != nil {
			return nil, staging(err)
		}
		catchUp, err := s.host.CatchUp(ctx, id)
		if err != nil {
			return nil, staging(fmt.Errorf("archive the WAL for the staged copy to catch up with: %w", err))
		}
		if err := s.setCutover(id, cutover{Key: run.Job.ID, CatchUpLSN: catchUp}); err != nil {
			return nil, staging(err)
		}
		_ = run.Progress(map[string]any{"step": "catch-up", "move_in_job": rec.MoveIn, "lsn": catchUp})
		if _, err := s.waitStage(ctx, rec.MoveIn, id, run.Job.ID, "staged"); err != nil {
			return nil, staging(err)
		}
		// The pause. The records kept are those of now (a setting changed while the copy was staged).
		if err := load(); err != nil {
			return nil, s.abandon(ctx, id, run.Job.ID, rec, false, err)
		}
		rec.Project, rec.Instance = prj, inst
		rec.StagedAt, rec.PausedAt = s.now(), s.now()
		if err := s.db.Update(save); err != nil {
			return nil, s.abandon(ctx, id, run.Job.ID, rec, false, err)
		}
		_ = run.Progress(map[string]any{"step": "pause", "move_in_job": rec.MoveIn})
		lsn, timeline, err := s.host.Pause(ctx, id)
		if err != nil {
			return nil, s.abandon(ctx, id, run.Job.ID, rec, true, fmt.Errorf("pause the project's writes on node %s: %w", s.cfg.NodeID, err))
		}
		rec.LSN, rec.StoppedAt = lsn, s.now()
		err = s.db.Update(func(tx *store.Tx) error {
			if err := save(tx); err != nil {
				return err
			}
			return putJSON(tx, cutoverPrefix+id, cutover{Key: run.Job.ID, CatchUpLSN: catchUp, PausedLSN: lsn, Timeline: timeline})
		})
		if err != nil {
			return nil, s.abandon(ctx, id, run.Job.ID, rec, true, fmt.Errorf("tell node %s the pause's position: %w", pl.To, err))
		}
	} else if rec.LSN == "" {
		// An earlier attempt stopped in the pause: the source serves again and the move is abandoned.
		return nil, s.abandon(ctx, id, run.Job.ID, rec, true, errors.New("the move was interrupted during the pause on the source"))
	}
	_ = run.Progress(map[string]any{"step": "cutover", "move_in_job": rec.MoveIn})
	in, err := s.waitJob(ctx, rec.MoveIn)
	if err != nil {
		return nil, err // the context ended: a retry waits again
	}
	opened := time.Now()
	if in.CompletedAt != nil && !in.CompletedAt.Before(rec.PausedAt) {
		opened = *in.CompletedAt
	}
	res.LSN = rec.LSN
	var ir moveInResult
	if in.State != scheduler.StateCompleted {
		cause := fmt.Errorf("the rebuild on node %s failed (%s): %s", pl.To, in.State, in.Error)
		st, now, took := s.openedOn(id, run.Job.ID, pl.To, rec)
		if !took && now != "" && now != s.cfg.NodeID && now != pl.To {
			// Neither here nor on the target: taken by a third node meanwhile (restored there from the
			// backup store after the target's loss, while this node was down too). Putting the records back
			// would override that; this node's copy is stale, kept aside.
			cause = fmt.Errorf("%w; project %s is on node %s now (restored there while the move waited): nothing was put back on this node", cause, id, now)
			if aside, err := s.keepAside(ctx, id, inst); err != nil {
				cause = fmt.Errorf("%w (and keeping this node's stale copy aside: %v)", cause, err)
			} else if aside != "" {
				cause = fmt.Errorf("%w, its stale copy kept aside in %s", cause, aside)
			}
			return nil, s.end(id, cause)
		}
		if !took {
			return nil, s.end(id, s.rollback(ctx, rec, cause))
		}
		// The target opened the project (its records name it) before its job failed (the node killed,
		// say): the move happened. Taking the project back would lose what the target acknowledged.
		ir.BackupKey = st.BackupKey
		if !st.OpenedAt.IsZero() {
			opened = st.OpenedAt // the write pause ended there
		}
		res.Warnings = append(res.Warnings, fmt.Sprintf("the move-in job %s on node %s ended %s after it opened the project there (%s): "+
			"the project is node %s's, which serves it (again once it runs; if it does not come back, its loss is handled as any node's: "+
			"unavailable, then restored elsewhere from the backup store); this node's copy is kept aside, not resumed", in.ID, pl.To, in.State, in.Error, pl.To))
		s.log.Warn("move: the move-in failed after it opened the project on the target: the move stands", "project", id, "to_node", pl.To, "move_in_job", in.ID, "err", cause)
	} else {
		_ = json.Unmarshal(in.Result, &ir)
	}
	res.BackupKey = ir.BackupKey
	res.Warnings = append(res.Warnings, ir.Notes...)
	if ir.LSN != "" {
		res.LSN = ir.LSN
	}
	res.WritePauseMS = opened.Sub(rec.PausedAt).Milliseconds()
	res.StagingMS = rec.StagedAt.Sub(rec.StagingAt).Milliseconds()
	res.FreshBackup = rec.Backup
	res.StepsMS = map[string]int64{"staging": res.StagingMS, "pause": rec.StoppedAt.Sub(rec.PausedAt).Milliseconds(),
		"cutover": opened.Sub(rec.StoppedAt).Milliseconds()}
	if rec.BackupMS > 0 {
		res.StepsMS["backup"] = rec.BackupMS
	}
	for k, v := range ir.StepsMS {
		res.StepsMS["cutover."+k] = v
	}
	aside, err := s.keepAside(ctx, id, inst)
	if err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("the source's copy on node %s was not kept aside: %v (fencing does it when the node next holds its lease)", s.cfg.NodeID, err))
	}
	res.KeptAside = aside
	err = s.db.Update(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, id)
		if err != nil {
			return err
		}
		if err := s.host.AuditSystem(tx, "project.moved", p.OrganizationID, id, res); err != nil {
			return err
		}
		if err := s.host.AppendEvent(tx, EventMoved, p.OrganizationID, id, map[string]any{"project_id": id, "from_node": res.From, "to_node": res.To, "write_pause_ms": res.WritePauseMS, "lsn": res.LSN}); err != nil {
			return err
		}
		return clear(tx, id)
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("move: the project moved to another node", "project", id, "from_node", res.From, "to_node", res.To,
		"write_pause_ms", res.WritePauseMS, "staging_ms", res.StagingMS, "lsn", res.LSN, "kept_aside", aside)
	return res, nil
}

// openedOn reads whether the move key opened the project on node to (OpenedBy, and its records name that
// node at a later placement epoch than the one the move paused: not a half-done rebuild whose records were
// put back), the target's word, and the node the project's records name now ("" unread).
func (s *Service) openedOn(projectID, key, to string, rec records) (st stageState, node string, opened bool) {
	err := s.db.View(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		node = store.ProjectNode(tx, p)
		if tx.Meta(metaPrefix+projectID) != key || !OpenedBy(tx, projectID) {
			return nil
		}
		if err := json.Unmarshal([]byte(tx.Meta(stagePrefix+projectID)), &st); err != nil {
			return err
		}
		opened = node == to && (rec.Project == nil || p.PlacementEpoch > rec.Project.PlacementEpoch)
		return nil
	})
	if err != nil {
		s.log.Warn("move: read whether the target opened the project", "project", projectID, "err", err)
		return st, "", false
	}
	return st, node, opened
}

// freshBackupNeeded says why the move takes a fresh base backup first ("" when it does not: see
// FreshBackupAge and FreshBackupWAL).
func (s *Service) freshBackupNeeded(ctx context.Context, projectID string, inst *store.Instance) string {
	var newest *store.Backup
	_ = s.db.View(func(tx *store.Tx) error {
		bs, err := store.Backups.Lookup(tx, store.BackupsByProject, projectID, store.Query{})
		for _, b := range bs {
			if b.State == api.BackupCompleted && b.VerificationState != api.VerificationFailed && b.WALArchive == inst.WALArchive &&
				(newest == nil || b.CreatedAt.After(newest.CreatedAt)) {
				newest = b
			}
		}
		return err
	})
	switch {
	case newest == nil:
		return "no base backup of the cluster the project runs"
	case s.now().Sub(newest.CreatedAt) > FreshBackupAge:
		return fmt.Sprintf("the newest base backup is older than %s", FreshBackupAge)
	case newest.EndLSN != "":
		n, err := s.host.WALSince(ctx, projectID, newest.EndLSN)
		if err != nil {
			s.log.Warn("move: measure the WAL since the newest backup", "project", projectID, "err", err)
			return ""
		}
		if n > FreshBackupWAL {
			return fmt.Sprintf("%d MiB of WAL since the newest base backup (more than %d)", n>>20, FreshBackupWAL>>20)
		}
	}
	return ""
}

// putJSON writes v as JSON at key of the store's meta.
func putJSON(tx *store.Tx, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return tx.SetMeta(key, string(b))
}

// setCutover writes the source's word (cutoverPrefix).
func (s *Service) setCutover(projectID string, c cutover) error {
	return s.db.Update(func(tx *store.Tx) error { return putJSON(tx, cutoverPrefix+projectID, c) })
}

// waitStage waits until the target's staged copy is in state ("standby", or "staged"; staged is past
// standby) and returns what it says; an error when the move-in ended first.
func (s *Service) waitStage(ctx context.Context, moveIn, projectID, key, state string) (stageState, error) {
	for {
		var st stageState
		var j *store.Job
		err := s.db.View(func(tx *store.Tx) error {
			if raw := tx.Meta(stagePrefix + projectID); raw != "" {
				if err := json.Unmarshal([]byte(raw), &st); err != nil {
					return err
				}
			}
			var err error
			j, err = store.Jobs.Get(tx, moveIn)
			return err
		})
		switch {
		case errors.Is(err, store.ErrNotFound):
			return st, fmt.Errorf("the move-in job %s is gone", moveIn)
		case err != nil:
			s.log.Warn("move: read the staging's state", "project", projectID, "err", err)
		case st.Key == key && (st.State == state || st.State == "staged"):
			return st, nil
		case j.State == scheduler.StateCompleted || j.State == scheduler.StateFailed:
			return st, fmt.Errorf("the staging on node %s failed (%s): %s", j.Node, j.State, j.Error)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(s.poll):
		}
	}
}

// abandon ends a move before its cutover: the target is told (it removes its staged copy), the source
// serves again when it was paused (paused: the pause began), and the move's marks are cleared once the
// move-in ended. cause is returned, permanent.
func (s *Service) abandon(ctx context.Context, projectID, key string, rec records, paused bool, cause error) error {
	bctx := context.WithoutCancel(ctx)
	if err := s.setCutover(projectID, cutover{Key: key, Abort: cause.Error()}); err != nil {
		s.log.Warn("move: tell the target the move is abandoned", "project", projectID, "err", err)
	}
	if paused {
		cause = s.resume(bctx, projectID, cause)
	}
	if rec.MoveIn != "" {
		wctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
		if _, err := s.waitJob(wctx, rec.MoveIn); err != nil {
			cause = fmt.Errorf("%w (and the move-in job %s did not end: %v)", cause, rec.MoveIn, err)
		}
		cancel()
	}
	return s.end(projectID, cause)
}

// projectNode reads the project's node.
func projectNode(db *store.DB, prj *store.Project) string {
	var n string
	_ = db.View(func(tx *store.Tx) error { n = store.ProjectNode(tx, prj); return nil })
	return n
}

// clear ends a move's marks.
func clear(tx *store.Tx, projectID string) error {
	for _, p := range []string{metaPrefix, recordsPrefix, stagePrefix, cutoverPrefix} {
		if err := tx.SetMeta(p+projectID, ""); err != nil {
			return err
		}
	}
	return nil
}

// end clears the move's marks after a failure it is done with (cause is returned, permanent).
func (s *Service) end(projectID string, cause error) error {
	if err := s.db.Update(func(tx *store.Tx) error { return clear(tx, projectID) }); err != nil {
		return fmt.Errorf("%w (and clearing the move's marks: %v)", cause, err)
	}
	return cause
}

// resume lets the source serve again after a failure before the move-in was enqueued.
func (s *Service) resume(ctx context.Context, projectID string, cause error) error {
	if err := s.host.Resume(context.WithoutCancel(ctx), projectID); err != nil {
		return fmt.Errorf("%w (and resuming the project on this node: %v)", cause, err)
	}
	s.host.SetRuntime(projectID, api.RuntimeActive)
	return cause
}

// rollback puts back the records a failed move-in changed and lets the source serve again.
func (s *Service) rollback(ctx context.Context, rec records, cause error) error {
	id := rec.Project.ID
	err := s.db.Update(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, id)
		if err != nil {
			return err
		}
		back := *rec.Project
		back.LatestJobID, back.UpdatedAt = p.LatestJobID, s.now()
		if err := store.Projects.Put(tx, &back); err != nil {
			return err
		}
		inst := *rec.Instance
		inst.UpdatedAt = s.now()
		return store.Instances.Put(tx, &inst)
	})
	if err != nil {
		return fmt.Errorf("%w (and putting the project's records back on node %s: %v)", cause, s.cfg.NodeID, err)
	}
	return s.resume(ctx, id, cause)
}

// keepAside stops this node's copy of the moved instance if it runs and moves its directory to
// <dir>.moved-<time> (never deleted: the operator decides). "" when there is none.
func (s *Service) keepAside(ctx context.Context, projectID string, inst *store.Instance) (string, error) {
	dir := filepath.Join(s.host.InstancesDir(), inst.ID)
	if _, err := os.Stat(dir); err != nil {
		return "", nil
	}
	if err := s.host.StopLocal(ctx, projectID); err != nil {
		return "", err
	}
	aside := fmt.Sprintf("%s.moved-%s", dir, s.now().UTC().Format("20060102T150405Z"))
	if err := os.Rename(dir, aside); err != nil {
		return "", err
	}
	return aside, nil
}

// waitJob waits until the job ends (completed, failed or cancelled) and returns it.
func (s *Service) waitJob(ctx context.Context, id string) (*store.Job, error) {
	for {
		var j *store.Job
		err := s.db.View(func(tx *store.Tx) error {
			var err error
			j, err = store.Jobs.Get(tx, id)
			return err
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("move: read a job's state", "job", id, "err", err)
		}
		if errors.Is(err, store.ErrNotFound) {
			return &store.Job{ID: id, State: scheduler.StateFailed, Error: "the job is gone"}, nil
		}
		if j != nil && (j.State == scheduler.StateCompleted || j.State == scheduler.StateFailed) {
			return j, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(s.poll):
		}
	}
}

// moveInJob is JobMoveIn, on the target node. Staging: the project's newest base backup restored into a
// staging directory and started as a standby replaying the archive; it tells the source (stageState) it
// runs, then that it replayed up to the source's catch-up point. Cutover: once the source paused, the
// staged copy is handed to the rebuild (which replays what the archive holds beyond it, promotes it, moves
// the records here and opens the project). A failure removes what it made here (the source serves on, or
// resumes).
func (s *Service) moveInJob(ctx context.Context, run *scheduler.Run) (res any, err error) {
	var pl moveInPayload
	if err := run.DecodePayload(&pl); err != nil {
		return nil, err
	}
	id := run.Job.ProjectID
	rebuilding := false // the rebuild began: it may have made the instance here
	defer func() {
		if err == nil {
			return
		}
		bctx := context.WithoutCancel(ctx)
		if rerr := s.host.RemoveStaged(bctx, id); rerr != nil {
			err = fmt.Errorf("%w (and removing the staged copy on node %s: %v)", err, s.cfg.NodeID, rerr)
		}
		if !rebuilding {
			return
		}
		opened := false
		_ = s.db.View(func(tx *store.Tx) error { opened = OpenedBy(tx, id); return nil })
		if opened { // the move happened: this node's copy is the project's, it is not removed
			return
		}
		if derr := s.host.Discard(bctx, id); derr != nil {
			err = fmt.Errorf("%w (and removing what it made on node %s: %v)", err, s.cfg.NodeID, derr)
		}
	}()
	if pl.Key == "" { // enqueued by a version without staging: the rebuild from the store, in the pause
		_ = run.Progress(map[string]any{"step": "rebuild"})
		rebuilding = true
		rp, err := s.host.Rebuild(ctx, id, pl.From)
		if err != nil {
			return nil, err
		}
		return moveInResult{LSN: rp.LSN, BackupKey: rp.BackupKey, Notes: rp.Notes}, nil
	}
	started := time.Now()
	_ = run.Progress(map[string]any{"step": "stage"})
	backupKey, err := s.host.Stage(ctx, id, pl.Key)
	if err != nil {
		return nil, fmt.Errorf("stage a copy on node %s: %w", s.cfg.NodeID, err)
	}
	s.hold(ctx, run.Job.ID, StepStandby, id, pl.Key)
	if err := s.setStage(id, stageState{State: "standby", Key: pl.Key, BackupKey: backupKey}); err != nil {
		return nil, err
	}
	c, err := s.waitCutover(ctx, id, pl.Key, func(c cutover) bool { return c.CatchUpLSN != "" }, waitSource)
	if err != nil {
		return nil, err
	}
	_ = run.Progress(map[string]any{"step": "catch-up", "lsn": c.CatchUpLSN})
	replayed, err := s.waitReplay(ctx, id, pl.Key, c.CatchUpLSN, waitReplay)
	if err != nil {
		return nil, fmt.Errorf("the staged copy did not catch up with %s: %w", c.CatchUpLSN, err)
	}
	// What it replayed goes to disk now, while the source serves: the cutover's checkpoints (promotion,
	// stop) then write only the last segment's changes.
	if err := s.host.CheckpointStaged(ctx, id, pl.Key); err != nil {
		return nil, fmt.Errorf("checkpoint the staged copy: %w", err)
	}
	s.hold(ctx, run.Job.ID, StepStaged, id, pl.Key)
	stagingMS := time.Since(started).Milliseconds()
	if err := s.setStage(id, stageState{State: "staged", Key: pl.Key, BackupKey: backupKey, ReplayLSN: replayed, StagingMS: stagingMS}); err != nil {
		return nil, err
	}
	_ = run.Progress(map[string]any{"step": "staged", "lsn": replayed})
	c, err = s.waitCutover(ctx, id, pl.Key, func(c cutover) bool { return c.PausedLSN != "" }, waitSource)
	if err != nil {
		return nil, err
	}
	// The copy replays the last segment (from the archive), is promoted where the source stopped, then
	// handed to the rebuild: its data directory moved in, started on the project's ports, records here.
	_ = run.Progress(map[string]any{"step": "cutover", "lsn": c.PausedLSN})
	told := time.Now()
	s.holdFor(ctx, holdCutover, run.Job.ID, StepCutover, id, pl.Key)
	if _, err := s.waitReplay(ctx, id, pl.Key, c.PausedLSN, waitPaused); err != nil {
		return nil, fmt.Errorf("the staged copy did not replay up to the position the source paused at (%s): %w", c.PausedLSN, err)
	}
	replayedAt := time.Now()
	lsn, err := s.host.PromoteStaged(ctx, id, pl.Key, c.Timeline)
	if err != nil {
		return nil, err
	}
	if lsnBefore(lsn, c.PausedLSN) {
		return nil, fmt.Errorf("the staged copy was promoted at %s, short of the position the source paused at (%s)", lsn, c.PausedLSN)
	}
	promotedAt := time.Now()
	rebuilding = true
	opened := func(tx *store.Tx) error {
		return putJSON(tx, stagePrefix+id, stageState{State: stateOpened, Key: pl.Key, BackupKey: backupKey, ReplayLSN: lsn, StagingMS: stagingMS, OpenedAt: s.now()})
	}
	// Started (fenced, the word not written): a test build may hold the rebuild there (a test tries a
	// client's login).
	fencedStart := func(ctx context.Context) {
		hctx, cancel := context.WithTimeout(ctx, holdCutover)
		defer cancel()
		s.host.Step(hctx, run.Job.ID, StepStarted)
	}
	rp, err := s.host.RebuildStaged(ctx, id, pl.From, pl.Key, backupKey, fencedStart, opened)
	if err != nil {
		return nil, err
	}
	// Opened: the project takes writes here. A test build may hold the job here (a test kills the node).
	hctx, cancel := context.WithTimeout(ctx, holdCutover)
	s.host.Step(hctx, run.Job.ID, StepOpened)
	cancel()
	steps := map[string]int64{"replay": replayedAt.Sub(told).Milliseconds(), "promote": promotedAt.Sub(replayedAt).Milliseconds()}
	for k, v := range rp.StepsMS {
		steps["rebuild."+k] = v
	}
	return moveInResult{LSN: lsn, BackupKey: rp.BackupKey, Notes: rp.Notes, StagingMS: stagingMS, StepsMS: steps}, nil
}

// hold calls the job-step hook of test builds at step, which may hold the job: at most holdStep, and no
// longer than the staged standby runs (a test kills it there). A release build's returns at once.
func (s *Service) hold(ctx context.Context, jobID, step, projectID, key string) {
	s.holdFor(ctx, holdStep, jobID, step, projectID, key)
}

// holdFor is hold with its bound.
func (s *Service) holdFor(ctx context.Context, limit time.Duration, jobID, step, projectID, key string) {
	hctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	go func() {
		for hctx.Err() == nil {
			if _, err := s.host.StagedReplay(hctx, projectID, key); err != nil && hctx.Err() == nil {
				cancel()
				return
			}
			select {
			case <-hctx.Done():
			case <-time.After(s.poll):
			}
		}
	}()
	s.host.Step(hctx, jobID, step)
}

// setStage writes the target's word (stagePrefix).
func (s *Service) setStage(projectID string, st stageState) error {
	return s.db.Update(func(tx *store.Tx) error { return putJSON(tx, stagePrefix+projectID, st) })
}

// waitCutover waits, on the target, until the source's word satisfies ok; an error when the move was
// abandoned (the source says so, or its marks are gone: another move, or none) or after limit.
func (s *Service) waitCutover(ctx context.Context, projectID, key string, ok func(cutover) bool, limit time.Duration) (cutover, error) {
	deadline := time.Now().Add(limit)
	for {
		var c cutover
		var mark string
		err := s.db.View(func(tx *store.Tx) error {
			mark = tx.Meta(metaPrefix + projectID)
			if raw := tx.Meta(cutoverPrefix + projectID); raw != "" {
				return json.Unmarshal([]byte(raw), &c)
			}
			return nil
		})
		switch {
		case err != nil:
			s.log.Warn("move: read the source's word", "project", projectID, "err", err)
		case mark != key:
			return c, fmt.Errorf("%w: the move %s is no longer running", errAbandons, key)
		case c.Key != key: // none yet, or an earlier move's
		case c.Abort != "":
			return c, fmt.Errorf("%w by the source: %s", errAbandons, c.Abort)
		case ok(c):
			return c, nil
		}
		if time.Now().After(deadline) {
			return c, fmt.Errorf("the source node said nothing for %s", limit)
		}
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(s.poll):
		}
	}
}

// waitReplay waits until the staged copy replayed up to lsn and returns its replay position; an error
// when it stops running, or after limit.
func (s *Service) waitReplay(ctx context.Context, projectID, key, lsn string, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	var last string
	for {
		got, err := s.host.StagedReplay(ctx, projectID, key)
		if err != nil {
			return last, err
		}
		if last = got; got != "" && !lsnBefore(got, lsn) {
			return got, nil
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("replayed up to %q after %s", last, limit)
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(s.poll):
		}
	}
}

// lsnBefore tells whether WAL position a ("X/Y") is before b; an unreadable one is before anything.
func lsnBefore(a, b string) bool {
	pa, erra := parseLSN(a)
	pb, errb := parseLSN(b)
	if errb != nil {
		return false
	}
	return erra != nil || pa < pb
}

// parseLSN reads a WAL position ("16/B374D848").
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("not a WAL position: %q", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, err
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, err
	}
	return h<<32 | l, nil
}
