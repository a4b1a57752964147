package cmd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/webhook"
)

var _ = registerClientGroup("webhooks", []string{"webhook"}, "Manage the organization's webhook endpoints and their deliveries",
	newWebhooksListCmd, newWebhooksCreateCmd, newWebhooksDeleteCmd, newWebhooksRotateCmd,
	newWebhooksDeliveriesCmd, newWebhooksTestCmd, newWebhooksRedeliverCmd, newWebhooksListenCmd)

// newWebhooksListenCmd is a receiver for trying webhooks out: it verifies each delivery's signature with
// the endpoint's secret, prints it, and answers 204 (401 when the signature does not verify).
func newWebhooksListenCmd(*clientOpts) *cobra.Command {
	var addr string
	secret := envFlag{name: "secret", env: "APPLIANCE_WEBHOOK_SECRET", usage: "the endpoint's signing secret (APPLIANCE_WEBHOOK_SECRET)"}
	cmd := &cobra.Command{
		Use:   "listen",
		Short: "Receive deliveries on this machine: verify each signature, print it, answer 204",
		Long: `Run a webhook receiver for trying endpoints out. Each delivery's signature is checked with --secret
(the endpoint's whsec_ secret; APPLIANCE_WEBHOOK_SECRET) and its timestamp must be within 5 minutes;
a delivery that verifies is printed and answered 204, one that does not is answered 401. The appliance
reaches a receiver on this machine only when the operator allows it: appliance up --outbound-allow 127.0.0.0/8.`,
		Example: `  appliance webhooks listen --listen 127.0.0.1:9000 --secret whsec_...`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			secret.resolve(nil)
			if !strings.HasPrefix(secret.value, webhook.SecretPrefix) {
				return errors.New("--secret whsec_... is required (the secret printed by webhooks create or rotate-secret)")
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			fmt.Fprintf(c.ErrOrStderr(), "Receiving webhooks on http://%s/ (Ctrl-C stops)\n", ln.Addr())
			var mu sync.Mutex
			srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
				if err != nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if err := webhook.Verify(secret.value, r.Header, body, time.Now(), 5*time.Minute); err != nil {
					fmt.Fprintf(out, "REFUSED %s %s: %v\n", r.Header.Get("webhook-id"), r.URL.Path, err)
					http.Error(w, err.Error(), http.StatusUnauthorized)
					return
				}
				var ev struct {
					Type string `json:"type"`
				}
				_ = json.Unmarshal(body, &ev)
				fmt.Fprintf(out, "verified %s %s %s\n", r.Header.Get("webhook-id"), ev.Type, body)
				w.WriteHeader(http.StatusNoContent)
			})}
			ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt)
			defer stop()
			go func() { <-ctx.Done(); srv.Close() }()
			if err := srv.Serve(ln); ctx.Err() == nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "listen", "127.0.0.1:9000", "address to receive on")
	secret.bind(cmd.Flags())
	return cmd
}

func hooksPath(org string) string { return "/v1/organizations/" + seg(org) + "/webhook-endpoints" }

func newWebhooksListCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.WebhookEndpointList]{
		Use: "list", Aliases: []string{"ls"}, Short: "List webhook endpoints with their health", Org: true,
		Path:    func(x *call) string { return hooksPath(x.org) },
		Columns: []string{"ID", "URL", "EVENTS", "HEALTH", "DESCRIPTION"},
		Rows: func(l *api.WebhookEndpointList) [][]string {
			return rowsOf(l.WebhookEndpoints, func(e api.WebhookEndpoint) []string {
				return []string{e.ID, e.URL, eventsText(e.EventTypes), e.Health, firstNonEmpty(e.Description, "-")}
			})
		},
	})
}

// eventsText is an endpoint's event filter as the commands print it: "all" when empty.
func eventsText(types []api.EventType) string {
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = string(t)
	}
	return firstNonEmpty(strings.Join(names, ","), "all")
}

// printSecret prints an endpoint's signing secret alone on standard output (the details on standard
// error), so SECRET=$(appliance webhooks create ...) works.
func printSecret(verb string) func(x *call, res *api.WebhookEndpointWithSecret) error {
	return func(x *call, res *api.WebhookEndpointWithSecret) error {
		e, errw := res.WebhookEndpoint, x.c.ErrOrStderr()
		fmt.Fprintf(errw, "%s webhook endpoint %s → %s (events: %s)\n", verb, e.ID, e.URL, eventsText(e.EventTypes))
		fmt.Fprintln(errw, "Its signing secret follows; this is the only time it is shown. Verify deliveries with it (Standard Webhooks).")
		fmt.Fprintln(x.out(), res.PlaintextSecret)
		return nil
	}
}

func newWebhooksCreateCmd(o *clientOpts) *cobra.Command {
	var (
		url, desc string
		events    []string
	)
	return newAPICmd(o, apiCmd[api.WebhookEndpointWithSecret]{
		Use: "create", Short: "Register a webhook endpoint; its signing secret is printed once", Org: true,
		Example: `  appliance webhooks create --url https://example.com/hooks --event-type job.completed,job.failed`,
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&url, "url", "", "the receiver's absolute http(s) URL (required)")
			f.StringVar(&desc, "description", "", "a note for people")
			f.StringSliceVar(&events, "event-type", nil, "event types to deliver; repeat or separate with commas (default: all)")
		},
		Validate: func(*call) error {
			if strings.TrimSpace(url) == "" {
				return errors.New("--url is required")
			}
			return nil
		},
		Method: http.MethodPost,
		Path:   func(x *call) string { return hooksPath(x.org) },
		Body: func(*call) any {
			req := api.CreateWebhookEndpointRequest{URL: url, Description: desc}
			for _, e := range events {
				req.EventTypes = append(req.EventTypes, api.EventType(e))
			}
			return req
		},
		Print: printSecret("Created"),
	})
}

func newWebhooksDeleteCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[struct{}]{
		Use: "delete ENDPOINT_ID", Short: "Delete a webhook endpoint and its deliveries", Args: cobra.ExactArgs(1), Org: true,
		Method: http.MethodDelete, NoAnswer: true,
		Path:  func(x *call) string { return hooksPath(x.org) + "/" + seg(x.args[0]) },
		Print: func(x *call, _ *struct{}) error { return x.printf("Deleted webhook endpoint %s.\n", x.args[0]) },
	})
}

func newWebhooksRotateCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.WebhookEndpointWithSecret]{
		Use: "rotate-secret ENDPOINT_ID", Args: cobra.ExactArgs(1), Org: true,
		Short:  "Issue a new signing secret, printed once (the old one also signs for 24 hours)",
		Method: http.MethodPost,
		Path:   func(x *call) string { return hooksPath(x.org) + "/" + seg(x.args[0]) + "/rotate-secret" },
		Print:  printSecret("Rotated the secret of"),
	})
}

func newWebhooksDeliveriesCmd(o *clientOpts) *cobra.Command {
	var limit int
	return newAPICmd(o, apiCmd[api.WebhookDeliveryList]{
		Use: "deliveries ENDPOINT_ID", Short: "List an endpoint's deliveries and their attempts, newest first",
		Args: cobra.ExactArgs(1), Org: true, JSON: true, JSONHelp: "print the API's JSON answer (with payloads)",
		Flags: func(f *pflag.FlagSet) { f.IntVar(&limit, "limit", 50, "how many deliveries (1 to 200)") },
		Path: func(x *call) string {
			return hooksPath(x.org) + "/" + seg(x.args[0]) + "/deliveries?limit=" + strconv.Itoa(limit)
		},
		Columns: []string{"ID", "EVENT", "STATE", "ATTEMPTS", "STATUS", "LAST ERROR", "NEXT ATTEMPT", "CREATED"},
		Rows: func(l *api.WebhookDeliveryList) [][]string {
			return rowsOf(l.Deliveries, func(d api.WebhookDelivery) []string {
				status := "-"
				if d.ResponseStatus != 0 {
					status = strconv.Itoa(d.ResponseStatus)
				}
				return []string{d.ID, d.EventType, d.State, fmt.Sprintf("%d/%d", d.Attempts, d.MaxAttempts), status,
					firstNonEmpty(d.LastError, "-"), timeOr(d.NextAttemptAt, "-"), stamp(d.CreatedAt)}
			})
		},
	})
}

func newWebhooksTestCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.WebhookDeliveryResult]{
		Use: "test ENDPOINT_ID", Short: "Send a signed webhook.test event to an endpoint", Args: cobra.ExactArgs(1), Org: true,
		Method: http.MethodPost,
		Path:   func(x *call) string { return hooksPath(x.org) + "/" + seg(x.args[0]) + "/test" },
		Print: func(x *call, r *api.WebhookDeliveryResult) error {
			return x.printf("Queued test delivery %s; see it with: appliance webhooks deliveries %s\n", r.Delivery.ID, x.args[0])
		},
	})
}

func newWebhooksRedeliverCmd(o *clientOpts) *cobra.Command {
	return newAPICmd(o, apiCmd[api.WebhookDeliveryResult]{
		Use: "redeliver ENDPOINT_ID DELIVERY_ID", Short: "Send a delivery again as a new attempt (the same webhook-id)",
		Args: cobra.ExactArgs(2), Org: true, Method: http.MethodPost,
		Path: func(x *call) string {
			return hooksPath(x.org) + "/" + seg(x.args[0]) + "/deliveries/" + seg(x.args[1]) + "/redeliver"
		},
		Print: func(x *call, r *api.WebhookDeliveryResult) error {
			return x.printf("Queued delivery %s again (attempt %d).\n", r.Delivery.ID, r.Delivery.MaxAttempts)
		},
	})
}
