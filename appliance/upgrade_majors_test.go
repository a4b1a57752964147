package appliance_test

import (
	"testing"

	"github.com/theappliance/appliance/api"
)

// The Upgrades card's answer: the majors installed above the project's, with what each can do, and the
// upgrade awaiting confirm or rollback.
func TestUpgradeMajorsAvailable(t *testing.T) {
	t.Parallel()
	e, p := realEnv(t)
	prj := provision(t, e, p, "majors", "development")
	m, err := e.Svc.Upgrades().Majors(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if m.CurrentMajor != 15 || m.Pending != nil || len(m.Majors) != 0 || m.PostgresVersion == "" {
		t.Fatalf("majors with Debian's 15 alone: %+v", m)
	}
	upgradeTarget(t, e)
	m, err = e.Svc.Upgrades().Majors(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := api.MajorTarget{Major: 17, Method: "logical", PgUpgrade: false, ClientTools: false}
	if m.CurrentMajor != 15 || m.Pending != nil || len(m.Majors) != 1 || m.Majors[0] != want {
		t.Fatalf("majors with the npm 17: %+v", m)
	}
	res, err := e.Svc.Upgrades().Major(t.Context(), p, prj.ID, 17)
	runJob(t, e, res, err)
	m, err = e.Svc.Upgrades().Majors(t.Context(), p, prj.ID)
	if err != nil {
		t.Fatal(err)
	}
	if m.CurrentMajor != 17 || m.Pending == nil || *m.Pending != (api.PendingUpgrade{PreviousMajor: 15, Method: "logical"}) || len(m.Majors) != 0 {
		t.Fatalf("majors after the upgrade: %+v (pending %+v)", m, m.Pending)
	}
	if _, err := e.Svc.Upgrades().Majors(t.Context(), p, "prj_missing"); err == nil {
		t.Fatal("majors of a missing project answered")
	}
}
