package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

var _ = registerClientCommand(newEventsCmd)

func newEventsCmd(o *clientOpts) *cobra.Command {
	var (
		after          string
		noFollow, news bool
	)
	return newAPICmd(o, apiCmd[struct{}]{
		Use:   "events PROJECT_ID",
		Short: "Print a project's events as they happen (job ends, project ready, backups …)",
		Long: `Print a project's events: those the log still holds (7 days), then live ones until Ctrl-C. A dropped
connection is resumed after the last event printed (Last-Event-ID), so nothing is missed or repeated.
Each line is "ID TYPE DATA"; with --json, one JSON object {id, type, data} per line.`,
		Example: `  appliance events prj_...
  appliance events prj_... --after 42 --no-follow --json`,
		Args: cobra.ExactArgs(1), OwnJSON: "one JSON object per line",
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&after, "after", "", "start after this event ID (default: every event the log holds)")
			f.BoolVar(&noFollow, "no-follow", false, "print the events the log holds and exit")
			f.BoolVar(&news, "new", false, "skip the events the log holds: print only what happens from now on")
		},
		Stream: func(x *call) (string, string, bool) {
			q := url.Values{}
			if noFollow {
				q.Set("follow", "false")
			}
			if news && after == "" {
				q.Set("skip_backlog", "true") // a reconnect's Last-Event-ID wins over it
			}
			path := projectPath(x.args[0]) + "/events"
			if len(q) > 0 {
				path += "?" + q.Encode()
			}
			return path, after, !noFollow
		},
		Event: func(x *call, ev sseEvent) error {
			if x.json {
				return printJSONLine(x.out(), struct {
					ID   string          `json:"id"`
					Type string          `json:"type"`
					Data json.RawMessage `json:"data"`
				}{ev.ID, ev.Type, ev.Data})
			}
			_, err := fmt.Fprintf(x.out(), "%s %s %s\n", ev.ID, ev.Type, ev.Data)
			return err
		},
	})
}

// followStream hands the events of the stream at path to onEvent (see stream) until it ends; Ctrl-C (or
// the command's context ending) ends it too, and is not an error.
func followStream(c *cobra.Command, cl *apiClient, path, after string, reconnect bool, onEvent func(sseEvent) error) error {
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt)
	defer stop()
	err := cl.stream(ctx, path, after, reconnect, c.ErrOrStderr(), onEvent)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// printJSONLine writes v as one line of JSON.
func printJSONLine(w io.Writer, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", line)
	return err
}

// sseEvent is one event of a text/event-stream.
type sseEvent struct {
	ID, Type string
	Data     json.RawMessage
}

// stream reads a text/event-stream at path and hands each event to onEvent. With reconnect, a dropped
// connection is opened again (after a second, then backing off to 30 s) with Last-Event-ID set to the
// last event handed over, until ctx ends; an API error (4xx) ends it at once.
func (c *apiClient) stream(ctx context.Context, path, last string, reconnect bool, notes io.Writer, onEvent func(sseEvent) error) error {
	hc := *c.http
	hc.Timeout = 0 // a stream lasts; its heartbeats show it is alive
	wait := time.Second
	for {
		got, err := c.streamOnce(ctx, &hc, path, &last, onEvent)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		why := "closed by the server"
		if err != nil {
			if ae, ok := err.(*APIError); ok && ae.Status < 500 && ae.Status != http.StatusTooManyRequests {
				return err
			}
			why = err.Error()
		}
		if !reconnect {
			return err
		}
		if got {
			wait = time.Second
		}
		fmt.Fprintf(notes, "stream interrupted (%v); reconnecting after event %q in %s\n", why, last, wait)
		if err := sleepCtx(ctx, wait); err != nil {
			return err
		}
		wait = min(wait*2, 30*time.Second)
	}
}

// streamOnce reads one connection of a stream; it reports whether any event came.
func (c *apiClient) streamOnce(ctx context.Context, hc *http.Client, path string, last *string, onEvent func(sseEvent) error) (bool, error) {
	req, err := c.request(ctx, http.MethodGet, path, "text/event-stream", nil)
	if err != nil {
		return false, err
	}
	if *last != "" {
		req.Header.Set("Last-Event-ID", *last)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("GET %s: %w", redactPath(path), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return false, apiError(http.MethodGet, path, resp, raw)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var ev sseEvent
	var data bytes.Buffer
	got := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() > 0 || ev.Type != "" {
				ev.Data = json.RawMessage(bytes.TrimSuffix(data.Bytes(), []byte("\n")))
				if err := onEvent(ev); err != nil {
					return got, err
				}
				got = true
				if ev.ID != "" {
					*last = ev.ID
				}
			}
			ev, data = sseEvent{}, bytes.Buffer{}
		case strings.HasPrefix(line, ":"): // a comment: the heartbeat
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				ev.ID = value
			case "event":
				ev.Type = value
			case "data":
				data.WriteString(value)
				data.WriteByte('\n')
			}
		}
	}
	return got, sc.Err()
}
