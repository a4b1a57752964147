package outbound

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
)

func TestCheck(t *testing.T) {
	lan := netip.MustParseAddr("192.168.1.20")
	p := &Policy{
		Allow:    []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.9.0.0/16")},
		Deny:     []netip.Prefix{netip.MustParsePrefix("10.9.9.0/24")},
		OwnPorts: []PortRange{{First: 15432, Last: 17431}, {First: 7443, Last: 7443}},
		Local:    func(a netip.Addr) bool { return a == lan },
	}
	cases := []struct {
		addr  string
		port  int
		allow bool
	}{
		{"203.0.113.7", 5432, true},       // the internet
		{"192.168.1.50", 5432, true},      // the LAN
		{"10.1.2.3", 5432, true},          // private ranges are allowed
		{"127.0.0.2", 5432, false},        // loopback, not in the allow list
		{"127.0.0.1", 5432, true},         // allowed by the operator
		{"127.0.0.1", 15500, false},       // ...but never the appliance's instance ports
		{"127.0.0.1", 7443, false},        // ...nor its API
		{"192.168.1.20", 16000, false},    // nor on this machine's LAN address
		{"192.168.1.20", 5432, false},     // nor any other service of this machine
		{"192.168.1.21", 16000, true},     // another machine's port in the range is fine
		{"::1", 5432, false},              // loopback v6
		{"::ffff:127.0.0.2", 5432, false}, // loopback mapped into v6
		{"169.254.169.254", 80, false},    // metadata
		{"fd00:ec2::254", 80, false},      // metadata v6
		{"100.100.100.200", 80, false},    // metadata (Alibaba)
		{"fe80::1", 5432, false},          // link-local
		{"0.0.0.0", 5432, false},          // unspecified
		{"224.0.0.1", 5432, false},        // multicast
		{"10.9.9.9", 5432, false},         // denied: deny wins over allow
		{"10.9.1.1", 5432, true},
		{"64:ff9b::7f00:2", 5432, false},   // loopback through NAT64
		{"64:ff9b::a9fe:a9fe", 80, false},  // metadata through NAT64
		{"64:ff9b::cb00:7107", 5432, true}, // 203.0.113.7 through NAT64
	}
	for _, c := range cases {
		err := p.Check(netip.MustParseAddr(c.addr), c.port)
		if (err == nil) != c.allow || (err != nil && !errors.Is(err, ErrRefused)) {
			t.Errorf("%s:%d: %v, want allowed %v", c.addr, c.port, err, c.allow)
		}
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes(" 10.0.0.0/8, 192.168.1.7 ,::1")
	if err != nil || len(got) != 3 || got[1].String() != "192.168.1.7/32" || got[2].String() != "::1/128" {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := ParsePrefixes("10.0.0.0/8,nonsense"); err == nil {
		t.Fatal("nonsense accepted")
	}
}

// TestDialChecksTheResolvedAddress: a name that resolves to a refused address is refused at dial time
// (the check is on the address, not the name), and a closed port is "could not connect" only.
func TestDialChecksTheResolvedAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	p := &Policy{}
	if _, err := p.DialContext(context.Background(), "tcp", net.JoinHostPort("localhost", itoa(port))); !errors.Is(err, ErrRefused) {
		t.Fatalf("localhost by name: %v", err)
	}
	p.Allow = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	c, err := p.DialContext(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", itoa(port)))
	if err != nil {
		t.Fatalf("allowed: %v", err)
	}
	c.Close()
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln2.Addr().(*net.TCPAddr).Port
	ln2.Close()
	_, err = p.DialContext(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", itoa(closed)))
	if !errors.Is(err, ErrCouldNotDial) || Public(err) != "could not connect" {
		t.Fatalf("closed port: %v", err)
	}
}

func itoa(n int) string {
	return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(n)).String()[len("0.0.0.0:"):]
}

// TestRefusesThisMachinesAddresses: a service listening on one of this machine's own interface addresses
// (not loopback, not an appliance port) is refused by default, and reachable once --outbound-allow names
// it. Before, only the appliance's own ports were refused there, so tenants reached the host's services.
func TestRefusesThisMachinesAddresses(t *testing.T) {
	var local netip.Addr
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			a, _ := netip.AddrFromSlice(n.IP)
			if a = a.Unmap(); a.IsValid() && !a.IsLoopback() && !a.IsLinkLocalUnicast() {
				local = a
				break
			}
		}
	}
	if !local.IsValid() {
		t.Fatalf("this machine has no interface address but loopback and link-local ones: %v", addrs)
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(local, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	target := ln.Addr().String()
	p := &Policy{}
	if c, err := p.DialContext(t.Context(), "tcp", target); !errors.Is(err, ErrRefused) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("%s, an address of this machine: %v, want refused", target, err)
	}
	p.Allow = []netip.Prefix{netip.PrefixFrom(local, local.BitLen())}
	c, err := p.DialContext(t.Context(), "tcp", target)
	if err != nil {
		t.Fatalf("%s allowed by --outbound-allow: %v", target, err)
	}
	c.Close()
}
