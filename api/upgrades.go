package api

// MajorUpgrades is GET /v1/projects/{projectID}/upgrade/major: the project's major, an upgrade awaiting
// confirm or rollback, and the PostgreSQL majors installed that it can be upgraded to.
type MajorUpgrades struct {
	CurrentMajor    int             `json:"current_major" doc:"the PostgreSQL major the project's server runs"`
	PostgresVersion string          `json:"postgres_version" doc:"read from the server (SHOW server_version)"`
	Pending         *PendingUpgrade `json:"pending" api:"nullable" doc:"the major upgrade awaiting confirm or rollback; null when none"`
	Majors          []MajorTarget   `json:"majors" doc:"the majors installed above the current one, oldest first (empty: no upgrade is possible until the operator installs one)"`
}

// PendingUpgrade is a major upgrade whose old server is kept until confirm or rollback.
type PendingUpgrade struct {
	PreviousMajor int    `json:"previous_major" doc:"the major a rollback returns to"`
	Method        string `json:"method" enum:"UpgradeMethod" doc:"pg_upgrade: a rollback returns to the data as it was before the upgrade (what was written since is lost); logical: the old server follows the new one, a rollback keeps the rows written since the cutover (not schema changes, new databases or large objects)"`
}

// MajorTarget is a PostgreSQL major installed on the appliance, with what its installation can do.
type MajorTarget struct {
	Major       int    `json:"major"`
	Method      string `json:"method" enum:"UpgradeMethod" doc:"how an upgrade to it runs: pg_upgrade when the installation has it, logical replication otherwise"`
	PgUpgrade   bool   `json:"pg_upgrade" doc:"whether the installation has pg_upgrade"`
	ClientTools bool   `json:"client_tools" doc:"whether the installation has the client tools (pg_dump, pg_dumpall, pg_restore, pg_basebackup, pg_verifybackup, psql): with them, the project's exports, imports and base backups on that major run them; without them, exports and imports are refused after an upgrade to it and its base backups are online copies"`
}

// Upgrade methods of a major upgrade (the upgrades area's).
const (
	UpgradeMethodPgUpgrade = "pg_upgrade"
	UpgradeMethodLogical   = "logical"
)
