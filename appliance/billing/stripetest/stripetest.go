// Package stripetest runs Stripe's own API mock, stripe-mock (built by appliance/testtools), for tests of
// the billing provider: stripe-go talks to it as to Stripe's API. It answers every documented endpoint
// with its fixtures (reflecting some of the request's fields, such as a customer's e-mail), keeps no
// state and makes a new id for every object it creates.
package stripetest

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/theappliance/appliance/appliance/testtools"
)

// Mock is a running stripe-mock on a loopback port.
type Mock struct {
	URL string // http://127.0.0.1:port, Stripe's API base
	log string
}

// Start starts stripe-mock and stops it at the test's end. It listens on ports the system picks (HTTP, and
// the HTTPS it always serves too), named in its log.
func Start(t testing.TB) *Mock {
	t.Helper()
	bin := testtools.StripeMock.Path()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("stripe-mock is not built (the package's TestMain builds it: testtools.Main(m, testtools.StripeMock)): %v", err)
	}
	m := &Mock{log: filepath.Join(t.TempDir(), "stripe-mock.log")}
	if err := m.start(t, bin); err != nil {
		t.Fatal(err)
	}
	return m
}

var listening = regexp.MustCompile(`Listening for HTTP at address: (\S+)`)

func (m *Mock) start(t testing.TB, bin string) error {
	logf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	exit := make(chan error, 1)
	go func() { exit <- cmd.Wait() }()
	t.Cleanup(func() {
		if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("stop stripe-mock: %v", err)
		}
		<-exit
	})
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if m.URL == "" {
			if sub := listening.FindStringSubmatch(m.logTail()); sub != nil {
				m.URL = "http://" + sub[1]
			}
		}
		if m.URL != "" {
			if resp, err := http.Get(m.URL + "/v1/customers"); err == nil {
				resp.Body.Close()
				return nil
			}
		}
		select {
		case err := <-exit:
			exit <- err // for the cleanup
			return fmt.Errorf("stripe-mock exited (%v): %s", err, m.logTail())
		case <-deadline:
			return fmt.Errorf("stripe-mock does not answer: %s", m.logTail())
		case <-tick.C:
		}
	}
}

func (m *Mock) logTail() string {
	b, _ := os.ReadFile(m.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
