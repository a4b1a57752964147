package webhook

import (
	"log/slog"
	"sync"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/batch"
	"github.com/theappliance/appliance/appliance/outbound"
	"github.com/theappliance/appliance/scheduler/lane"
	"github.com/theappliance/appliance/store"
)

// The webhooks area (see the package comment): an organization's endpoints (list, create, patch, delete, rotate-secret, test), their
// deliveries (list, redeliver), the deliveries queued for each event appended (FanOut), the delivery
// worker and the recorder of its attempts (Start, Stop), the status page's row (Health). It reaches the rest
// of the domain only through Host (declared here, given by the root's Service), the kernel packages
// (apperr, authz), the records (store) and the wire types (api). It never imports `appliance`.

// Delivery states and endpoint health.
const (
	DeliveryPending   = api.DeliveryPending
	DeliveryDelivered = api.DeliveryDelivered
	DeliveryFailed    = api.DeliveryFailed

	HealthHealthy  = api.WebhookHealthy
	HealthFailing  = api.WebhookFailing
	HealthDisabled = api.WebhookDisabled
)

// DeliveryRetention is how long ended deliveries are kept.
const DeliveryRetention = 30 * 24 * time.Hour

// SecretOverlap is how long the previous signing secret keeps signing deliveries after a rotation
// (beside the new one), so receivers can switch without losing a delivery.
const SecretOverlap = 24 * time.Hour

// Host is what the area takes from the rest of the domain, which the root package keeps
// (appliance/areas.go gives it). Keep it small: what an area can own, it owns.
type Host interface {
	// Audit writes an audit event of the caller in tx: one event shape and one clock for every area.
	Audit(tx *store.Tx, p *authz.Principal, action, orgID, projectID string, metadata any) error
	// AppendEvent appends an event to the log in tx (webhook_endpoint.disabled): the log, its sequence and
	// its webhook fan-out (FanOut, called back) are one mechanism (appliance/eventlog, which the root holds),
	// in the transaction of the change the event tells.
	AppendEvent(tx *store.Tx, typ, orgID, projectID string, data any) error
	// CheckDisplayText applies the rules of every display field (an endpoint's description): one rule for
	// every area's names, labels and notes.
	CheckDisplayText(field, v string, min, max int) error
	// CountWebhookAttempt counts a delivery attempt for /metrics, whose counters the root keeps beside the
	// jobs'.
	CountWebhookAttempt(ok bool, d time.Duration)
}

// Box seals and opens the endpoints' signing secrets (the root's SecretBox).
type Box interface {
	Seal(plaintext []byte) []byte
	Open(sealed []byte) ([]byte, error)
}

// Config is what the area needs to know.
type Config struct {
	// Options tune deliveries (DefaultOptions: what the appliance runs with).
	Options Options
	// EventTypes are the names of every event the appliance appends: an endpoint's filter takes only these.
	EventTypes []string
}

// Deps are the area's collaborators; New takes them all.
type Deps struct {
	DB    *store.DB
	Box   Box
	Log   *slog.Logger
	Clock func() time.Time // UTC
	// Lane is the background lane where the worker claims and the outcomes of its attempts are recorded
	// (nil: in their goroutines, unpaced).
	Lane *lane.Lane
	// Policy is the outbound destination policy every delivery connects through (and endpoint URLs are
	// checked against).
	Policy *outbound.Policy
	Host   Host
}

// Service is the webhooks area.
type Service struct {
	opts       Options
	eventTypes []string
	db         *store.DB
	box        Box
	log        *slog.Logger
	now        func() time.Time
	lane       *lane.Lane
	policy     *outbound.Policy
	host       Host
	worker     *Worker[*store.WebhookEndpoint]
	// endpoints holds the active endpoints the worker claims for.
	endpoints store.Cache[[]*store.WebhookEndpoint]

	mu sync.Mutex // Start and Stop
	// recorder writes attempts' outcomes while the worker runs; recorded is closed when it ended.
	recorder *batch.Writer[outcome]
	recorded chan struct{}
}

// New returns the area built with its collaborators; its worker waits for Start.
func New(cfg Config, deps Deps) *Service {
	s := &Service{opts: cfg.Options, eventTypes: cfg.EventTypes, db: deps.DB, box: deps.Box, log: deps.Log, now: deps.Clock,
		lane: deps.Lane, policy: deps.Policy, host: deps.Host}
	s.worker = NewWorker(cfg.Options, deliveryStore{s}, s.policy.DialContext, s.now, s.log, s.lane)
	return s
}

func ptr[T any](v T) *T { return &v }
