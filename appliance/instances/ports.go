package instances

import (
	"net"
	"strconv"
)

// Bindable reports whether port can be bound on host ("" for 127.0.0.1) now. Which ports are free of
// instances is the records' concern (the caller allocates in the transaction that stores them); this is
// the machine's side.
func Bindable(host string, port int) bool {
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}
