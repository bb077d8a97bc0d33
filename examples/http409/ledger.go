package main

import (
	"context"
	"fmt"
	"sync"
)

// Receipt is what the ledger returns for a payment: the charge it made, or
// the one it had already made.
type Receipt struct {
	PaymentID      string `json:"payment_id"`
	AmountCents    int64  `json:"amount_cents"`
	Receipt        string `json:"receipt"`
	AlreadyCharged bool   `json:"already_charged"`
}

// Ledger is a fake payment provider. Charge is a check-then-act: it looks
// for an earlier charge of the payment and, if there is none, calls the
// provider and records the new one. Two charges of one payment running at
// once could both find none and charge the customer twice; the lock exists to
// prevent that, and the ledger counts such overlaps so that the demo and the
// tests can show there were none.
//
// The zero Ledger is ready to use and safe for concurrent use.
type Ledger struct {
	// Hold, if set, is called by Charge where a real ledger would wait for
	// the payment provider, with the lock held. The demo and the tests use it
	// to keep the critical section open until the other requests have been
	// answered. A non-nil error aborts the charge.
	Hold func(ctx context.Context, id string) error

	mu       sync.Mutex
	inFlight map[string]int
	receipts map[string]Receipt
	overlaps int
}

// Charge charges amountCents for payment id once: if the payment was already
// charged it returns that receipt with AlreadyCharged set. It fails, charging
// nothing, if Hold fails (ctx ended, for example) or if another Charge of the
// same payment is running, which the lock should have made impossible.
func (l *Ledger) Charge(ctx context.Context, id string, amountCents int64) (Receipt, error) {
	l.mu.Lock()
	if l.inFlight == nil {
		l.inFlight, l.receipts = map[string]int{}, map[string]Receipt{}
	}
	l.inFlight[id]++
	overlap := l.inFlight[id] > 1
	if overlap {
		l.overlaps++
	}
	prev, charged := l.receipts[id]
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inFlight[id]--
		l.mu.Unlock()
	}()

	if overlap {
		return Receipt{}, fmt.Errorf("ledger: payment %s is being charged twice at once", id)
	}
	if charged {
		prev.AlreadyCharged = true
		return prev, nil
	}
	if l.Hold != nil {
		if err := l.Hold(ctx, id); err != nil {
			return Receipt{}, err
		}
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	r := Receipt{PaymentID: id, AmountCents: amountCents, Receipt: fmt.Sprintf("r-%s-%d", id, len(l.receipts)+1)}
	l.receipts[id] = r
	return r, nil
}

// Overlaps returns how many charges started while another charge of the same
// payment was running: 0 when the lock did its job.
func (l *Ledger) Overlaps() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.overlaps
}

// Charges returns how many payments were charged.
func (l *Ledger) Charges() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.receipts)
}
