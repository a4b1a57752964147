package kvproxy_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/theappliance/appliance/appliance"
	aredis "github.com/theappliance/appliance/appliance/redis"
	"github.com/theappliance/appliance/store"
)

// TestStatusSaysWhenAStoreRefusesWrites: a store whose snapshot cannot be written (its directory made
// unwritable for the unprivileged user redis-server runs as, as a full disk would) answers writes with
// MISCONF once a background save fails; /status's key-value component then says so (degraded, how many
// stores and why), and is operational again once a save succeeds.
func TestStatusSaysWhenAStoreRefusesWrites(t *testing.T) {
	t.Parallel()
	k := newKVEnv(t)
	ctx := t.Context()
	prj := k.project(t, "misconf")
	kvs := k.store(t, prj)
	c := k.client(t, *kvs.Token, 2)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	k.Svc.Probe.Register("kv-stores", k.Svc.KV().Health)
	component := func() appliance.Component {
		t.Helper()
		for _, c := range k.Svc.Status(ctx).Components {
			if c.Name == "kv-stores" {
				return c
			}
		}
		t.Fatal("/status has no kv-stores component")
		return appliance.Component{}
	}
	if c := component(); c.Status != appliance.StatusOperational {
		t.Fatalf("before: %+v", c)
	}

	var rec *store.KVStore
	if err := k.DB.View(func(tx *store.Tx) (err error) {
		rec, err = store.KVStores.First(tx, store.KVStoresByProject, prj)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pw, err := k.Box.Open(rec.SealedAdmin)
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Network: "unix", Addr: filepath.Join(rec.Dir, "redis.sock"),
		Username: aredis.AdminUser, Password: string(pw), MaxRetries: -1})
	t.Cleanup(func() { admin.Close() })
	bgsave := func() bool { // false while one is in progress
		err := admin.BgSave(ctx).Err()
		if err != nil && !strings.Contains(err.Error(), "in progress") {
			t.Fatal(err)
		}
		return err == nil
	}

	if err := os.Chmod(rec.Dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(rec.Dir, 0o700) })
	waitFor(t, bgsave)
	waitFor(t, func() bool { return component().Status != appliance.StatusOperational })
	got := component()
	if got.Status != appliance.StatusDegraded || !strings.Contains(got.Message, "1 of 1 stores refuse writes (MISCONF)") ||
		!strings.Contains(got.Message, rec.ID) {
		t.Fatalf("while the store cannot save: %+v", got)
	}
	if err := c.Set(ctx, "k", "w", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "MISCONF") {
		t.Fatalf("a write to a store that cannot save: %v", err)
	}
	if st := k.Svc.Status(context.Background()).Public(); st.Status != appliance.StatusDegraded {
		t.Fatalf("the public /status: %+v", st)
	}

	if err := os.Chmod(rec.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	waitFor(t, bgsave)
	waitFor(t, func() bool { return component().Status == appliance.StatusOperational })
	if err := c.Set(ctx, "k", "w", 0).Err(); err != nil {
		t.Fatalf("a write once the store saves again: %v", err)
	}
}
