package instances

import (
	"net"
	"strconv"
)

// Bindable reports whether port can be bound now on host ("" for 127.0.0.1) and on 127.0.0.1, which a
// server listens on beside any other host (its admin connections come over loopback; a PostgreSQL that
// binds one of its addresses only warns about the other, so a port taken on loopback alone would give a
// server that starts and that the appliance cannot reach). Which ports are free of instances is the
// records' concern (the caller allocates in the transaction that stores them); this is the machine's side.
func Bindable(host string, port int) bool {
	hosts := []string{"127.0.0.1"}
	switch host {
	case "", "localhost", "127.0.0.1":
	case "*":
		hosts = []string{"0.0.0.0"}
	case "0.0.0.0":
		hosts = []string{host}
	default:
		hosts = append(hosts, host)
	}
	for _, h := range hosts {
		ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		defer ln.Close()
	}
	return true
}
