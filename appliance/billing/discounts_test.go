package billing_test

import (
	"context"
	"errors"
	"testing"

	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/billing"
)

// TestDiscounts makes a coupon with its promotion code at stripe-mock and reads the coupon back; without a
// provider both are a clear 409 and bad specs are refused before the provider is called.
func TestDiscounts(t *testing.T) {
	ctx := context.Background()
	f := setup(t, true)
	d, err := f.svc.CreateDiscount(ctx, billing.DiscountSpec{Name: "Startup program", PercentOff: 50, DurationMonths: 12,
		Code: "STARTUP50", IdempotencyKey: "test-startup", Metadata: map[string]string{"program_application_id": "pap_1"}})
	if err != nil {
		t.Fatal(err)
	}
	// stripe-mock answers with its fixtures, reflecting what it can: an id for each object is what is
	// recorded (discount_id, the promotion code's id) and must be there.
	if d.ID == "" || d.PromotionCodeID == "" || d.Code == "" {
		t.Fatalf("discount = %+v, want a coupon id, a promotion code id and a code", d)
	}
	got, err := f.svc.GetDiscount(ctx, d.ID)
	if err != nil || got.ID == "" {
		t.Fatalf("GetDiscount(%s) = %+v, %v", d.ID, got, err)
	}
	for _, bad := range []billing.DiscountSpec{{PercentOff: 0, IdempotencyKey: "k"}, {PercentOff: 101, IdempotencyKey: "k"},
		{PercentOff: 10, DurationMonths: -1, IdempotencyKey: "k"}} {
		if _, err := f.svc.CreateDiscount(ctx, bad); apperr.KindOf(err) != apperr.KindInvalid {
			t.Errorf("CreateDiscount(%+v) = %v, want invalid", bad, err)
		}
	}

	off := setup(t, false)
	if _, err := off.svc.CreateDiscount(ctx, billing.DiscountSpec{PercentOff: 10, IdempotencyKey: "k"}); apperr.KindOf(err) != apperr.KindConflict {
		t.Errorf("CreateDiscount without billing = %v, want a conflict", err)
	}
	if _, err := off.svc.GetDiscount(ctx, "co_x"); apperr.KindOf(err) != apperr.KindConflict || errors.Is(err, billing.ErrNoDiscount) {
		t.Errorf("GetDiscount without billing = %v, want a conflict", err)
	}
}
