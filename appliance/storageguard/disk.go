package storageguard

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/store"
)

// The disk reserve (docs/api-decisions.md "Storage limits held, ephemeral bounds, disk reserve"): the free
// space of the data directory's file system under which the appliance is degraded. It then keeps what is
// left for its metadata and the servers' WAL: every project's database is put read-only (the storage
// guard's lock), the API refuses the requests that write (507), scheduled backups and spare clusters wait,
// and /healthz, /status and the log say so. It serves reads and deletions meanwhile.

// DefaultDiskReserve is the reserve when the operator names none.
const DefaultDiskReserve = 1 << 30

// diskProbeEvery is how often the metadata store's writes are tried (a small write to its meta bucket).
const diskProbeEvery = 10 * time.Second

// diskMonitor is the last reading of the file system and of the store's write probe.
type diskMonitor struct {
	mu       sync.Mutex
	reserve  int64
	free     int64 // -1: not read yet (or unreadable)
	low      bool
	probeErr error
	probedAt time.Time
}

// setDiskReserve sets the free space under which the appliance is degraded (New: Config.DiskReserve; 0:
// DefaultDiskReserve).
func (g *Guard) setDiskReserve(n int64) {
	if n <= 0 {
		n = DefaultDiskReserve
	}
	g.disk.mu.Lock()
	g.disk.reserve = n
	g.disk.mu.Unlock()
}

// DiskState is what the disk monitor last read.
type DiskState struct {
	FreeBytes    int64 // -1: unknown
	ReserveBytes int64
	Low          bool  // under the reserve (or unreadable): degraded
	WriteErr     error // the metadata store's last write probe failed
}

// Disk is the disk monitor's last reading.
func (g *Guard) Disk() DiskState {
	g.disk.mu.Lock()
	defer g.disk.mu.Unlock()
	return DiskState{FreeBytes: g.disk.free, ReserveBytes: g.disk.reserve, Low: g.disk.low, WriteErr: g.disk.probeErr}
}

// FreeBytes is the space of dir's file system that unprivileged users may take (doctor reads it too).
func FreeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// CheckDisk reads the free space of the data directory's file system (and, every diskProbeEvery, tries a
// write to the metadata store) and logs each change between degraded and not.
func (g *Guard) CheckDisk() DiskState {
	g.disk.mu.Lock()
	probe := time.Since(g.disk.probedAt) >= diskProbeEvery
	g.disk.mu.Unlock()
	free, err := FreeBytes(g.dataDir)
	var perr error
	if probe {
		perr = g.db.Update(func(tx *store.Tx) error { return tx.SetMeta("write_probe", g.now().Format(time.RFC3339Nano)) })
	}
	g.disk.mu.Lock()
	defer g.disk.mu.Unlock()
	was := g.disk.low
	if err != nil {
		free = -1
	}
	g.disk.free = free
	g.disk.low = err != nil || free < g.disk.reserve
	if probe {
		g.disk.probeErr, g.disk.probedAt = perr, time.Now()
	}
	if g.disk.low != was {
		if g.disk.low {
			g.log.Warn("disk: free space under the reserve: degraded (reads served, writes refused, databases read-only)",
				"dir", g.dataDir, "free_bytes", free, "reserve_bytes", g.disk.reserve, "err", err)
		} else {
			g.log.Info("disk: free space back over the reserve: writes accepted again", "dir", g.dataDir,
				"free_bytes", free, "reserve_bytes", g.disk.reserve)
		}
	}
	return DiskState{FreeBytes: free, ReserveBytes: g.disk.reserve, Low: g.disk.low, WriteErr: g.disk.probeErr}
}

// ErrDiskLow is the refusal of what needs disk while the appliance is degraded.
func (g *Guard) ErrDiskLow() error {
	d := g.Disk()
	return &apperr.Error{Kind: apperr.KindInsufficientStorage, Msg: fmt.Sprintf("the appliance is short of disk space (%s free, %s kept in reserve): it serves reads and deletions and refuses writes until space is freed",
		api.FormatBytes(max(0, d.FreeBytes)), api.FormatBytes(d.ReserveBytes))}
}

// RequireDisk is nil unless the appliance is degraded for want of disk.
func (g *Guard) RequireDisk() error {
	if g.Disk().Low {
		return g.ErrDiskLow()
	}
	return nil
}

// DiskHealth is the status page's disk component.
func (g *Guard) DiskHealth(ctx context.Context) (string, string) {
	d := g.Disk()
	switch {
	case d.WriteErr != nil:
		return api.StatusDown, "the metadata store refuses writes: " + d.WriteErr.Error()
	case d.FreeBytes < 0:
		return api.StatusDegraded, "the data directory's free space cannot be read: writes refused"
	case d.Low:
		return api.StatusDegraded, fmt.Sprintf("%s free under %s, less than the %s reserve: reads served, writes refused, databases read-only",
			api.FormatBytes(d.FreeBytes), g.dataDir, api.FormatBytes(d.ReserveBytes))
	}
	return api.StatusOperational, fmt.Sprintf("%s free under %s (reserve %s)", api.FormatBytes(d.FreeBytes), g.dataDir, api.FormatBytes(d.ReserveBytes))
}
