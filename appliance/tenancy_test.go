package appliance_test

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// TestSuspendStopsAndResumeStarts: an operator's suspension refuses the organization's live API key at
// once (its principal was cached) and stops its project's server and pooler, keeping the data: the
// ports refuse connections and the record says stopped. The operator's own session still works. The
// resume lets the same key in again and starts the servers: the data answers through both ports.
func TestSuspendStopsAndResumeStarts(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "suspended", "development")
	c, err := e.Svc.ProjectConnections(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, c.Connections.DirectURL)
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('through the suspension')"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	added, err := e.Svc.Tenancy().AddOperator(ctx, &api.AddOperatorRequest{Email: "ops@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := e.Svc.Identity().CreateSession(ctx, &api.SessionRequest{Email: "ops@example.com", Password: added.Password})
	if err != nil {
		t.Fatal(err)
	}
	op, err := e.Svc.Identity().Authenticate(ctx, sess.Token)
	if err != nil || !op.IsAdmin || op.OrganizationID != "" {
		t.Fatalf("operator session: %+v %v", op, err)
	}
	// The organization's owner key may not suspend its own organization.
	if _, err := e.Svc.Tenancy().SuspendOrganization(ctx, p, prj.OrganizationID, &api.SuspendOrganizationRequest{Reason: "x"}); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("suspend by the organization's key: %v", err)
	}

	res, err := e.Svc.Tenancy().SuspendOrganization(ctx, op, prj.OrganizationID, &api.SuspendOrganizationRequest{Reason: "unpaid invoice"})
	if err != nil {
		t.Fatal(err)
	}
	// At once, before the stop job ran: the key used a moment ago is refused with the reason.
	if _, err := e.Svc.Identity().Authenticate(ctx, e.Bootstrap.APIKey); appliance.KindOf(err) != appliance.KindForbidden || err.Error() != "organization suspended: unpaid invoice" {
		t.Fatalf("the organization's key after the suspension: %v", err)
	}
	if _, err := e.Svc.Identity().CreateSession(ctx, &api.SessionRequest{Email: e.Bootstrap.Email, Password: e.Bootstrap.Password}); appliance.KindOf(err) != appliance.KindForbidden {
		t.Fatalf("the owner's sign-in into the suspended organization: %v", err)
	}
	if _, err := e.Svc.Identity().Authenticate(ctx, sess.Token); err != nil {
		t.Fatalf("the operator's session during the suspension: %v", err)
	}
	if len(res.Jobs) != 1 || res.Jobs[0].Type != "project.stop" {
		t.Fatalf("suspend's jobs: %+v", res.Jobs)
	}
	if j := e.WaitJob(t, res.Jobs[0].ID); j.State != scheduler.StateCompleted {
		t.Fatalf("stop job %s: %s %s", j.State, j.Error, j.LastStderr)
	}
	if got := e.Project(t, prj.ID); got.RuntimeStatus != appliance.RuntimeStopped || got.State != appliance.ProjectActive {
		t.Fatalf("a suspended project: state %s, runtime %s", got.State, got.RuntimeStatus)
	}
	for _, url := range []string{c.Connections.DirectURL, c.Connections.PooledURL} {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
		if nc, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
			if nc != nil {
				nc.Close()
			}
			t.Fatalf("%s of a suspended project: %v, want connection refused", addr, err)
		}
	}

	res, err = e.Svc.Tenancy().ResumeOrganization(ctx, op, prj.OrganizationID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Svc.Identity().Authenticate(ctx, e.Bootstrap.APIKey); err != nil {
		t.Fatalf("the organization's key after the resume: %v", err)
	}
	if len(res.Jobs) != 1 || res.Jobs[0].Type != "project.start" {
		t.Fatalf("resume's jobs: %+v", res.Jobs)
	}
	if j := e.WaitJob(t, res.Jobs[0].ID); j.State != scheduler.StateCompleted {
		t.Fatalf("start job %s: %s %s", j.State, j.Error, j.LastStderr)
	}
	if got := e.Project(t, prj.ID); got.RuntimeStatus != appliance.RuntimeActive {
		t.Fatalf("a resumed project: runtime %s", got.RuntimeStatus)
	}
	for _, url := range []string{c.Connections.DirectURL, c.Connections.PooledURL} {
		conn := connect(t, url)
		if v := scalar[string](t, conn, "SELECT v FROM kept"); !strings.Contains(v, "suspension") {
			t.Fatalf("the data after the resume: %q", v)
		}
		conn.Close(ctx)
	}
}

// TestSuspendedOrganizationPeriodicWorkWaits: while its organization is suspended, a project's scheduled
// backup does not run at its slot (nor the restore test of its backups); after the resume the missed slot
// runs, and the restore test too.
func TestSuspendedOrganizationPeriodicWorkWaits(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	ctx := t.Context()
	prj := provision(t, e, p, "paused", "development")
	if _, err := e.Svc.Backups().PutSchedule(ctx, p, prj.ID, "default", &appliance.PutScheduledBackupRequest{
		CronHour: intp(2), CronMinute: intp(30), IsActive: boolp(true)}); err != nil {
		t.Fatal(err)
	}
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 1)
	if err := e.DB.Update(func(tx *store.Tx) error { // today's slot ran
		r, err := store.ScheduledBackups.Get(tx, prj.ID)
		if err != nil {
			return err
		}
		ran := day.Add(-24*time.Hour + 2*time.Hour + 30*time.Minute)
		r.LastRunAt = &ran
		return store.ScheduledBackups.Put(tx, r)
	}); err != nil {
		t.Fatal(err)
	}
	op := operator(t, e, "periodic-ops@example.com")
	cycle := func(suspend bool) {
		t.Helper()
		var res *api.OrganizationJobs
		var err error
		if suspend {
			res, err = e.Svc.Tenancy().SuspendOrganization(ctx, op, prj.OrganizationID, &api.SuspendOrganizationRequest{Reason: "audit"})
		} else {
			res, err = e.Svc.Tenancy().ResumeOrganization(ctx, op, prj.OrganizationID)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range res.Jobs {
			if j := e.WaitJob(t, j.ID); j.State != scheduler.StateCompleted {
				t.Fatalf("%s job %s: %s", j.Type, j.State, j.Error)
			}
		}
	}
	slot := day.Add(2*time.Hour + 31*time.Minute)
	cycle(true)
	if res, err := e.Svc.Backups().RunScheduled(ctx, slot); err != nil || res.Enqueued != 0 {
		t.Fatalf("a suspended organization's scheduled backup at its slot: %+v %v", res, err)
	}
	cycle(false)
	res, err := e.Svc.Backups().RunScheduled(ctx, slot.Add(time.Minute))
	if err != nil || res.Enqueued != 1 {
		t.Fatalf("the missed slot after the resume: %+v %v", res, err)
	}
	list, err := e.Svc.Backups().ListSchedules(ctx, p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j := e.WaitJob(t, list.ScheduledBackups[0].LastJobID); j.State != scheduler.StateCompleted {
		t.Fatalf("the scheduled backup: %s %s", j.State, j.Error)
	}

	cycle(true)
	if res, err := e.Svc.VerifyBackups(ctx, time.Now(), time.Hour); err != nil || res != (appliance.VerifyBackupsResult{}) {
		t.Fatalf("the restore test of a suspended organization's backup: %+v %v", res, err)
	}
	cycle(false)
	if res, err := e.Svc.VerifyBackups(ctx, time.Now(), time.Hour); err != nil || res.Verified != 1 {
		t.Fatalf("the restore test after the resume: %+v %v", res, err)
	}
}

// operator makes a platform operator and returns its signed-in principal.
func operator(t *testing.T, e *appliancetest.Env, email string) *appliance.Principal {
	t.Helper()
	added, err := e.Svc.Tenancy().AddOperator(t.Context(), &api.AddOperatorRequest{Email: email})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := e.Svc.Identity().CreateSession(t.Context(), &api.SessionRequest{Email: email, Password: added.Password})
	if err != nil {
		t.Fatal(err)
	}
	op, err := e.Svc.Identity().Authenticate(t.Context(), sess.Token)
	if err != nil {
		t.Fatal(err)
	}
	return op
}
