package httpapi

import (
	"testing"
)

// TestProjectDefaults: a project created without an environment is a production project, and a production
// project has its daily backup schedule from the start (03:mm UTC, the default retention, active); a
// development project has none until one is set.
func TestProjectDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := b.do("POST", "/v1/projects", b.adminKey, map[string]any{"name": "defaults"})
	if created.status != 202 {
		t.Fatalf("create: %d %s", created.status, created.body)
	}
	prj, _ := created.json["project"].(map[string]any)
	if prj["environment"] != "production" {
		t.Fatalf("the default environment: %v", prj["environment"])
	}
	list := b.do("GET", "/v1/projects/"+prj["id"].(string)+"/scheduled-backups", b.adminKey, nil)
	scheds, _ := list.json["scheduled_backups"].([]any)
	if list.status != 200 || len(scheds) != 1 {
		t.Fatalf("the production project's schedules: %d %s", list.status, list.body)
	}
	s := scheds[0].(map[string]any)
	if s["id"] != "default" || s["cron_hour"] != float64(3) || s["cron_minute"].(float64) < 0 || s["cron_minute"].(float64) > 59 ||
		s["retention_days"] != float64(7) || s["is_active"] != true || s["label"] != "scheduled" {
		t.Fatalf("the default schedule: %s", list.body)
	}

	dev := b.do("POST", "/v1/projects", b.adminKey, map[string]any{"name": "scratch", "environment": "development"})
	if dev.status != 202 {
		t.Fatalf("create: %d %s", dev.status, dev.body)
	}
	id := dev.json["project"].(map[string]any)["id"].(string)
	list = b.do("GET", "/v1/projects/"+id+"/scheduled-backups", b.adminKey, nil)
	if scheds, _ := list.json["scheduled_backups"].([]any); list.status != 200 || len(scheds) != 0 {
		t.Fatalf("the development project's schedules: %d %s", list.status, list.body)
	}
}
