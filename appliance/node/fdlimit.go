package node

import (
	"fmt"
	"syscall"
)

// fdReserve is the file descriptors kept for everything but client connections: the metadata store,
// logs, the connections to instances and stores the appliance makes itself, the supervisor's pipes.
const fdReserve = 1024

// raiseFileLimit raises the soft RLIMIT_NOFILE to the hard limit (the Go runtime does so too on Linux;
// children get the original soft limit back) and returns it.
func raiseFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("read the open-files limit: %w", err)
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, fmt.Errorf("raise the open-files limit to %d: %w", l.Max, err)
		}
	}
	return l.Cur, nil
}

// fdBudget fits the connection caps into limit descriptors, so that no listener can starve the others
// (or the appliance's own work) of them: the API's connections take one descriptor each, a key-value
// front's two (the client's and the store's), for each of the two fronts, and fdReserve stay free. When
// the key-value fronts' cap does not fit, it is lowered to what does (changed says so); when not even
// 64 connections per front fit, or the API's cap does not, it is an error naming what to change.
func fdBudget(limit uint64, apiMax, kvMax int) (kvFit int, changed bool, err error) {
	if apiMax < 1 || kvMax < 1 {
		return 0, false, fmt.Errorf("connection caps must be at least 1 (--max-connections %d, --kv-max-connections %d)", apiMax, kvMax)
	}
	free := int64(limit) - fdReserve - int64(apiMax)
	fit := free / 4
	if fit < 64 {
		return 0, false, fmt.Errorf("the open-files limit %d cannot hold --max-connections %d, 64 connections per key-value front and %d descriptors of reserve: raise it (ulimit -n, systemd LimitNOFILE=) or lower --max-connections",
			limit, apiMax, fdReserve)
	}
	if int64(kvMax) > fit {
		return int(fit), true, nil
	}
	return kvMax, false, nil
}
