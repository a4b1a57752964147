package billing

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/stripe/stripe-go/v82"

	"github.com/theappliance/appliance/appliance/apperr"
)

// Discounts are the only rewards the appliance hands out (the spec's Overview point 10: "every reward is a
// discount from a billing provider redeemed at checkout; nothing in these endpoints changes a plan
// directly"). A discount is a coupon at the provider (its id is the discount_id the API records) with a
// promotion code a customer types at checkout (discount_code); a reward for one organization is a code only
// that organization's customer may redeem.

// DiscountSpec is what a discount is made from.
type DiscountSpec struct {
	Name           string  // shown on the customer's invoice
	PercentOff     float64 // 0 < PercentOff ≤ 100
	DurationMonths int     // 0: the first invoice only ("once"); otherwise that many months ("repeating")
	// Code is the promotion code customers type ("": the provider makes one up).
	Code string
	// CustomerID, when set, is the only customer who may redeem the code.
	CustomerID string
	// MaxRedemptions bounds how often the code is redeemed (0: unbounded).
	MaxRedemptions int
	// IdempotencyKey makes a retry of the same creation get the same discount (required: a decision is
	// retried after a failure to record the answer).
	IdempotencyKey string
	Metadata       map[string]string
}

// Discount is a discount at the provider.
type Discount struct {
	ID              string // the coupon's id: discount_id
	PromotionCodeID string
	Code            string // the promotion code's code: discount_code ("" from GetDiscount)
	Name            string
	PercentOff      float64
	DurationMonths  int
	Valid           bool // the provider still accepts it
}

// ErrNoDiscount is GetDiscount's answer for an id the provider does not know.
var ErrNoDiscount = errors.New("no such discount at the billing provider")

// Discounter is the part of a Provider that makes and reads discounts (Stripe's coupons and promotion
// codes).
type Discounter interface {
	CreateDiscount(ctx context.Context, d DiscountSpec) (*Discount, error)
	GetDiscount(ctx context.Context, id string) (*Discount, error)
}

var _ Discounter = (*Stripe)(nil)

// CreateDiscount makes the discount at the provider. Billing off: a 409 saying so (a decision that needs
// a discount cannot be taken without a provider).
func (s *Service) CreateDiscount(ctx context.Context, d DiscountSpec) (*Discount, error) {
	dp, err := s.discounter()
	if err != nil {
		return nil, err
	}
	if d.PercentOff <= 0 || d.PercentOff > 100 {
		return nil, apperr.Invalid("percent_off must be above 0 and at most 100")
	}
	if d.DurationMonths < 0 || d.DurationMonths > 36 {
		return nil, apperr.Invalid("duration_months must be between 0 and 36")
	}
	if d.IdempotencyKey == "" {
		return nil, errors.New("billing: a discount needs an idempotency key")
	}
	out, err := dp.CreateDiscount(ctx, d)
	if errors.Is(err, ErrIdempotencyMismatch) {
		return nil, apperr.Conflict("the billing provider made a discount for this decision already, with other terms: %v", err)
	}
	return out, err
}

// ErrIdempotencyMismatch wraps the provider's refusal of a retried creation whose terms differ from the
// first (Stripe's idempotency_error): the first discount exists; this decision cannot take other terms.
var ErrIdempotencyMismatch = errors.New("the idempotency key was used with other parameters")

// GetDiscount reads a discount by id: ErrNoDiscount (a 400) when the provider does not know it, a 409
// when billing is off.
func (s *Service) GetDiscount(ctx context.Context, id string) (*Discount, error) {
	dp, err := s.discounter()
	if err != nil {
		return nil, err
	}
	d, err := dp.GetDiscount(ctx, id)
	if errors.Is(err, ErrNoDiscount) {
		return nil, apperr.Invalid("discount %q does not exist at the billing provider", id)
	}
	return d, err
}

func (s *Service) discounter() (Discounter, error) {
	if s.provider == nil {
		return nil, apperr.Conflict("billing is not configured on this appliance (up --billing-provider stripe): discounts need a billing provider")
	}
	dp, ok := s.provider.(Discounter)
	if !ok {
		return nil, apperr.Conflict("the billing provider %s makes no discounts", s.provider.Name())
	}
	return dp, nil
}

// CreateDiscount makes a coupon and its promotion code, both with the idempotency key (suffixed), so a
// retry gets the same pair.
func (s *Stripe) CreateDiscount(ctx context.Context, d DiscountSpec) (*Discount, error) {
	cp := &stripe.CouponCreateParams{PercentOff: stripe.Float64(d.PercentOff), Duration: stripe.String("once"),
		Metadata: d.Metadata}
	if d.Name != "" {
		cp.Name = stripe.String(d.Name)
	}
	if d.DurationMonths > 0 {
		cp.Duration, cp.DurationInMonths = stripe.String("repeating"), stripe.Int64(int64(d.DurationMonths))
	}
	cp.SetIdempotencyKey(d.IdempotencyKey + "-coupon")
	c, err := s.client.V1Coupons.Create(ctx, cp)
	if err = idempotency(err); err != nil {
		return nil, fmt.Errorf("stripe: create the coupon: %w", err)
	}
	pp := &stripe.PromotionCodeCreateParams{Coupon: stripe.String(c.ID), Metadata: d.Metadata}
	if d.Code != "" {
		pp.Code = stripe.String(d.Code)
	}
	if d.CustomerID != "" {
		pp.Customer = stripe.String(d.CustomerID)
	}
	if d.MaxRedemptions > 0 {
		pp.MaxRedemptions = stripe.Int64(int64(d.MaxRedemptions))
	}
	pp.SetIdempotencyKey(d.IdempotencyKey + "-code")
	pc, err := s.client.V1PromotionCodes.Create(ctx, pp)
	if err = idempotency(err); err != nil {
		return nil, fmt.Errorf("stripe: create the promotion code of coupon %s: %w", c.ID, err)
	}
	out := discountOf(c)
	out.PromotionCodeID, out.Code = pc.ID, pc.Code
	return out, nil
}

// GetDiscount reads a coupon: ErrNoDiscount when Stripe answers resource_missing.
func (s *Stripe) GetDiscount(ctx context.Context, id string) (*Discount, error) {
	if strings.TrimSpace(id) == "" {
		return nil, ErrNoDiscount
	}
	c, err := s.client.V1Coupons.Retrieve(ctx, id, nil)
	var se *stripe.Error
	if errors.As(err, &se) && (se.Code == stripe.ErrorCodeResourceMissing || se.HTTPStatusCode == 404) {
		return nil, fmt.Errorf("%w: %s", ErrNoDiscount, id)
	}
	if err != nil {
		return nil, fmt.Errorf("stripe: read the coupon %s: %w", id, err)
	}
	return discountOf(c), nil
}

// idempotency marks Stripe's idempotency_error as ErrIdempotencyMismatch.
func idempotency(err error) error {
	var se *stripe.Error
	if errors.As(err, &se) && se.Type == stripe.ErrorTypeIdempotency {
		return fmt.Errorf("%w: %s", ErrIdempotencyMismatch, se.Msg)
	}
	return err
}

func discountOf(c *stripe.Coupon) *Discount {
	return &Discount{ID: c.ID, Name: c.Name, PercentOff: c.PercentOff, DurationMonths: int(c.DurationInMonths), Valid: c.Valid}
}
