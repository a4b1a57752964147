package billing

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stripe/stripe-go/v82"

	"github.com/theappliance/appliance/appliance/apperr"
)

// mismatched is a provider whose discount creation Stripe refuses as a retry with other terms.
type mismatched struct{ Provider }

func (mismatched) Name() string { return "stripe" }
func (mismatched) CreateDiscount(context.Context, DiscountSpec) (*Discount, error) {
	return nil, fmt.Errorf("stripe: create the coupon: %w", idempotency(&stripe.Error{Type: stripe.ErrorTypeIdempotency, Msg: "Keys for idempotent requests can only be used with the same parameters they were first used with."}))
}
func (mismatched) GetDiscount(context.Context, string) (*Discount, error) { return nil, ErrNoDiscount }

// TestDiscountIdempotencyMismatch: a decision retried with other terms after the provider made the first
// discount is a 409 (the first discount stands), not a 500; other Stripe errors pass unchanged.
func TestDiscountIdempotencyMismatch(t *testing.T) {
	s := New(Deps{Provider: mismatched{}})
	_, err := s.CreateDiscount(context.Background(), DiscountSpec{PercentOff: 20, IdempotencyKey: "pap_1"})
	if apperr.KindOf(err) != apperr.KindConflict {
		t.Fatalf("CreateDiscount = %v, want a conflict", err)
	}
	other := &stripe.Error{Type: stripe.ErrorTypeAPI, Msg: "boom"}
	if got := idempotency(other); !errors.Is(got, other) || errors.Is(got, ErrIdempotencyMismatch) {
		t.Fatalf("idempotency(api error) = %v", got)
	}
}
