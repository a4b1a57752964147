package upgrades

import (
	"context"
	"slices"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// methodTo is how an upgrade to an installation runs: pg_upgrade when it has it, logical replication
// otherwise.
func methodTo(b postgres.Binaries) string {
	if _, err := b.Path("pg_upgrade"); err != nil {
		return MethodLogical
	}
	return MethodPgUpgrade
}

// Majors is what the dashboard's Upgrades card shows: the project's major, an upgrade awaiting confirm or
// rollback, and the majors installed above its own with what each installation can do (no paths: those
// are the operator's, in /status and doctor).
func (s *Service) Majors(ctx context.Context, p *authz.Principal, projectID string) (*api.MajorUpgrades, error) {
	var prj *store.Project
	var inst *store.Instance
	err := s.db.View(func(tx *store.Tx) (err error) {
		if prj, err = s.host.ActiveProject(tx, p, projectID); err != nil {
			return err
		}
		if inst, err = store.Instances.Get(tx, prj.PrimaryInstanceID); err != nil {
			return apperr.Internal(err, "read instance")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := &api.MajorUpgrades{CurrentMajor: inst.Major, PostgresVersion: prj.PostgresVersion, Majors: []api.MajorTarget{}}
	if inst.PreviousDir != "" {
		method := inst.UpgradeMethod
		if method == "" { // a record from before the method was kept: pg_upgrade was the only one
			method = MethodPgUpgrade
		}
		out.Pending = &api.PendingUpgrade{PreviousMajor: inst.PreviousMajor, Method: method}
	}
	for _, b := range postgres.Majors(s.cfg.PostgresRoot, s.cfg.DistRoot) {
		if b.Major <= inst.Major {
			continue
		}
		out.Majors = append(out.Majors, api.MajorTarget{Major: b.Major, Method: methodTo(b),
			PgUpgrade: slices.Contains(b.Tools(), "pg_upgrade"), ClientTools: b.HasClientTools()})
	}
	return out, nil
}
