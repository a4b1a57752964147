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
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/webhook"
)

var _ = registerClientCommand(newWebhooksCmd)

func newWebhooksCmd(o *clientOpts) *cobra.Command {
	return groupCmd("webhooks", []string{"webhook"}, "Manage the organization's webhook endpoints and their deliveries",
		newWebhooksListCmd(o), newWebhooksCreateCmd(o), newWebhooksDeleteCmd(o), newWebhooksRotateCmd(o),
		newWebhooksDeliveriesCmd(o), newWebhooksTestCmd(o), newWebhooksRedeliverCmd(o), newWebhooksListenCmd())
}

// newWebhooksListenCmd is a receiver for trying webhooks out: it verifies each delivery's signature with
// the endpoint's secret, prints it, and answers 204 (401 when the signature does not verify).
func newWebhooksListenCmd() *cobra.Command {
	var addr, secret string
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
			if secret == "" {
				secret = os.Getenv("APPLIANCE_WEBHOOK_SECRET")
			}
			if !strings.HasPrefix(secret, webhook.SecretPrefix) {
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
				if err := webhook.Verify(secret, r.Header, body, time.Now(), 5*time.Minute); err != nil {
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
	cmd.Flags().StringVar(&secret, "secret", "", "the endpoint's signing secret (APPLIANCE_WEBHOOK_SECRET)")
	return cmd
}

func hooksPath(org string) string { return "/v1/organizations/" + seg(org) + "/webhook-endpoints" }

// orgCmd is a command acting in an organization (--org, or the credential's) with args; run gets the
// client and the organization's webhook-endpoints path.
func orgCmd(o *clientOpts, use, short string, args cobra.PositionalArgs, run func(c *cobra.Command, cl *apiClient, hooks string, args []string) error) *cobra.Command {
	var org string
	cmd := &cobra.Command{Use: use, Short: short, Args: args, RunE: func(c *cobra.Command, a []string) error {
		cl, orgID, err := orgClient(c, o, org)
		if err != nil {
			return err
		}
		return run(c, cl, hooksPath(orgID), a)
	}}
	orgFlag(cmd, &org)
	return cmd
}

func newWebhooksListCmd(o *clientOpts) *cobra.Command {
	cmd := orgCmd(o, "list", "List webhook endpoints with their health", cobra.NoArgs, func(c *cobra.Command, cl *apiClient, hooks string, _ []string) error {
		var list appliance.WebhookEndpointList
		if err := cl.do(c.Context(), http.MethodGet, hooks, nil, &list); err != nil {
			return err
		}
		tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tURL\tEVENTS\tHEALTH\tDESCRIPTION")
		for _, e := range list.WebhookEndpoints {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.ID, e.URL, firstNonEmpty(strings.Join(e.EventTypes, ","), "all"), e.Health, firstNonEmpty(e.Description, "-"))
		}
		return tw.Flush()
	})
	cmd.Aliases = []string{"ls"}
	return cmd
}

// printSecret prints an endpoint's signing secret alone on standard output (the details on standard
// error), so SECRET=$(appliance webhooks create ...) works.
func printSecret(c *cobra.Command, verb string, res *appliance.WebhookEndpointWithSecret) {
	e := res.WebhookEndpoint
	fmt.Fprintf(c.ErrOrStderr(), "%s webhook endpoint %s → %s (events: %s)\n", verb, e.ID, e.URL, firstNonEmpty(strings.Join(e.EventTypes, ","), "all"))
	fmt.Fprintln(c.ErrOrStderr(), "Its signing secret follows; this is the only time it is shown. Verify deliveries with it (Standard Webhooks).")
	fmt.Fprintln(c.OutOrStdout(), res.PlaintextSecret)
}

func newWebhooksCreateCmd(o *clientOpts) *cobra.Command {
	var (
		url, desc string
		events    []string
	)
	cmd := orgCmd(o, "create", "Register a webhook endpoint; its signing secret is printed once", cobra.NoArgs, func(c *cobra.Command, cl *apiClient, hooks string, _ []string) error {
		if strings.TrimSpace(url) == "" {
			return errors.New("--url is required")
		}
		body := map[string]any{"url": url, "description": desc, "event_types": events}
		var res appliance.WebhookEndpointWithSecret
		if err := cl.do(c.Context(), http.MethodPost, hooks, body, &res); err != nil {
			return err
		}
		printSecret(c, "Created", &res)
		return nil
	})
	cmd.Example = `  appliance webhooks create --url https://example.com/hooks --event-type job.completed,job.failed`
	f := cmd.Flags()
	f.StringVar(&url, "url", "", "the receiver's absolute http(s) URL (required)")
	f.StringVar(&desc, "description", "", "a note for people")
	f.StringSliceVar(&events, "event-type", nil, "event types to deliver; repeat or separate with commas (default: all)")
	return cmd
}

func newWebhooksDeleteCmd(o *clientOpts) *cobra.Command {
	return orgCmd(o, "delete ENDPOINT_ID", "Delete a webhook endpoint and its deliveries", cobra.ExactArgs(1), func(c *cobra.Command, cl *apiClient, hooks string, args []string) error {
		if err := cl.do(c.Context(), http.MethodDelete, hooks+"/"+seg(args[0]), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(c.OutOrStdout(), "Deleted webhook endpoint %s.\n", args[0])
		return nil
	})
}

func newWebhooksRotateCmd(o *clientOpts) *cobra.Command {
	return orgCmd(o, "rotate-secret ENDPOINT_ID", "Issue a new signing secret, printed once (the old one also signs for 24 hours)", cobra.ExactArgs(1), func(c *cobra.Command, cl *apiClient, hooks string, args []string) error {
		var res appliance.WebhookEndpointWithSecret
		if err := cl.do(c.Context(), http.MethodPost, hooks+"/"+seg(args[0])+"/rotate-secret", nil, &res); err != nil {
			return err
		}
		printSecret(c, "Rotated the secret of", &res)
		return nil
	})
}

func newWebhooksDeliveriesCmd(o *clientOpts) *cobra.Command {
	var (
		limit  int
		asJSON bool
	)
	cmd := orgCmd(o, "deliveries ENDPOINT_ID", "List an endpoint's deliveries and their attempts, newest first", cobra.ExactArgs(1), func(c *cobra.Command, cl *apiClient, hooks string, args []string) error {
		path := hooks + "/" + seg(args[0]) + "/deliveries?limit=" + strconv.Itoa(limit)
		raw, err := cl.doRaw(c.Context(), http.MethodGet, path, nil)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(c.OutOrStdout(), raw)
		}
		var list appliance.WebhookDeliveryList
		if err := decode(http.MethodGet, path, raw, &list); err != nil {
			return err
		}
		printDeliveries(c.OutOrStdout(), list.Deliveries)
		return nil
	})
	cmd.Flags().IntVar(&limit, "limit", 50, "how many deliveries (1 to 200)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON answer (with payloads)")
	return cmd
}

func printDeliveries(w io.Writer, ds []appliance.WebhookDelivery) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tEVENT\tSTATE\tATTEMPTS\tSTATUS\tLAST ERROR\tNEXT ATTEMPT\tCREATED")
	for _, d := range ds {
		status := "-"
		if d.ResponseStatus != 0 {
			status = strconv.Itoa(d.ResponseStatus)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", d.ID, d.EventType, d.State, d.Attempts, d.MaxAttempts, status,
			firstNonEmpty(d.LastError, "-"), timeOr(d.NextAttemptAt, "-"), d.CreatedAt.UTC().Format(time.RFC3339))
	}
	tw.Flush()
}

func newWebhooksTestCmd(o *clientOpts) *cobra.Command {
	return orgCmd(o, "test ENDPOINT_ID", "Send a signed webhook.test event to an endpoint", cobra.ExactArgs(1), func(c *cobra.Command, cl *apiClient, hooks string, args []string) error {
		var res appliance.WebhookDeliveryResult
		if err := cl.do(c.Context(), http.MethodPost, hooks+"/"+seg(args[0])+"/test", nil, &res); err != nil {
			return err
		}
		fmt.Fprintf(c.OutOrStdout(), "Queued test delivery %s; see it with: appliance webhooks deliveries %s\n", res.Delivery.ID, args[0])
		return nil
	})
}

func newWebhooksRedeliverCmd(o *clientOpts) *cobra.Command {
	return orgCmd(o, "redeliver ENDPOINT_ID DELIVERY_ID", "Send a delivery again as a new attempt (the same webhook-id)", cobra.ExactArgs(2), func(c *cobra.Command, cl *apiClient, hooks string, args []string) error {
		var res appliance.WebhookDeliveryResult
		if err := cl.do(c.Context(), http.MethodPost, hooks+"/"+seg(args[0])+"/deliveries/"+seg(args[1])+"/redeliver", nil, &res); err != nil {
			return err
		}
		fmt.Fprintf(c.OutOrStdout(), "Queued delivery %s again (attempt %d).\n", res.Delivery.ID, res.Delivery.MaxAttempts)
		return nil
	})
}
