// Package outbound is the one destination policy for connections the appliance makes on a tenant's
// behalf (import sources now; webhooks and integrations later). It is checked when dialing, on the
// addresses a name resolved to, so a name that resolves somewhere else later (DNS rebinding) gains
// nothing: the address checked is the address dialed.
//
// By default it refuses loopback, link-local (cloud metadata among it), unspecified, multicast and
// broadcast addresses, and every address of this machine (its interface addresses, read at dial time):
// the host's own services are not the tenants'. Private ranges are allowed, for self-hosters who import
// from their LAN. The operator's deny list always wins; the allow list lifts the default refusals for its
// ranges (never for the appliance's own listeners and instance ports on this machine's addresses).
package outbound

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The errors a tenant sees: what answered (a closed port, TLS, PostgreSQL, HTTP) is never told apart.
var (
	ErrRefused      = errors.New("refused by the outbound policy")
	ErrCouldNotDial = errors.New("could not connect")
)

// Policy decides where tenant connections may go. The zero value applies the defaults only.
type Policy struct {
	Allow []netip.Prefix // operator ranges freed from the default refusals
	Deny  []netip.Prefix // operator ranges always refused
	// OwnPorts are the appliance's listener ports and instance port range, refused on this machine's
	// addresses whatever Allow says.
	OwnPorts []PortRange
	// Local reports whether an address is this machine's (default: loopback or an interface address).
	Local func(netip.Addr) bool
	// Resolver resolves names (default net.DefaultResolver).
	Resolver *net.Resolver
	Timeout  time.Duration // dial timeout (default 10s)
}

// PortRange is an inclusive range of ports.
type PortRange struct{ First, Last int }

func (r PortRange) has(p int) bool { return p >= r.First && p <= r.Last }

// metadata are cloud instance-metadata addresses outside link-local.
var metadata = []netip.Prefix{
	netip.MustParsePrefix("fd00:ec2::254/128"),  // AWS over IPv6
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local: AWS, GCP, Azure, OpenStack metadata
	netip.MustParsePrefix("255.255.255.255/32"), // broadcast
	netip.MustParsePrefix("0.0.0.0/8"),          // "this network"
}

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// ParsePrefixes reads a comma-separated list of CIDRs or addresses (an address is its /32 or /128).
func ParsePrefixes(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR nor an IP address", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

func within(ps []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}

// Check says whether a connection to addr:port is allowed (nil) or refused (ErrRefused, wrapped with
// the reason for the appliance's log; tenants see only ErrRefused's text).
func (p *Policy) Check(addr netip.Addr, port int) error {
	addr = addr.Unmap()
	// An IPv4 address reached through NAT64 (64:ff9b::/96) is judged as that IPv4 address.
	if nat64.Contains(addr) {
		b := addr.As16()
		if err := p.Check(netip.AddrFrom4([4]byte(b[12:16])), port); err != nil {
			return err
		}
	}
	if within(p.Deny, addr) {
		return refusal(addr, "is in the operator's deny list (--outbound-deny)")
	}
	if p.isLocal(addr) && slices.ContainsFunc(p.OwnPorts, func(r PortRange) bool { return r.has(port) }) {
		return refusal(addr, fmt.Sprintf("port %d is the appliance's own", port))
	}
	if within(p.Allow, addr) {
		return nil
	}
	switch {
	case addr.IsLoopback():
		return refusal(addr, "is a loopback address")
	case addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() || within(metadata, addr):
		return refusal(addr, "is a link-local or cloud metadata address")
	case addr.IsUnspecified() || addr.IsMulticast() || addr.IsInterfaceLocalMulticast():
		return refusal(addr, "is not a host address (unspecified or multicast)")
	case p.isLocal(addr):
		return refusal(addr, "is an address of this machine")
	}
	return nil
}

func (p *Policy) isLocal(a netip.Addr) bool {
	if a.IsLoopback() || a.IsUnspecified() {
		return true
	}
	if p.Local != nil {
		return p.Local(a)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == a {
				return true
			}
		}
	}
	return false
}

// Resolve returns the allowed addresses of host (an IP or a name), or ErrRefused when it names only
// refused ones, or ErrCouldNotDial when it does not resolve.
func (p *Policy) Resolve(ctx context.Context, host string, port int) ([]netip.Addr, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		addrs = []netip.Addr{a}
	} else {
		r := p.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		got, err := r.LookupNetIP(ctx, "ip", host)
		if err != nil || len(got) == 0 {
			return nil, fmt.Errorf("%w: %s does not resolve", ErrCouldNotDial, host)
		}
		addrs = got
	}
	var ok []netip.Addr
	var refusal error
	for _, a := range addrs {
		if err := p.Check(a, port); err != nil {
			refusal = err
			continue
		}
		ok = append(ok, a.Unmap())
	}
	if len(ok) == 0 {
		return nil, refusal
	}
	return ok, nil
}

// DialContext connects to address (host:port) through the policy: the name is resolved, every address
// checked, and the socket checked again on the address it really connects to.
func (p *Policy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCouldNotDial, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("%w: bad port %q", ErrCouldNotDial, portStr)
	}
	addrs, err := p.Resolve(ctx, host, port)
	if err != nil {
		return nil, err
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	d := &net.Dialer{Timeout: timeout, Control: func(_, raddr string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(raddr)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRefused, err)
		}
		return p.Check(ap.Addr(), int(ap.Port()))
	}}
	var last error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		if errors.Is(err, ErrRefused) {
			return nil, err
		}
		last = err
	}
	return nil, fmt.Errorf("%w: %v", ErrCouldNotDial, last)
}

// Refusal is the policy's refusal of an address: Error names the address (for the appliance's log),
// Why only the rule (for a tenant who named the destination, as when saving a webhook URL).
type Refusal struct {
	Addr netip.Addr
	Rule string
}

func refusal(a netip.Addr, rule string) error { return &Refusal{Addr: a, Rule: rule} }

func (r *Refusal) Error() string        { return fmt.Sprintf("%s: %s %s", ErrRefused, r.Addr, r.Rule) }
func (r *Refusal) Is(target error) bool { return target == ErrRefused }

// Why is the rule a refusal applied ("is a loopback address"), without the address; "" for other errors.
func Why(err error) string {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Rule
	}
	return ""
}

// Public is the message a tenant may see for an error of a connection made through the policy: whether
// the policy refused it, else only that it could not connect (never what answered, nor why).
func Public(err error) string {
	if errors.Is(err, ErrRefused) {
		return ErrRefused.Error()
	}
	return ErrCouldNotDial.Error()
}
