package httpapi

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/store"
)

// TestMetricsOfAClusterNode: a cluster node's /metrics says which node it is (appliance_node_info) and
// carries the gauges of the projects it hosts only: a project on another node, sampled there (its history
// point is in the shared store), has no series here, nor does the forming node's project without a
// NodeID when this node is not the forming node. Each project has a sample, so a filter that let a
// foreign project through would show its series.
func TestMetricsOfAClusterNode(t *testing.T) {
	t.Parallel()
	e := appliancetest.New(t, appliancetest.Options{NodeID: "nod_here"})
	srv := New(e.Svc, Options{Log: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { srv.Close() })
	now := time.Now().UTC().Truncate(time.Second)
	projects := map[string]string{"prj_local": "nod_here", "prj_foreign": "nod_there", "prj_formers": ""}
	err := e.DB.Update(func(tx *store.Tx) error {
		if err := tx.SetMeta(store.MetaFormedBy, "nod_there"); err != nil {
			return err
		}
		for _, n := range []*store.Node{{ID: "nod_here", Name: "m-here", Advertise: "127.0.0.2", Version: "test", State: store.NodeActive},
			{ID: "nod_there", Name: "m-there", Advertise: "127.0.0.3", Version: "test", State: store.NodeActive}} {
			if err := store.Nodes.Put(tx, n); err != nil {
				return err
			}
		}
		for id, node := range projects {
			p := &store.Project{ID: id, Name: id, OrganizationID: "org_x", Plan: "free", State: "active", NodeID: node, CreatedAt: now, UpdatedAt: now}
			if err := store.Projects.Put(tx, p); err != nil {
				return err
			}
			if err := observe.PutSample(tx, id, &api.ObservabilitySample{SampledAt: now, Connections: 3, StorageBytes: 1 << 20}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.RemoteAddr = "127.0.0.1:4000"
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", w.Code, w.Body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(w.Body.String()))
	if err != nil {
		t.Fatalf("the exposition does not parse: %v\n%s", err, w.Body)
	}
	info := families["appliance_node_info"]
	if info == nil || len(info.GetMetric()) != 1 {
		t.Fatalf("no appliance_node_info:\n%s", w.Body)
	}
	labels := map[string]string{}
	for _, l := range info.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["node"] != "nod_here" || labels["name"] != "m-here" || labels["advertise"] != "127.0.0.2" || info.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("appliance_node_info: %v", labels)
	}
	for _, name := range []string{"appliance_project_connections", "appliance_project_storage_bytes"} {
		var seen []string
		for _, m := range families[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "project_id" {
					seen = append(seen, l.GetValue())
				}
			}
		}
		if len(seen) != 1 || seen[0] != "prj_local" {
			t.Fatalf("%s has the series of %v, want prj_local's alone (prj_foreign and prj_formers are another node's)", name, seen)
		}
	}
}
