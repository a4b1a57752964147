package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Organization owns projects, users' memberships, API keys and audit events.
type Organization struct {
	ID                    string     `json:"id"`
	Name                  string     `json:"name"`
	Slug                  string     `json:"slug"`
	BillingCustomerID     string     `json:"billing_customer_id"`
	BillingEmail          string     `json:"billing_email"`
	BillingName           string     `json:"billing_name"`
	BillingPlan           string     `json:"billing_plan"`
	BillingProductID      string     `json:"billing_product_id"`
	BillingProvider       string     `json:"billing_provider"`
	BillingStatus         string     `json:"billing_status"`
	BillingSubscriptionID string     `json:"billing_subscription_id"`
	BillingPeriodEnd      *time.Time `json:"billing_period_end"`
	IDPOrganizationID     string     `json:"idp_organization_id"`
	IDPOrganizationSlug   string     `json:"idp_organization_slug"`
	DeployAInstallationID string     `json:"deploy_a_installation_id"`
	EdgeCAccountID        string     `json:"edge_c_account_id"`
	SuspendedReason       string     `json:"suspended_reason"`
	SuspendedAt           *time.Time `json:"suspended_at"`
	CreatedAt             time.Time  `json:"created_at"`
	UpdatedAt             time.Time  `json:"updated_at"`
}

// User is an account of the built-in identity provider.
type User struct {
	ID           string       `json:"id"`
	Email        string       `json:"email"`
	Name         string       `json:"name"`
	PasswordHash string       `json:"password_hash"`
	IsAdmin      bool         `json:"is_admin"` // platform administrator: no implicit organization
	Memberships  []Membership `json:"memberships"`
	CreatedAt    time.Time    `json:"created_at"`
	UpdatedAt    time.Time    `json:"updated_at"`
}

// Role is the user's role in the organization ("" when not a member).
func (u *User) Role(orgID string) string {
	for _, m := range u.Memberships {
		if m.OrganizationID == orgID {
			return m.Role
		}
	}
	return ""
}

// Membership places a user in an organization with a role (owner, admin or member).
type Membership struct {
	OrganizationID string `json:"organization_id"`
	Role           string `json:"role"`
}

// Session is a signed-in identity-provider session; only the token's SHA-256 is kept.
type Session struct {
	ID             string     `json:"id"`
	TokenHash      string     `json:"token_hash"`
	UserID         string     `json:"user_id"`
	OrganizationID string     `json:"organization_id"` // the active organization ("" for a platform admin)
	CreatedAt      time.Time  `json:"created_at"`
	ExpiresAt      time.Time  `json:"expires_at"`
	RevokedAt      *time.Time `json:"revoked_at"`
}

// APIKey is a programmatic credential; only the key's SHA-256 is kept.
type APIKey struct {
	ID              string     `json:"id"`
	Name            string     `json:"name"`
	KeyPrefix       string     `json:"key_prefix"`
	KeyHash         string     `json:"key_hash"`
	OrganizationID  string     `json:"organization_id"`
	ProjectID       string     `json:"project_id"`
	CreatedByUserID string     `json:"created_by_user_id"`
	DeviceName      string     `json:"device_name"`
	Source          string     `json:"source"`
	Scopes          []string   `json:"scopes"`
	CreatedAt       time.Time  `json:"created_at"`
	ExpiresAt       *time.Time `json:"expires_at"`
	LastUsedAt      *time.Time `json:"last_used_at"`
	RevokedAt       *time.Time `json:"revoked_at"`
}

// CLILogin is a device-login session started by the CLI and authorized by a signed-in user.
type CLILogin struct {
	ID             string     `json:"id"`
	PollTokenHash  string     `json:"poll_token_hash"`
	State          string     `json:"state"`     // pending, authorized, completed, refused, expired
	UserCode       string     `json:"user_code"` // shown by the CLI and on the approval page, to compare
	DeviceName     string     `json:"device_name"`
	KeyName        string     `json:"key_name"`
	KeyTTLSeconds  int64      `json:"key_ttl_seconds"` // 0: the key does not expire
	Scopes         []string   `json:"scopes"`
	Source         string     `json:"source"`
	CreatedAt      time.Time  `json:"created_at"`
	ExpiresAt      time.Time  `json:"expires_at"`
	AuthorizedAt   *time.Time `json:"authorized_at"`
	AuthorizedBy   string     `json:"authorized_by"`
	RefusedAt      *time.Time `json:"refused_at"`
	RefusedBy      string     `json:"refused_by"`
	OrganizationID string     `json:"organization_id"`
	APIKeyID       string     `json:"api_key_id"`
	KeyExpiresAt   *time.Time `json:"key_expires_at"`
	SealedAPIKey   []byte     `json:"sealed_api_key"` // the minted key, encrypted, until the poll takes it
}

// AuditEvent records one mutating action.
type AuditEvent struct {
	ID             string          `json:"id"`
	Action         string          `json:"action"`
	ActorID        string          `json:"actor_id"`
	ActorKind      string          `json:"actor_kind"`
	OrganizationID string          `json:"organization_id"`
	ProjectID      string          `json:"project_id"`
	Metadata       json.RawMessage `json:"metadata"`
	CreatedAt      time.Time       `json:"created_at"`
}

// Invitation asks an existing user to join an organization with a role; the user accepts it while signed
// in, and until then the organization learns nothing of them but the email it typed.
type Invitation struct {
	ID              string    `json:"id"`
	OrganizationID  string    `json:"organization_id"`
	UserID          string    `json:"user_id"`
	Email           string    `json:"email"`
	Role            string    `json:"role"`
	InvitedByUserID string    `json:"invited_by_user_id"`
	CreatedAt       time.Time `json:"created_at"`
	ExpiresAt       time.Time `json:"expires_at"`
}

// Approval is a single-use token (SHA-256 kept) allowing one dangerous action.
type Approval struct {
	ID             string     `json:"id"`
	Action         string     `json:"action"`
	TokenHash      string     `json:"token_hash"`
	OrganizationID string     `json:"organization_id"`
	ProjectID      string     `json:"project_id"`
	CreatedByKind  string     `json:"created_by_kind"`
	CreatedByID    string     `json:"created_by_id"`
	CreatedAt      time.Time  `json:"created_at"`
	ExpiresAt      time.Time  `json:"expires_at"`
	UsedAt         *time.Time `json:"used_at"`
}

// Project is one PostgreSQL instance of an organization.
type Project struct {
	ID                     string     `json:"id"`
	Name                   string     `json:"name"`
	Slug                   string     `json:"slug"`
	OrganizationID         string     `json:"organization_id"`
	DatabaseName           string     `json:"database_name"`
	RoleName               string     `json:"role_name"`
	PublicHost             string     `json:"public_host"`
	Region                 string     `json:"region"`
	Plan                   string     `json:"plan"`
	PostgresVersion        string     `json:"postgres_version"`
	SSLMode                string     `json:"ssl_mode"`
	IdleTransactionTimeout string     `json:"idle_transaction_timeout"`
	StatementTimeout       string     `json:"statement_timeout"`
	PrimaryInstanceID      string     `json:"primary_instance_id"`
	LatestJobID            string     `json:"latest_job_id"`
	LastError              string     `json:"last_error"`
	DirectPort             int        `json:"direct_port"`
	PooledPort             int        `json:"pooled_port"`
	MaxConnections         int        `json:"max_connections"`
	StorageLimitBytes      int64      `json:"storage_limit_bytes"`
	Environment            string     `json:"environment"`
	RuntimeStatus          string     `json:"runtime_status"`
	State                  string     `json:"state"`
	CreatedAt              time.Time  `json:"created_at"`
	UpdatedAt              time.Time  `json:"updated_at"`
	DeletedAt              *time.Time `json:"deleted_at"`

	// Credential is the login the connection URLs show; Previous still works until its ExpiresAt
	// (the overlap of a rotation), then the rotation job disables it.
	Credential         Credential  `json:"credential"`
	PreviousCredential *Credential `json:"previous_credential"`
	// Extensions enabled through the API, with the preload libraries they need.
	PreloadLibraries []string `json:"preload_libraries"`

	// An ephemeral database is a project without an organization until it is claimed: its claim token's
	// SHA-256, when it is destroyed (EphemeralExpiresAt; nil once claimed), and when it was claimed.
	Ephemeral          bool       `json:"ephemeral"`
	ClaimTokenHash     string     `json:"claim_token_hash"`
	EphemeralExpiresAt *time.Time `json:"ephemeral_expires_at"`
	ClaimedAt          *time.Time `json:"claimed_at"`
	CreatedFromIP      string     `json:"created_from_ip"`
	// A preview database is a project record of its own (its instance, ports, credential) derived from
	// the project PreviewOf, deleted at TTLExpiresAt; PreviewMode is empty or clone, Source* say what a
	// clone holds.
	PreviewOf         string     `json:"preview_of"`
	PreviewMode       string     `json:"preview_mode"`
	SourceKind        string     `json:"source_kind"`
	SourceBackupKey   string     `json:"source_backup_key"`
	SourceRestoreTime *time.Time `json:"source_restore_time"`
	SourceDatabase    string     `json:"source_database"`
	SourceBackupID    string     `json:"source_backup_id"` // a clone as of a past time: the base backup
	SourceTimeline    int        `json:"source_timeline"`  // and the timeline recovery follows
	// A clone as of a named restore point: its id, label and name in the WAL (recovery_target_name).
	SourceRestorePointID    string     `json:"source_restore_point_id,omitempty"`
	SourceRestorePointLabel string     `json:"source_restore_point_label,omitempty"`
	SourceRestorePointName  string     `json:"source_restore_point_name,omitempty"`
	TTLExpiresAt            *time.Time `json:"ttl_expires_at"`
	// StorageLock is what a database over its storage limit was put under (appliance/storageguard): ""
	// (nothing), "read_only" (writes refused by default) or "no_connections" (its roles' logins refused);
	// StorageLockedBytes is its size once the read-only lock had ended its sessions (growth past it
	// means a client lifted the default and kept writing).
	StorageLock        string `json:"storage_lock"`
	StorageLockedBytes int64  `json:"storage_locked_bytes"`
	// SuspendAfterSeconds is the idle time after which the project is suspended (scale to zero; 0: never;
	// nil: the default of its kind, scaletozero.DefaultSuspendAfter). IdleSuspendedAt is set while it is
	// suspended for idleness: its server and pooler stopped, its ports held by the wake front (not an
	// organization's suspension, which is Organization.SuspendedAt).
	SuspendAfterSeconds *int       `json:"suspend_after_seconds,omitempty"`
	IdleSuspendedAt     *time.Time `json:"idle_suspended_at,omitempty"`
	// NodeID is the cluster node that hosts the project's instances ("": the node that formed the
	// cluster, which held every project of the single-node appliance; always "" on bbolt).
	NodeID string `json:"node_id,omitempty"`
	// PlacementEpoch is bumped on every move of the project to another node (MoveProject: a restore
	// elsewhere, a move): a node's copy records the epoch it was made or taken over at
	// (nodeloss.RecordEpoch), and a node does not start, wake or unfence a copy older than the store's.
	PlacementEpoch int64 `json:"placement_epoch,omitempty"`
}

// MoveProject places p on node (Project.NodeID) and bumps its placement epoch when that is a move.
func MoveProject(p *Project, node string) {
	if p.NodeID != node {
		p.NodeID = node
		p.PlacementEpoch++
	}
}

// Credential is a database login; the password is sealed with the appliance's secret box.
type Credential struct {
	Username  string     `json:"username"`
	Password  []byte     `json:"password"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// Instance is one supervised PostgreSQL server (and its pooler) serving a project.
type Instance struct {
	ID             string    `json:"id"`
	ProjectID      string    `json:"project_id"`
	OrganizationID string    `json:"organization_id"`
	Dir            string    `json:"dir"`
	Port           int       `json:"port"`
	PooledPort     int       `json:"pooled_port"`
	Major          int       `json:"major"`
	BinDir         string    `json:"bin_dir"`
	AdminPassword  []byte    `json:"admin_password"` // sealed
	State          string    `json:"state"`          // creating, running, stopped, removed
	PreviousDir    string    `json:"previous_dir"`   // the old data of a major upgrade until confirmed
	PreviousMajor  int       `json:"previous_major"`
	PreviousBinDir string    `json:"previous_bin_dir"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`

	// PreviousPort is the port the old server of a major upgrade by logical replication runs on until
	// confirmed (it follows the new one for a rollback); 0 for pg_upgrade's, whose old server is stopped.
	PreviousPort int `json:"previous_port,omitempty"`
	// UpgradeMethod is how the pending major upgrade was made: "pg_upgrade" or "logical" ("" none/pg_upgrade).
	UpgradeMethod string `json:"upgrade_method,omitempty"`
	// WALArchiveOff: the server's WAL is not archived (a cluster a logical major upgrade made before its
	// clusters had archives of their own, WALArchive; only such records have it).
	WALArchiveOff bool `json:"wal_archive_off,omitempty"`
	// WALArchive names the WAL archive of the server's cluster in the backup store ("": the project's
	// first cluster's, <project>/wal/). A major upgrade by logical replication makes a new cluster, whose
	// segment names start over: it archives into an archive of its own (backup.Store's walArchive).
	WALArchive string `json:"wal_archive,omitempty"`
	// PreviousWALArchive is the old server's WALArchive while a logical upgrade awaits confirm.
	PreviousWALArchive string `json:"previous_wal_archive,omitempty"`
	// NodeID is the cluster node a spare (no project) was made on ("": the node that formed the cluster,
	// or a single node); an instance of a project lives on its project's node (store.ProjectNode).
	NodeID string `json:"node_id,omitempty"`
}

// Job is one durable unit of asynchronous work.
type Job struct {
	ID                  string          `json:"id"`
	Type                string          `json:"type"`
	State               string          `json:"state"` // pending, running, completed, failed
	OrganizationID      string          `json:"organization_id"`
	ProjectID           string          `json:"project_id"`
	PreviewDatabaseID   string          `json:"preview_database_id"`
	InstanceID          string          `json:"instance_id"`
	HostID              string          `json:"host_id"`
	LockedResource      string          `json:"locked_resource"`
	ClaimedBy           string          `json:"claimed_by"`
	Attempts            int             `json:"attempts"`
	MaxAttempts         int             `json:"max_attempts"`
	Error               string          `json:"error"`
	RetryClassification string          `json:"retry_classification"`
	LastStdout          string          `json:"last_stdout"`
	LastStderr          string          `json:"last_stderr"`
	LastExitCode        *int            `json:"last_exit_code"`
	Payload             json.RawMessage `json:"payload"`
	Result              json.RawMessage `json:"result"`
	RunAfter            time.Time       `json:"run_after"`
	ClaimedAt           *time.Time      `json:"claimed_at"`
	StartedAt           *time.Time      `json:"started_at"`
	CompletedAt         *time.Time      `json:"completed_at"`
	CreatedAt           time.Time       `json:"created_at"`
	UpdatedAt           time.Time       `json:"updated_at"`

	// Node is the node the job must run on (where its instance lives): only that node claims it ("": any
	// node). Older records have none.
	Node string `json:"node,omitempty"`
	// Lease is the cluster lease (hex) of the node that claimed the job (HostID), held when it claimed it:
	// the claim stands while that node is alive under that lease ("": a single node's claim, or an older
	// record's).
	Lease string `json:"lease,omitempty"`
}

// Backup is one base backup of a project in the backup store.
type Backup struct {
	ID                string     `json:"id"`
	ProjectID         string     `json:"project_id"`
	OrganizationID    string     `json:"organization_id"`
	BackupKey         string     `json:"backup_key"`
	DatabaseName      string     `json:"database_name"`
	Label             string     `json:"label"`
	JobID             string     `json:"job_id"`
	State             string     `json:"state"`              // pending, running, completed, failed
	VerificationState string     `json:"verification_state"` // pending, verified, failed
	VerificationError string     `json:"verification_error"`
	Error             string     `json:"error"`
	SizeBytes         int64      `json:"size_bytes"`
	Timeline          int        `json:"timeline"` // the WAL timeline it was taken on (backup_label)
	CreatedAt         time.Time  `json:"created_at"`
	CompletedAt       *time.Time `json:"completed_at"`
	VerifiedAt        *time.Time `json:"verified_at"`
	// RestoreTestedAt is when the periodic verification last restored this backup into a scratch server
	// and queried it (nil: never; its verification_* fields then are pg_verifybackup's).
	RestoreTestedAt *time.Time `json:"restore_tested_at,omitempty"`
	// EndLSN is the end of the WAL the backup needs (its backup_manifest's), "" for older backups: a
	// suspended project whose WAL after it holds no data change needs no new scheduled backup.
	EndLSN string `json:"end_lsn,omitempty"`
	// Major, BinDir and WALArchive are the cluster the backup is of: its PostgreSQL major, the
	// installation it ran from ("" the default one) and its WAL archive (Instance.WALArchive). A restore
	// from it runs that major again. Backups taken before they were recorded have 0, "" and "": the
	// project's first cluster, on the default installation.
	Major      int    `json:"major,omitempty"`
	BinDir     string `json:"bin_dir,omitempty"`
	WALArchive string `json:"wal_archive,omitempty"`
}

// ScheduledBackup is a project's daily backup schedule (one per project, id "default" per project in the
// API; the record's ID is the project's ID).
type ScheduledBackup struct {
	ID             string     `json:"id"`
	ProjectID      string     `json:"project_id"`
	OrganizationID string     `json:"organization_id"`
	Label          string     `json:"label"`
	LastJobID      string     `json:"last_job_id"`
	CronHour       int        `json:"cron_hour"`
	CronMinute     int        `json:"cron_minute"`
	RetentionDays  int        `json:"retention_days"`
	IsActive       bool       `json:"is_active"`
	CreatedAt      time.Time  `json:"created_at"`
	LastRunAt      *time.Time `json:"last_run_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	// LastRunSkipped is why the last run took no backup ("" when it took one).
	LastRunSkipped string `json:"last_run_skipped,omitempty"`
}

// RestorePoint is a named point in a project's WAL (pg_create_restore_point).
type RestorePoint struct {
	ID                 string    `json:"id"`
	ProjectID          string    `json:"project_id"`
	OrganizationID     string    `json:"organization_id"`
	Kind               string    `json:"kind"`  // named
	State              string    `json:"state"` // active
	Label              string    `json:"label"`
	Note               string    `json:"note"`
	Name               string    `json:"name"` // the restore point's name in the WAL (recovery_target_name)
	LSN                string    `json:"lsn"`
	Timeline           int       `json:"timeline"` // the WAL timeline it was created on
	BackupID           string    `json:"backup_id"`
	BackupKey          string    `json:"backup_key"`
	CreatedByActorKind string    `json:"created_by_actor_kind"`
	CreatedByActorID   string    `json:"created_by_actor_id"`
	PITRTime           time.Time `json:"pitr_time"`
	CreatedAt          time.Time `json:"created_at"`
	UpdatedAt          time.Time `json:"updated_at"`
}

// The tables and their indexes, all declared in one place.
var (
	Organizations       = newTable("organizations", func(r *Organization) string { return r.ID })
	OrganizationsBySlug = Organizations.index("slug", func(r *Organization) []string { return []string{r.Slug} })

	Users        = newTable("users", func(r *User) string { return r.ID })
	UsersByEmail = Users.index("email", func(r *User) []string { return []string{r.Email} })

	Sessions       = newTable("sessions", func(r *Session) string { return r.ID })
	SessionsByHash = Sessions.index("hash", func(r *Session) []string { return []string{r.TokenHash} })

	APIKeys       = newTable("api_keys", func(r *APIKey) string { return r.ID })
	APIKeysByHash = APIKeys.index("hash", func(r *APIKey) []string { return []string{r.KeyHash} })
	APIKeysByOrg  = APIKeys.index("org", func(r *APIKey) []string { return []string{r.OrganizationID} })

	CLILogins = newTable("cli_logins", func(r *CLILogin) string { return r.ID })

	AuditEvents          = newTable("audit_events", func(r *AuditEvent) string { return r.ID })
	AuditEventsByOrg     = AuditEvents.index("org", func(r *AuditEvent) []string { return nonEmpty(r.OrganizationID) })
	AuditEventsByProject = AuditEvents.index("project", func(r *AuditEvent) []string { return nonEmpty(r.ProjectID) })

	Invitations       = newTable("invitations", func(r *Invitation) string { return r.ID })
	InvitationsByOrg  = Invitations.index("org", func(r *Invitation) []string { return []string{r.OrganizationID} })
	InvitationsByUser = Invitations.index("user", func(r *Invitation) []string { return []string{r.UserID} })

	Approvals       = newTable("approvals", func(r *Approval) string { return r.ID })
	ApprovalsByHash = Approvals.index("hash", func(r *Approval) []string { return []string{r.TokenHash} })

	Projects      = newTable("projects", func(r *Project) string { return r.ID })
	ProjectsByOrg = Projects.index("org", func(r *Project) []string { return []string{r.OrganizationID} })
	// ProjectsByPreviewOf files preview databases under their project.
	ProjectsByPreviewOf = Projects.index("preview_of", func(r *Project) []string { return nonEmpty(r.PreviewOf) })
	// ProjectsEphemeral files the ephemeral databases not yet claimed nor deleted (the cap, the expiry).
	ProjectsEphemeral = Projects.index("ephemeral", func(r *Project) []string {
		if !r.Ephemeral || r.DeletedAt != nil {
			return nil
		}
		return []string{"live"}
	})

	Instances          = newTable("instances", func(r *Instance) string { return r.ID })
	InstancesByProject = Instances.index("project", func(r *Instance) []string { return nonEmpty(r.ProjectID) })

	Jobs          = newTable("jobs", func(r *Job) string { return r.ID })
	JobsByProject = Jobs.index("project", func(r *Job) []string { return nonEmpty(r.ProjectID) })
	JobsByState   = Jobs.index("state", func(r *Job) []string { return []string{r.State} })

	Backups          = newTable("backups", func(r *Backup) string { return r.ID })
	BackupsByProject = Backups.index("project", func(r *Backup) []string { return []string{r.ProjectID} })

	ScheduledBackups = newTable("scheduled_backups", func(r *ScheduledBackup) string { return r.ProjectID })

	RestorePoints          = newTable("restore_points", func(r *RestorePoint) string { return r.ID })
	RestorePointsByProject = RestorePoints.index("project", func(r *RestorePoint) []string { return []string{r.ProjectID} })
)

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// Export is a logical dump (pg_dump custom format) of a project's database in the backup store.
type Export struct {
	ID             string     `json:"id"`
	ProjectID      string     `json:"project_id"`
	OrganizationID string     `json:"organization_id"`
	DatabaseName   string     `json:"database_name"`
	JobID          string     `json:"job_id"`
	Path           string     `json:"path"`  // the dump file (exports/<id>.dump in the project's backup store)
	State          string     `json:"state"` // pending, running, completed, failed, expired
	Error          string     `json:"error"`
	SizeBytes      int64      `json:"size_bytes"`
	CreatedAt      time.Time  `json:"created_at"`
	CompletedAt    *time.Time `json:"completed_at"`
	ExpiresAt      *time.Time `json:"expires_at"`
	// ObjectKey is the export's object in the bucket backup store once stored there (then the file at Path
	// is a cache entry, which may be evicted); "": the file at Path is the only copy.
	ObjectKey string `json:"object_key"`
}

// The exports table.
var (
	Exports          = newTable("exports", func(r *Export) string { return r.ID })
	ExportsByProject = Exports.index("project", func(r *Export) []string { return []string{r.ProjectID} })
)

// Upload is a dump uploaded through a signed URL, to be restored into a project by import.restore.
type Upload struct {
	ID             string     `json:"id"`
	ProjectID      string     `json:"project_id"`
	OrganizationID string     `json:"organization_id"`
	ObjectKey      string     `json:"object_key"` // imports/<id>.dump in the project's backup store
	Path           string     `json:"path"`
	State          string     `json:"state"` // pending, uploaded, consumed, expired
	SizeBytes      int64      `json:"size_bytes"`
	CreatedAt      time.Time  `json:"created_at"`
	ExpiresAt      time.Time  `json:"expires_at"` // the signed URL's expiry
	UploadedAt     *time.Time `json:"uploaded_at"`
	ConsumedAt     *time.Time `json:"consumed_at"`
	// InBucket: the dump is an object of the bucket backup store (backup.UploadKey), and the file at Path
	// a cache entry, which may be evicted; false once the object is deleted (consumed, expired) or when
	// the file at Path is the only copy (uploaded without a bucket).
	InBucket bool `json:"in_bucket"`
}

// The uploads table.
var (
	Uploads          = newTable("uploads", func(r *Upload) string { return r.ID })
	UploadsByProject = Uploads.index("project", func(r *Upload) []string { return []string{r.ProjectID} })
)

// ImportFollow is logical replication from a source database into a project (imports/follow): at most
// one that is not finished per project.
type ImportFollow struct {
	ID             string     `json:"id"`
	ProjectID      string     `json:"project_id"`
	OrganizationID string     `json:"organization_id"`
	SourceURL      []byte     `json:"source_url"`      // sealed by the secret box: the URL holds the password
	SourceRedacted string     `json:"source_redacted"` // the URL with its password masked
	State          string     `json:"state"`           // starting, following, cutting_over, aborting, completed, aborted, failed
	Publication    string     `json:"publication"`     // on the source
	Subscription   string     `json:"subscription"`    // on the project's server; its slot on the source has the same name
	BackupID       string     `json:"backup_id"`       // the backup taken before follow changed anything; abort restores it
	SchemaCopied   bool       `json:"schema_copied"`   // import.follow began to change the project's database
	JobID          string     `json:"job_id"`          // import.follow
	Error          string     `json:"error"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	FinishedAt     *time.Time `json:"finished_at"`
}

// The import follows table.
var (
	ImportFollows          = newTable("import_follows", func(r *ImportFollow) string { return r.ID })
	ImportFollowsByProject = ImportFollows.index("project", func(r *ImportFollow) []string { return []string{r.ProjectID} })
)

// StorageSample is an organization's storage at one time (usage.storage_history).
type StorageSample struct {
	ID             string    `json:"id"`
	OrganizationID string    `json:"organization_id"`
	SampledAt      time.Time `json:"sampled_at"`
	StorageBytes   int64     `json:"storage_bytes"`
}

// The storage samples table.
var (
	StorageSamples      = newTable("storage_samples", func(r *StorageSample) string { return r.ID })
	StorageSamplesByOrg = StorageSamples.index("organization", func(r *StorageSample) []string { return []string{r.OrganizationID} })
)

// Event is one entry of the durable event log, appended in the same transaction as the change it tells.
// Seq orders the whole log (and so each organization's and project's events); ID is Seq as 20 digits.
type Event struct {
	ID             string          `json:"id"`
	Seq            uint64          `json:"seq"`
	Type           string          `json:"type"`
	OrganizationID string          `json:"organization_id"`
	ProjectID      string          `json:"project_id"`
	Data           json.RawMessage `json:"data"`
	CreatedAt      time.Time       `json:"created_at"`
}

// The events table.
var (
	Events          = newTable("events", func(r *Event) string { return r.ID })
	EventsByProject = Events.index("project", func(r *Event) []string { return nonEmpty(r.ProjectID) })
	EventsByOrg     = Events.index("organization", func(r *Event) []string { return nonEmpty(r.OrganizationID) })
)

// EventID is the ID of the event at seq.
func EventID(seq uint64) string { return fmt.Sprintf("%020d", seq) }

// EventPosition is the position of the newest event appended (0 when none ever was).
func EventPosition(tx *Tx) uint64 { return tx.kv.bucket(Events.bucket).Sequence() }

// AppendEvent gives e the log's next position and stores it.
func AppendEvent(tx *Tx, e *Event) error {
	seq, err := tx.kv.bucket(Events.bucket).NextSequence()
	if err != nil {
		return fmt.Errorf("event sequence: %w", err)
	}
	e.Seq, e.ID = seq, EventID(seq)
	return Events.Put(tx, e)
}

// WebhookEndpoint is an organization's receiver of events. The signing secret is sealed by the secret
// box; after a rotation the previous one keeps signing beside the new one until PreviousUntil.
type WebhookEndpoint struct {
	ID                  string     `json:"id"`
	OrganizationID      string     `json:"organization_id"`
	URL                 string     `json:"url"`
	Description         string     `json:"description"`
	EventTypes          []string   `json:"event_types"`
	IsActive            bool       `json:"is_active"`
	SealedSecret        []byte     `json:"sealed_secret"`
	SealedPrevious      []byte     `json:"sealed_previous"`
	PreviousUntil       *time.Time `json:"previous_until"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	FailingSince        *time.Time `json:"failing_since"` // the first failed attempt of the current run of failures
	DisabledReason      string     `json:"disabled_reason"`
	CreatedAt           time.Time  `json:"created_at"`
	UpdatedAt           time.Time  `json:"updated_at"`
}

// WebhookAttempt is one try of a delivery.
type WebhookAttempt struct {
	At             time.Time `json:"at"`
	ResponseStatus int       `json:"response_status"`
	Error          string    `json:"error"`
	DurationMS     int64     `json:"duration_ms"`
}

// WebhookDelivery is one event on its way to one endpoint: every attempt is recorded. ID is the
// webhook-id the receiver sees, the same on every attempt.
type WebhookDelivery struct {
	ID             string           `json:"id"`
	EndpointID     string           `json:"endpoint_id"`
	OrganizationID string           `json:"organization_id"`
	EventType      string           `json:"event_type"`
	EventSeq       uint64           `json:"event_seq"` // 0 for test deliveries
	State          string           `json:"state"`     // pending, delivered, failed
	Attempts       int              `json:"attempts"`
	MaxAttempts    int              `json:"max_attempts"`
	ResponseStatus int              `json:"response_status"`
	LastError      string           `json:"last_error"`
	NextAttemptAt  *time.Time       `json:"next_attempt_at"`
	ClaimedAt      *time.Time       `json:"claimed_at"` // an attempt is in flight (a restart makes it due again)
	DeliveredAt    *time.Time       `json:"delivered_at"`
	History        []WebhookAttempt `json:"history"`
	CreatedAt      time.Time        `json:"created_at"`
	UpdatedAt      time.Time        `json:"updated_at"`
}

// WebhookPayload is the body a delivery sends ({type, timestamp, data}), kept apart from the delivery
// (same ID) so that claiming and recording attempts never encode it again.
type WebhookPayload struct {
	ID   string          `json:"id"`
	Body json.RawMessage `json:"body"`
}

// DueKey orders pending deliveries by their next attempt (fixed-width nanoseconds, so keys sort by time).
func DueKey(t time.Time) string { return fmt.Sprintf("%020d", t.UnixNano()) }

// The webhook tables.
var (
	WebhookEndpoints            = newTable("webhook_endpoints", func(r *WebhookEndpoint) string { return r.ID })
	WebhookEndpointsByOrg       = WebhookEndpoints.index("organization", func(r *WebhookEndpoint) []string { return []string{r.OrganizationID} })
	WebhookPayloads             = newTable("webhook_payloads", func(r *WebhookPayload) string { return r.ID })
	WebhookDeliveries           = newTable("webhook_deliveries", func(r *WebhookDelivery) string { return r.ID })
	WebhookDeliveriesByEndpoint = WebhookDeliveries.index("endpoint", func(r *WebhookDelivery) []string { return []string{r.EndpointID} })
	WebhookDeliveriesByOrg      = WebhookDeliveries.index("organization", func(r *WebhookDelivery) []string { return []string{r.OrganizationID} })
	// WebhookDeliveriesDue files pending deliveries by endpoint and next attempt (DueKey): Range reads an
	// endpoint's due ones, earliest first.
	WebhookDeliveriesDue = WebhookDeliveries.index("due", func(r *WebhookDelivery) []string {
		if r.State != "pending" || r.NextAttemptAt == nil {
			return nil
		}
		return []string{r.EndpointID + " " + DueKey(*r.NextAttemptAt)}
	})
)

// KVStore is a project's key-value store: a redis-server the appliance supervises under Dir. Only the
// SHA-256 of the tenant's token is kept; the appliance's own password to the server is sealed by the
// secret box. The record lives from creation until its delete job ends (a project holds one at a time).
type KVStore struct {
	ID             string    `json:"id"`
	ProjectID      string    `json:"project_id"`
	OrganizationID string    `json:"organization_id"`
	HostID         string    `json:"host_id"`
	State          string    `json:"state"`
	LastError      string    `json:"last_error"`
	MaxMemoryMB    int       `json:"maxmemory_mb"`
	Dir            string    `json:"dir"`
	TokenHash      string    `json:"token_hash"`
	TokenPrefix    string    `json:"token_prefix"`
	SealedAdmin    []byte    `json:"sealed_admin"`
	JobID          string    `json:"job_id"` // the latest job on the store
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// The key-value store tables.
var (
	KVStores          = newTable("kv_stores", func(r *KVStore) string { return r.ID })
	KVStoresByProject = KVStores.index("project", func(r *KVStore) []string { return []string{r.ProjectID} })
	KVStoresByOrg     = KVStores.index("organization", func(r *KVStore) []string { return []string{r.OrganizationID} })
	KVStoresByToken   = KVStores.index("token", func(r *KVStore) []string { return nonEmpty(r.TokenHash) })
)

// CutoverRequest asks for a preview's data to become its project's (see appliance/cutover.go). The
// record stays after it ends, as the project's history.
type CutoverRequest struct {
	ID                   string `json:"id"`
	OrganizationID       string `json:"organization_id"`
	ProjectID            string `json:"project_id"`
	PreviewID            string `json:"preview_id"`
	PreviewName          string `json:"preview_name"` // the preview's name when requested: it outlives the preview
	Status               string `json:"status"`
	PreCutoverBackupID   string `json:"pre_cutover_backup_id"`
	PromoteJobID         string `json:"promote_job_id"`
	RequestedByActorID   string `json:"requested_by_actor_id"`
	RequestedByActorKind string `json:"requested_by_actor_kind"`
	AckByUserID          string `json:"ack_by_user_id"`
	CustomerNote         string `json:"customer_note"`
	OperatorNote         string `json:"operator_note"`
	ExternalTicketRef    string `json:"external_ticket_ref"`
	RejectedReason       string `json:"rejected_reason"`
	LastError            string `json:"last_error"`
	// ConnLimit is the project database's connection limit before the promotion set it to 0 (nil until
	// then); Swapped is set once the staging database took the project database's name.
	ConnLimit   *int       `json:"conn_limit"`
	Swapped     bool       `json:"swapped"`
	AckAt       *time.Time `json:"ack_at"`
	CompletedAt *time.Time `json:"completed_at"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

// The cutover request tables.
var (
	CutoverRequests          = newTable("cutover_requests", func(r *CutoverRequest) string { return r.ID })
	CutoverRequestsByProject = CutoverRequests.index("project", func(r *CutoverRequest) []string { return []string{r.ProjectID} })
	CutoverRequestsByPreview = CutoverRequests.index("preview", func(r *CutoverRequest) []string { return []string{r.PreviewID} })
)

// SQLHistoryEntry is one run of the studio's SQL console (its text capped; see appliance/studio/endpoints.go).
type SQLHistoryEntry struct {
	ID             string    `json:"id"`
	OrganizationID string    `json:"organization_id"`
	ProjectID      string    `json:"project_id"`
	ActorID        string    `json:"actor_id"`
	ActorKind      string    `json:"actor_kind"`
	Query          string    `json:"query"`
	Error          string    `json:"error"`
	DurationMS     int64     `json:"duration_ms"`
	RowCount       int64     `json:"row_count"`
	Success        bool      `json:"success"`
	CreatedAt      time.Time `json:"created_at"`
}

// AIUsage counts a project's AI assistant uses in one calendar month (UTC); the record's ID is the project
// ID and the month ("prj_…/2026-11").
type AIUsage struct {
	ID          string    `json:"id"`
	ProjectID   string    `json:"project_id"`
	PeriodStart time.Time `json:"period_start"`
	Used        int       `json:"used"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// The studio tables.
var (
	SQLHistory          = newTable("sql_history", func(r *SQLHistoryEntry) string { return r.ID })
	SQLHistoryByProject = SQLHistory.index("project", func(r *SQLHistoryEntry) []string { return []string{r.ProjectID} })
	AIUsages            = newTable("ai_usage", func(r *AIUsage) string { return r.ID })
	AIUsagesByProject   = AIUsages.index("project", func(r *AIUsage) []string { return []string{r.ProjectID} })
)

// ProjectAlert is a condition the observability sampler found on a project's server (storage or
// connections near their limit, a long-open transaction, ...): raised once, resolved by itself when the
// condition clears (appliance/observe/alerts.go).
type ProjectAlert struct {
	ID             string     `json:"id"`
	ProjectID      string     `json:"project_id"`
	OrganizationID string     `json:"organization_id"`
	Kind           string     `json:"kind"`
	Severity       string     `json:"severity"`
	Message        string     `json:"message"`
	LimitValue     float64    `json:"limit_value"`
	ObservedValue  float64    `json:"observed_value"`
	TriggeredAt    time.Time  `json:"triggered_at"`
	AcknowledgedAt *time.Time `json:"acknowledged_at"`
	AcknowledgedBy string     `json:"acknowledged_by"`
	ResolvedAt     *time.Time `json:"resolved_at"`
	LastNotifiedAt *time.Time `json:"last_notified_at"`
}

// ObservabilityState is what the sampler keeps of a project between sweeps: the last reading of the
// server's cumulative counters and of pg_stat_statements, so rates and deltas survive an appliance
// restart. Its ID is the project ID.
type ObservabilityState struct {
	ProjectID    string          `json:"project_id"`
	Counters     json.RawMessage `json:"counters"`      // the last counters reading (the sampler's type)
	CPUSeconds   float64         `json:"cpu_seconds"`   // the instance's processes' CPU time at that reading
	ReadAt       time.Time       `json:"read_at"`       // when it was read (the appliance's clock)
	Statements   json.RawMessage `json:"statements"`    // the last pg_stat_statements totals by query hash
	StatementsAt time.Time       `json:"statements_at"` // when they were read
	// StatementsReset is pg_stat_statements' stats_reset at that reading (it moves on a reset and a crash).
	StatementsReset time.Time `json:"statements_reset"`
}

// StatementText is the text of a statement the top-queries snapshots saw, by project and query hash (ID
// "prj_…/<hash>").
type StatementText struct {
	ID        string    `json:"id"`
	ProjectID string    `json:"project_id"`
	Hash      string    `json:"hash"`
	Query     string    `json:"query"`
	LastSeen  time.Time `json:"last_seen"`
}

// The observability tables and series. ObservabilitySamples holds a project's history points (key: the
// project ID; value: the sampler's binary encoding); StatementPoints holds, per project, each snapshot's
// pg_stat_statements deltas since the one before.
var (
	ProjectAlerts           = newTable("project_alerts", func(r *ProjectAlert) string { return r.ID })
	ProjectAlertsByProject  = ProjectAlerts.index("project", func(r *ProjectAlert) []string { return []string{r.ProjectID} })
	ObservabilityStates     = newTable("observability_state", func(r *ObservabilityState) string { return r.ProjectID })
	StatementTexts          = newTable("statement_texts", func(r *StatementText) string { return r.ID })
	StatementTextsByProject = StatementTexts.index("project", func(r *StatementText) []string { return []string{r.ProjectID} })
	ObservabilitySamples    = newSeries("observability_samples")
	StatementPoints         = newSeries("statement_points")
)

// SavedQuery is a SQL query saved in a project (the studio's saved queries; appliance/studio/saved.go).
type SavedQuery struct {
	ID             string    `json:"id"`
	OrganizationID string    `json:"organization_id"`
	ProjectID      string    `json:"project_id"`
	Name           string    `json:"name"`
	SQL            string    `json:"sql"`
	CreatedBy      string    `json:"created_by"`
	UpdatedBy      string    `json:"updated_by"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// The saved query tables: by project (counted: the project's limit), and by name in their project
// (SavedQueryName: unique, case-insensitively).
var (
	SavedQueries          = newTable("saved_queries", func(r *SavedQuery) string { return r.ID })
	SavedQueriesByProject = SavedQueries.index("project", func(r *SavedQuery) []string { return []string{r.ProjectID} }).counted(SavedQueries)
	SavedQueriesByName    = SavedQueries.unique("name", func(r *SavedQuery) []string { return []string{SavedQueryName(r.ProjectID, r.Name)} })
)

// SavedQueryName is the key of SavedQueriesByName for a name in a project: the project, and the name with
// each letter folded to one of its cases, so that two names strings.EqualFold calls equal have one key
// (each rune becomes the least of its unicode.SimpleFold orbit: 'K', 'k' and the Kelvin sign alike).
func SavedQueryName(projectID, name string) string {
	return projectID + sep + strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, name)
}

// BillingEvent is a billing provider's webhook event the appliance received, by the provider's event id:
// a redelivery of one is answered and not applied again (appliance/billing). Swept after a while.
type BillingEvent struct {
	ID             string    `json:"id"` // the provider's event id (Stripe's evt_...)
	Provider       string    `json:"provider"`
	Type           string    `json:"type"`
	OrganizationID string    `json:"organization_id"` // "" when no organization has its customer
	Outcome        string    `json:"outcome"`         // what the event did (appliance/billing's Outcome*)
	CreatedAt      time.Time `json:"created_at"`      // the provider's creation time of the event
	ReceivedAt     time.Time `json:"received_at"`
}

// BillingState is an organization's newest billing provider event applied to its billing_* fields: an
// older event, delivered late, changes nothing (appliance/billing).
type BillingState struct {
	OrganizationID string    `json:"organization_id"`
	EventID        string    `json:"event_id"`
	EventAt        time.Time `json:"event_at"` // the provider's creation time of that event
}

// The billing tables: the events received, the organizations' billing states, and the organizations by
// their billing provider's customer.
var (
	BillingEvents                  = newTable("billing_events", func(r *BillingEvent) string { return r.ID })
	BillingStates                  = newTable("billing_states", func(r *BillingState) string { return r.OrganizationID })
	OrganizationsByBillingCustomer = Organizations.index("billing_customer", func(r *Organization) []string { return nonEmpty(r.BillingCustomerID) })
)

// Plan is a project plan as the operators configured it (appliance/tenancy): seeded at the first start
// with the built-in plans, replaced by up --plans, changed by PUT /v1/plans/{name}.
type Plan struct {
	Name              string    `json:"name"`
	MaxConnections    int       `json:"max_connections"`
	StorageLimitBytes int64     `json:"storage_limit_bytes"`
	KVMemoryMB        int       `json:"kv_memory_mb"`
	PreviewsLimit     int       `json:"previews_limit"`
	AIUsesPerMonth    int       `json:"ai_uses_per_month"`
	MemoryBytes       int64     `json:"memory_bytes"`
	CPUCores          float64   `json:"cpu_cores"`
	UpdatedAt         time.Time `json:"updated_at"`
	// Scale to zero's defaults (nil in records older than them: api.DefaultSuspendAfterSeconds and
	// api.DefaultProductionSuspendAfterSeconds).
	SuspendAfterSeconds           *int `json:"suspend_after_seconds,omitempty"`
	ProductionSuspendAfterSeconds *int `json:"production_suspend_after_seconds,omitempty"`
}

// OrganizationQuota is what an organization may hold, as an operator set it; the record of ID
// DefaultQuotaID is every other organization's.
type OrganizationQuota struct {
	ID                string    `json:"id"` // the organization's ID, or DefaultQuotaID
	ProjectsLimit     int       `json:"projects_limit"`
	PreviewsLimit     int       `json:"previews_limit"`
	StorageLimitBytes int64     `json:"storage_limit_bytes"`
	UpdatedAt         time.Time `json:"updated_at"`
}

// DefaultQuotaID is the ID of the default organization quota's record.
const DefaultQuotaID = "default"

// The plans and the organization quotas.
var (
	Plans              = newTable("plans", func(r *Plan) string { return r.Name })
	OrganizationQuotas = newTable("organization_quotas", func(r *OrganizationQuota) string { return r.ID })
)

// Suspended reports whether the organization is suspended (an operator's act, appliance/tenancy): its
// projects' periodic work waits and its key-value stores refuse clients until it resumes. A missing
// organization is not suspended.
func Suspended(tx *Tx, orgID string) (bool, error) {
	o, err := Organizations.Get(tx, orgID)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return o.SuspendedAt != nil, nil
}

// Suspension is one period in which a project was suspended for idleness (scale to zero): From its
// suspension to To its wake (nil while it lasts). The history charts shade them and the organization's
// usage subtracts them from its compute seconds; those that ended more than SuspensionRetention ago are
// deleted at the project's next suspension.
type Suspension struct {
	ID             string     `json:"id"`
	ProjectID      string     `json:"project_id"`
	OrganizationID string     `json:"organization_id"`
	From           time.Time  `json:"from"`
	To             *time.Time `json:"to,omitempty"`
}

// SuspensionRetention is how long an ended suspension is kept: past the history's 30 days and a month.
const SuspensionRetention = 40 * 24 * time.Hour

// The suspensions table.
var (
	Suspensions          = newTable("suspensions", func(r *Suspension) string { return r.ID })
	SuspensionsByProject = Suspensions.index("project", func(r *Suspension) []string { return []string{r.ProjectID} })
)

// SuspendedIntervals are the project's suspensions that overlap [from, to), clipped to it, oldest first
// (one still lasting ends at to).
func SuspendedIntervals(tx *Tx, projectID string, from, to time.Time) ([][2]time.Time, error) {
	recs, err := Suspensions.Lookup(tx, SuspensionsByProject, projectID, Query{})
	if err != nil {
		return nil, err
	}
	var out [][2]time.Time
	for _, r := range recs {
		end := to
		if r.To != nil && r.To.Before(to) {
			end = *r.To
		}
		start := r.From
		if start.Before(from) {
			start = from
		}
		if end.After(start) {
			out = append(out, [2]time.Time{start, end})
		}
	}
	slices.SortFunc(out, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	return out, nil
}
