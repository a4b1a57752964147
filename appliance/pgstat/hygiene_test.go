package pgstat_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/pgstat"
	"github.com/theappliance/appliance/appliance/postgres/pgtest"
)

// testHygiene: an unused index and redundant ones (a prefix, exact duplicates) are reported; primary key
// and unique indexes, used and small indexes are not.
func testHygiene(t *testing.T, s *pgtest.Server) {
	ctx := context.Background()
	db, _, tenant := s.Tenant(t)
	admin := s.Admin(t, db)
	mustExec(t, tenant, sqlFixture(t, "hygiene.sql"))
	mustExec(t, tenant, "SET enable_seqscan = off")
	mustExec(t, tenant, "SELECT count(*) FROM items WHERE a = 5 AND b = 3")
	mustExec(t, tenant, "SELECT pg_stat_force_next_flush()")
	pgtest.WaitFor(t, 20*time.Second, func() (bool, string) {
		var scans int64
		if err := admin.QueryRow(ctx, "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = 'items_a_b'").Scan(&scans); err != nil {
			t.Fatal(err)
		}
		return scans > 0, "the scan of items_a_b is not counted"
	})

	const minSize = 64 << 10
	h, err := pgstat.IndexHygiene(ctx, admin, minSize)
	if err != nil {
		t.Fatal(err)
	}
	unused := map[string]pgstat.UnusedIndex{}
	for _, u := range h.UnusedIndexes {
		unused[u.Index] = u
	}
	redundant := map[string]string{}
	var reclaimable int64
	sizes := map[string]int64{}
	for _, r := range h.RedundantIndexes {
		redundant[r.Index] = r.CoveredBy
		sizes[r.Index] = r.SizeBytes
	}
	for _, u := range h.UnusedIndexes {
		sizes[u.Index] = u.SizeBytes
	}
	for _, n := range sizes {
		reclaimable += n
	}
	for _, want := range []string{"items_a", "items_c", "items_c_dup", "items_sku", "items_b_desc", "items_b_c"} {
		if u, ok := unused[want]; !ok || u.SizeBytes < minSize || u.IndexScans != 0 || u.Schema != "public" || u.Table != "items" ||
			u.DropStatement != `DROP INDEX CONCURRENTLY "public"."`+want+`";` || !strings.HasPrefix(u.Definition, "CREATE INDEX "+want+" ON public.items") {
			t.Errorf("unused %s: %+v", want, u)
		}
	}
	for _, not := range []string{"items_pkey", "items_sku_key", "items_a_b", "items_b_small"} {
		if _, ok := unused[not]; ok {
			t.Errorf("%s is listed as unused", not)
		}
	}
	wantRedundant := map[string]string{"items_a": "items_a_b", "items_c_dup": "items_c", "items_sku": "items_sku_key"}
	if fmt.Sprint(redundant) != fmt.Sprint(wantRedundant) {
		t.Errorf("redundant %v, want %v", redundant, wantRedundant)
	}
	if !h.Available || h.MinIndexSizeBytes != minSize || h.ReclaimableBytes != reclaimable || h.StatsResetAt == nil ||
		h.ObservationWindowSeconds < 0 || h.ObservationWindowSeconds > 3600 || !strings.Contains(h.Reason, "may be listed as unused") {
		t.Errorf("hygiene %+v (reclaimable: want %d)", h, reclaimable)
	}
	// The drop statements run, as the tenant (outside a transaction block).
	mustExec(t, tenant, h.RedundantIndexes[0].DropStatement)
}

// TestRestart: a restart shows in the counters; a statement keeps its hash across a restart and a reset
// of pg_stat_statements; the admin's statements are left out.
