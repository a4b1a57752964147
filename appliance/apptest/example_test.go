package apptest_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apptest"
)

// TestExample is the example of README's "Testing with a throwaway appliance": one call for a whole
// appliance, one for a ready project; the database answers, runs without durability (a throwaway's), and
// the API answers the test's client. Start's t.Cleanup checks nothing is left.
func TestExample(t *testing.T) {
	s := apptest.Start(t, apptest.Options{})

	dsn := s.Project(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var one int
	if err := conn.QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1: %d, %v", one, err)
	}
	var fsync, syncCommit string
	if err := conn.QueryRow(t.Context(), "SELECT current_setting('fsync'), current_setting('synchronous_commit')").Scan(&fsync, &syncCommit); err != nil {
		t.Fatal(err)
	}
	if fsync != "off" || syncCommit != "off" {
		t.Errorf("a throwaway appliance's server runs with fsync %s, synchronous_commit %s (want off, off)", fsync, syncCommit)
	}

	var me api.MeResponse
	if err := s.Client.Do(t.Context(), http.MethodGet, "/v1/me", nil, &me); err != nil {
		t.Fatal(err)
	}
	if me.Organization == nil || me.Organization.ID != s.Bootstrap.OrganizationID {
		t.Fatalf("/v1/me with the appliance's key: %+v", me)
	}
}
