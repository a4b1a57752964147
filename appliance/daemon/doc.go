// Package daemon runs the appliance's daemons — PostgreSQL instances, PgBouncer poolers, key-value
// stores' Redis servers — as an unprivileged OS user, finds them again through their pid files and /proc
// (so a restarted appliance adopts what the previous one started), keeps them running (Supervisor), and
// ends a stopped program together with what it forked (Kill).
package daemon
