package pgstat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
)

// orderQueries runs the workload the advisor learns from, n times: a statement with a parameter
// (extended protocol), one with constants, and one calling the tenant's IMMUTABLE function pick().
func orderQueries(t *testing.T, conn *pgx.Conn, n int) {
	t.Helper()
	for i := range n {
		mustExec(t, conn, "SELECT count(*) FROM orders WHERE customer_id = $1", i)
		mustExec(t, conn, fmt.Sprintf("SELECT count(*) FROM orders WHERE region = %d", i), pgx.QueryExecModeSimpleProtocol)
		mustExec(t, conn, fmt.Sprintf("SELECT count(*) FROM orders WHERE region = pick(%d)", i), pgx.QueryExecModeSimpleProtocol)
	}
}

func find(suggestions []pgstat.Suggestion, ddl string) *pgstat.Suggestion {
	for i := range suggestions {
		if suggestions[i].DDL == ddl {
			return &suggestions[i]
		}
	}
	return nil
}

const (
	customerDDL = "CREATE INDEX ON public.orders USING btree (customer_id)"
	regionDDL   = "CREATE INDEX ON public.orders USING btree (region)"
)

// testAdvisor: with pg_qualstats and hypopg, the advisor proposes an index on each column the workload
// filters a large table by, with a positive cost reduction and size; the tenant's IMMUTABLE function it
// plans runs as the tenant, and nothing of the tenant's runs on the admin session.
func testAdvisor(t *testing.T, s *pgtest.Server) {
	ctx := context.Background()
	db, role, tenant := s.Tenant(t)
	var adminNotices, tenantNotices notices
	admin := s.Connect(t, adminNotices.record(s.AdminConfig(t, db)))
	advisorTenant := s.Connect(t, tenantNotices.record(s.TenantConfig(t, db, role)))
	mustExec(t, admin, "CREATE EXTENSION pg_qualstats")
	mustExec(t, admin, "CREATE EXTENSION hypopg")
	mustExec(t, admin, "CREATE EXTENSION pg_stat_statements")
	mustExec(t, tenant, sqlFixture(t, "orders.sql")) // the advisor's table: 100k rows, no index but the primary key
	mustExec(t, tenant, sqlFixture(t, "overloads.sql"))
	var rate string
	if err := tenant.QueryRow(ctx, "SHOW pg_qualstats.sample_rate").Scan(&rate); err != nil || rate != "0.1" {
		t.Errorf("pg_qualstats.sample_rate = %q (%v), want the instance's 0.1", rate, err)
	}

	// pg_qualstats samples a share of the statements: run the workload until the advisor has seen all three.
	var advice *pgstat.Advice
	var err error
	// A range of the primary key read by a sequential scan: pg_qualstats samples its filter, and the
	// advisor would propose an index on id, which the primary key already is.
	var idSampled bool
	pgtest.WaitFor(t, 60*time.Second, func() (bool, string) {
		orderQueries(t, tenant, 10)
		for range 10 {
			mustExec(t, tenant, "SELECT sum(customer_id) FROM orders WHERE id > 40000", pgx.QueryExecModeSimpleProtocol)
		}
		if err := admin.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_qualstats() q WHERE coalesce(q.lrelid, q.rrelid) = 'orders'::regclass
			AND coalesce(q.lattnum, q.rattnum) = 1 AND q.eval_type = 'f'`).Scan(&idSampled); err != nil {
			t.Fatal(err)
		}
		if advice, err = pgstat.IndexAdvice(ctx, admin, advisorTenant, 1000, 30); err != nil {
			t.Fatal(err)
		}
		c, r := find(advice.Suggestions, customerDDL), find(advice.Suggestions, regionDDL)
		var plan string
		if err := tenant.QueryRow(ctx, "EXPLAIN (FORMAT JSON) SELECT sum(customer_id) FROM orders WHERE id > 40000").Scan(&plan); err != nil {
			t.Fatal(err)
		}
		return c != nil && r != nil && c.EstimatedCostReductionPct > 0 && r.EstimatedCostReductionPct > 0 && idSampled &&
				len(tenantNotices.containing("pick() runs as")) > 0,
			fmt.Sprintf("%+v; id sampled %v (plan %s); %d notices", advice, idSampled, plan, len(tenantNotices.containing("runs as")))
	})
	// Nothing the primary key provides, and nothing without a gain.
	for _, sg := range advice.Suggestions {
		if strings.HasSuffix(sg.DDL, "(id)") || sg.EstimatedCostReductionPct <= 0 {
			t.Errorf("suggested %+v", sg)
		}
	}
	// The advisor's own statements (transaction control included) are not among the tenant's statements
	// the top queries and the slowest statements read.
	st, err := pgstat.ReadStatements(ctx, admin, db, postgres.AdminRole)
	if err != nil || !st.Available {
		t.Fatalf("statements: %+v %v", st, err)
	}
	for _, x := range st.Totals {
		q := strings.ToLower(x.Query)
		for _, own := range []string{"hypopg", "pg_qualstats_", "pg_qualstats()", "pgstat_advisor", "plan_cache_mode", "current_database()"} {
			if strings.Contains(q, own) {
				t.Errorf("the advisor's statement %q is among the tenant's", x.Query)
			}
		}
		for _, own := range []string{"begin", "savepoint", "release", "rollback"} {
			if strings.HasPrefix(q, own) {
				t.Errorf("the advisor's statement %q is among the tenant's", x.Query)
			}
		}
	}
	if !advice.Available || !advice.CostEstimatesAvailable || !advice.SizeEstimatesAvailable || len(advice.MissingExtensions) != 0 ||
		advice.MinFilter != 1000 || advice.MinSelectivity != 30 {
		t.Errorf("advice: %+v", advice)
	}
	for _, ddl := range []string{customerDDL, regionDDL} {
		sg := find(advice.Suggestions, ddl)
		if sg.Table != "public.orders" || sg.IndexMethod != "btree" || sg.EstimatedCostReductionPct < 20 || sg.EstimatedCostReductionPct > 100 ||
			sg.EstimatedSizeBytes < 100<<10 || sg.QueryID == 0 {
			t.Errorf("suggestion %+v", sg)
		}
		var example string
		if err := admin.QueryRow(ctx, "SELECT pg_qualstats_example_query($1)", sg.QueryID).Scan(&example); err != nil {
			t.Fatal(err)
		}
		if col := strings.TrimSuffix(ddl[strings.LastIndex(ddl, "(")+1:], ")"); !strings.Contains(example, col+" = ") {
			t.Errorf("query %d of %s is %q", sg.QueryID, ddl, example)
		}
	}
	// The statement with a parameter was planned (generically): its query is the suggestion's.
	var example string
	if err := admin.QueryRow(ctx, "SELECT pg_qualstats_example_query($1)", find(advice.Suggestions, customerDDL).QueryID).Scan(&example); err != nil {
		t.Fatal(err)
	}
	if example != "SELECT count(*) FROM orders WHERE customer_id = $1" {
		t.Errorf("the customer_id index serves %q", example)
	}
	for _, n := range tenantNotices.containing("runs as") {
		if !strings.HasSuffix(n, "runs as "+role) {
			t.Errorf("on the tenant's session: %q", n)
		}
	}
	if n := adminNotices.containing("runs as"); len(n) > 0 {
		t.Errorf("the tenant's functions ran on the admin session: %q", n)
	}
	var hypothetical int
	if err := advisorTenant.QueryRow(ctx, "SELECT count(*) FROM hypopg()").Scan(&hypothetical); err != nil || hypothetical != 0 {
		t.Errorf("hypothetical indexes left: %d, %v", hypothetical, err)
	}

	// An example that no longer plans (pick() is among the region index's) is left without an estimate; the
	// other examples are estimated.
	mustExec(t, tenant, "DROP FUNCTION pick(int)")
	pgtest.WaitFor(t, 60*time.Second, func() (bool, string) {
		if advice, err = pgstat.IndexAdvice(ctx, admin, advisorTenant, 1000, 30); err != nil {
			t.Fatalf("with an example that does not plan: %v", err)
		}
		if sg := find(advice.Suggestions, regionDDL); sg != nil && sg.EstimatedCostReductionPct > 0 {
			return true, ""
		}
		for i := range 10 {
			mustExec(t, tenant, fmt.Sprintf("SELECT count(*) FROM orders WHERE region = %d", i), pgx.QueryExecModeSimpleProtocol)
		}
		return false, fmt.Sprintf("with an example that does not plan: %+v", advice)
	})
	// Thresholds no predicate reaches.
	if advice, err = pgstat.IndexAdvice(ctx, admin, advisorTenant, 1000000, 30); err != nil || len(advice.Suggestions) != 0 || advice.Reason == "" {
		t.Errorf("with min_filter 1000000: %+v, %v", advice, err)
	}
}

// testAdvisorWithoutHypopg: the suggestions come without estimates.
func testAdvisorWithoutHypopg(t *testing.T, s *pgtest.Server) {
	ctx := context.Background()
	db, role, tenant := s.Tenant(t)
	admin := s.Admin(t, db)
	advisorTenant := s.Connect(t, s.TenantConfig(t, db, role))
	mustExec(t, admin, "CREATE EXTENSION pg_qualstats")
	mustExec(t, tenant, sqlFixture(t, "orders.sql")) // the advisor's table: 100k rows, no index but the primary key
	var advice *pgstat.Advice
	var err error
	pgtest.WaitFor(t, 60*time.Second, func() (bool, string) {
		for i := range 10 {
			mustExec(t, tenant, "SELECT count(*) FROM orders WHERE customer_id = $1", i)
		}
		if advice, err = pgstat.IndexAdvice(ctx, admin, advisorTenant, 1000, 30); err != nil {
			t.Fatal(err)
		}
		return find(advice.Suggestions, customerDDL) != nil, fmt.Sprintf("%+v", advice)
	})
	sg := find(advice.Suggestions, customerDDL)
	if !advice.Available || advice.CostEstimatesAvailable || advice.SizeEstimatesAvailable ||
		fmt.Sprint(advice.MissingExtensions) != "[hypopg]" || !strings.Contains(advice.Reason, "hypopg") ||
		sg.EstimatedCostReductionPct != 0 || sg.EstimatedSizeBytes != 0 || sg.QueryID == 0 || sg.Table != "public.orders" {
		t.Errorf("without hypopg: %+v", advice)
	}
}

// testAdvisorWithoutExtensions: no advice, and what to enable.
func testAdvisorWithoutExtensions(t *testing.T, s *pgtest.Server) {
	db, _, tenant := s.Tenant(t)
	advice, err := pgstat.IndexAdvice(context.Background(), s.Admin(t, db), tenant, 1000, 30)
	if err != nil {
		t.Fatal(err)
	}
	if advice.Available || fmt.Sprint(advice.MissingExtensions) != "[pg_qualstats hypopg]" ||
		!strings.Contains(advice.Reason, "POST /v1/projects/{id}/extensions") || advice.MinFilter != 1000 {
		t.Errorf("without the extensions: %+v", advice)
	}
	js, _ := json.Marshal(advice)
	if !strings.Contains(string(js), `"suggestions":[]`) {
		t.Errorf("JSON: %s", js)
	}
	if _, err := pgstat.IndexAdvice(context.Background(), s.Admin(t, db), tenant, 1000, 101); err == nil {
		t.Error("min_selectivity 101 accepted")
	}
}
