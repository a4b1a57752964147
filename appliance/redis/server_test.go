package redis

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/daemon"
)

// TestServerLifecycle: a clean stop keeps the data (RDB) for the next start; the supervisor starts a
// killed server again; Remove leaves neither process nor files.
func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	srv, token, _ := startServer(t)
	if got := cli(t, srv.Config, TenantUser, token, "SET", "kept", "yes"); got != "OK" {
		t.Fatalf("SET: %q", got)
	}
	if err := srv.Stop(t.Context(), nil, daemon.StopFast); err != nil {
		t.Fatal(err)
	}
	if _, running, _ := srv.Status(); running {
		t.Fatal("running after Stop")
	}
	if err := srv.Start(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if got := cli(t, srv.Config, TenantUser, token, "GET", "kept"); got != "yes" {
		t.Fatalf("after a restart: %q", got)
	}

	sup := daemon.NewSupervisor()
	sup.Interval = 50 * time.Millisecond
	events := make(chan daemon.Event, 10)
	sup.OnEvent = func(e daemon.Event) { events <- e }
	t.Cleanup(func() { sup.Stop(context.Background()) })
	if err := sup.Watch(srv.ID, srv); err != nil {
		t.Fatal(err)
	}
	pid, _, _ := srv.Status()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.After(30 * time.Second); ; {
		select {
		case e := <-events:
			if e.Kind != daemon.EventRestarted {
				continue
			}
		case <-deadline:
			t.Fatal("not restarted")
		}
		break
	}
	if got := cli(t, srv.Config, TenantUser, token, "GET", "kept"); got != "yes" {
		t.Fatalf("after the supervisor's restart: %q", got)
	}
	sup.Unwatch(srv.ID)
	newPID, _, _ := srv.Status()
	if err := srv.Remove(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(srv.Dir); !os.IsNotExist(err) {
		t.Fatalf("directory left: %v", err)
	}
	if daemon.ReadProcess(newPID) != nil {
		t.Fatal("process left")
	}
}
