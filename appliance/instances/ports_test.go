package instances

import (
	"net"
	"testing"
)

// A port taken on loopback only is not bindable for a server that listens on another host too: its
// server binds loopback as well, and would start unreachable to the appliance.
func TestBindableChecksLoopbackToo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	for _, host := range []string{"", "127.0.0.1", "127.0.0.2", "*", "0.0.0.0"} {
		if Bindable(host, taken) {
			t.Errorf("Bindable(%q, %d) with the port taken on 127.0.0.1: true", host, taken)
		}
	}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	for _, host := range []string{"", "127.0.0.2", "*"} {
		if !Bindable(host, port) {
			t.Errorf("Bindable(%q, %d) of a free port: false", host, port)
		}
	}
}
