// Package redis drives the redis-server of a project's key-value store: its configuration and its users.
// A store listens on a unix socket only (no TCP port); the appliance's front authenticates tenants and
// connects them as the store's tenant user, whose rights are the store's own Redis ACLs — commands that
// would change or stop the server are refused by Redis itself, not by a list in the proxy. Only SHA-256
// hashes of secrets are written (ACL "#<hex>" passwords).
package redis

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
)

// MaxMemoryPolicy evicts the keys with a TTL first when maxmemory is reached (the API's
// api.KVEvictionVolatileLRU: appliance/kv checks they are the same at compile time).
const MaxMemoryPolicy = "volatile-lru"

// Users of a store.
const (
	TenantUser = "tenant"    // what the tenant's token logs in as
	AdminUser  = "appliance" // the appliance's own (flush, health, rotation)
)

// TenantRights are the tenant user's ACL rules: every command and key, minus the administrative and
// dangerous categories (CONFIG, SHUTDOWN, DEBUG, MODULE, REPLICAOF, ACL, SAVE/BGSAVE, MONITOR, MIGRATE,
// CLIENT KILL …), plus back the few of those a store's user expects (Upstash allows them too).
var TenantRights = []string{"~*", "&*", "+@all", "-@admin", "-@dangerous",
	"+flushdb", "+flushall", "+keys", "+info", "+sort", "+sort_ro",
	"+client|setname", "+client|getname", "+client|id", "+client|info", "+client|reply",
	"+client|tracking", "+client|trackinginfo", "+client|caching", "+client|getredir"}

// Config is one store's server configuration. Its files live in Dir: redis.conf, users.acl, the socket,
// the pid file, the log and the RDB snapshot.
type Config struct {
	Dir         string // absolute
	MaxMemoryMB int    // maxmemory; evicts keys with a TTL first (volatile-lru)
	TokenHash   string // SHA-256 hex of the tenant's token
	AdminHash   string // SHA-256 hex of the appliance user's password
}

// Hash is the SHA-256 hex of a secret, as the ACL file holds it.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func (c Config) path(name string) string { return filepath.Join(c.Dir, name) }

// SocketPath is where the server listens.
func (c Config) SocketPath() string { return c.path("redis.sock") }

// PidPath is the server's pid file.
func (c Config) PidPath() string { return c.path("redis.pid") }

// RDBPath is the server's RDB snapshot (dbfilename).
func (c Config) RDBPath() string { return c.path(rdbName) }

const rdbName = "dump.rdb"

// ConfPath and ACLPath are the files written from the Config.
func (c Config) ConfPath() string { return c.path("redis.conf") }
func (c Config) ACLPath() string  { return c.path("users.acl") }

// Conf is redis.conf: a unix socket only, daemonized, RDB snapshots in Dir, no debug or module commands,
// users from users.acl.
func (c Config) Conf() []byte {
	lines := []string{
		"port 0",
		"unixsocket " + c.SocketPath(),
		"unixsocketperm 700",
		"daemonize yes",
		"pidfile " + c.PidPath(),
		"logfile " + c.path("redis.log"),
		"dir " + c.Dir,
		"dbfilename " + rdbName,
		"save 900 1 300 10 60 10000",
		"appendonly no",
		fmt.Sprintf("maxmemory %dmb", c.MaxMemoryMB),
		"maxmemory-policy " + MaxMemoryPolicy,
		"aclfile " + c.ACLPath(),
		"enable-debug-command no",
		"enable-module-command no",
		"enable-protected-configs no",
		"protected-mode yes",
	}
	return []byte(strings.Join(lines, "\n") + "\n")
}

// ACL is users.acl: default off, the appliance's user with every right, the tenant's with TenantRights.
func (c Config) ACL() []byte {
	return []byte(strings.Join([]string{
		"user default off nopass -@all",
		"user " + AdminUser + " on #" + c.AdminHash + " ~* &* +@all",
		"user " + TenantUser + " on #" + c.TokenHash + " " + strings.Join(TenantRights, " "),
	}, "\n") + "\n")
}
