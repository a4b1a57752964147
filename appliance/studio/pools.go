package studio

import (
	"context"
	"crypto/tls"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/theappliance/appliance/appliance/pgstat"
)

// Target is where and as whom a project's studio sessions connect.
type Target struct {
	Host     string // 127.0.0.1: the instance's own port, not PgBouncer (sessions carry state between statements)
	Port     int
	Database string
	User     string
	Password string
	TLS      *tls.Config
	// Timeout is the statement timeout of the sessions (statement_timeout); the caller's context is cut a
	// little later, so a query that turned the timeout off is still cancelled.
	Timeout time.Duration
}

// Pool sizes: a project's studio holds at most MaxConns sessions on its server (they count against the
// project's connection limit), closes a session idle for IdleTime and forgets an unused pool after
// PoolIdleTime.
const (
	MaxConns     = 4
	IdleTime     = 30 * time.Second
	PoolIdleTime = 2 * time.Minute
)

// Pools holds one pool per project, made on first use and replaced when its target changes (a rotated
// credential, a new port, another timeout).
type Pools struct {
	mu    sync.Mutex
	pools map[string]*entry
	stop  chan struct{}
	once  sync.Once
}

type entry struct {
	target Target
	pool   *pgxpool.Pool
	used   time.Time
}

// NewPools starts the janitor that closes pools nobody used for PoolIdleTime.
func NewPools() *Pools {
	p := &Pools{pools: map[string]*entry{}, stop: make(chan struct{})}
	go p.janitor()
	return p
}

func (p *Pools) janitor() {
	t := time.NewTicker(PoolIdleTime / 4)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.mu.Lock()
			for key, e := range p.pools {
				if now.Sub(e.used) > PoolIdleTime && e.pool.Stat().AcquiredConns() == 0 {
					delete(p.pools, key)
					go e.pool.Close()
				}
			}
			p.mu.Unlock()
		}
	}
}

// Acquire returns a session on the project's server (Release it when done).
func (p *Pools) Acquire(ctx context.Context, key string, t Target) (*pgxpool.Conn, error) {
	pool, err := p.pool(key, t)
	if err != nil {
		return nil, err
	}
	return pool.Acquire(ctx)
}

func (p *Pools) pool(key string, t Target) (*pgxpool.Pool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.pools[key]; ok {
		if sameTarget(e.target, t) {
			e.used = time.Now()
			return e.pool, nil
		}
		delete(p.pools, key)
		go e.pool.Close()
	}
	cfg, err := poolConfig(t)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	p.pools[key] = &entry{target: t, pool: pool, used: time.Now()}
	return pool, nil
}

func sameTarget(a, b Target) bool {
	return a.Host == b.Host && a.Port == b.Port && a.Database == b.Database && a.User == b.User &&
		a.Password == b.Password && a.Timeout == b.Timeout
}

// Forget drops a project's pool (its server is going away, or its database is being replaced): the next
// Acquire makes a new one, and the old one closes once its sessions in use are released.
func (p *Pools) Forget(key string) {
	p.mu.Lock()
	e, ok := p.pools[key]
	delete(p.pools, key)
	p.mu.Unlock()
	if ok {
		go e.pool.Close()
	}
}

// Close closes every pool and stops the janitor.
func (p *Pools) Close() {
	p.once.Do(func() { close(p.stop) })
	p.mu.Lock()
	pools := p.pools
	p.pools = map[string]*entry{}
	p.mu.Unlock()
	for _, e := range pools {
		e.pool.Close()
	}
}

// Stats counts the pools and their open sessions (benchmarks and tests of shrinking).
func (p *Pools) Stats() (pools, conns int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.pools {
		pools++
		conns += int(e.pool.Stat().TotalConns())
	}
	return pools, conns
}

// poolConfig: sessions start with the studio's settings (DISCARD ALL after a use returns them to those:
// startup parameters are a session's defaults), cancel their statement on the server when the caller's
// context ends, look for a vanished client every second, and refuse a message over MaxMessageBytes (limit.go).
func poolConfig(t Target) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig("connect_timeout=10")
	if err != nil {
		return nil, err
	}
	cc := cfg.ConnConfig
	cc.Host, cc.Port, cc.Database, cc.User, cc.Password = t.Host, uint16(t.Port), t.Database, t.User, t.Password
	cc.TLSConfig, cc.Fallbacks = t.TLS, nil
	cc.RuntimeParams = map[string]string{
		"application_name":                    "appliance studio",
		"TimeZone":                            "UTC",
		"DateStyle":                           "ISO, MDY",
		"IntervalStyle":                       "iso_8601",
		"bytea_output":                        "hex",
		"statement_timeout":                   strconv.FormatInt(t.Timeout.Milliseconds(), 10),
		"idle_in_transaction_session_timeout": strconv.FormatInt(t.Timeout.Milliseconds(), 10),
		"client_connection_check_interval":    "1000",
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.BeforeConnect = watchSizes
	cc.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, CancelRequestDelay: 0, DeadlineDelay: 2 * time.Second}
	}
	cfg.MaxConns, cfg.MinConns = MaxConns, 0
	cfg.MaxConnIdleTime, cfg.HealthCheckPeriod = IdleTime, IdleTime/2
	cfg.MaxConnLifetime = 30 * time.Minute
	// A session goes back to the pool only after DISCARD ALL (whatever the text SET, created or locked is
	// gone), unless its use provably left nothing (clean.go); a failure destroys it.
	cfg.AfterRelease = func(c *pgx.Conn) bool {
		if takeKept(c.PgConn()) {
			return true
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.PgConn().Exec(ctx, pgstat.InternalMarker+"DISCARD ALL").Close() == nil
	}
	return cfg, nil
}
