package main

import (
	"context"
	"fmt"
	"sync"
)

// Receipt is what the ledger returns for a charge.
type Receipt struct {
	PaymentID   string `json:"payment_id"`
	AmountCents int64  `json:"amount_cents"`
	Receipt     string `json:"receipt"`
}

// Ledger is a fake payment provider. Unlike a careful one, it remembers
// nothing on the caller's behalf: every Charge charges the customer again.
// Running each payment's charge once is the server's job (the idempotency
// store); the ledger only counts, so that the demo and the tests can show
// there was no double charge (a payment charged twice) and no overlap (two
// charges of one payment running at once).
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
	charged  map[string]int // charges per payment
	overlaps int
}

// Charge charges amountCents for payment id, each time it is called. It
// fails, charging nothing, if Hold fails (ctx ended, for example) or if
// another Charge of the same payment is running, which the lock should have
// made impossible.
func (l *Ledger) Charge(ctx context.Context, id string, amountCents int64) (Receipt, error) {
	l.mu.Lock()
	if l.inFlight == nil {
		l.inFlight, l.charged = map[string]int{}, map[string]int{}
	}
	l.inFlight[id]++
	overlap := l.inFlight[id] > 1
	if overlap {
		l.overlaps++
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inFlight[id]--
		l.mu.Unlock()
	}()

	if overlap {
		return Receipt{}, fmt.Errorf("ledger: payment %s is being charged twice at once", id)
	}
	if l.Hold != nil {
		if err := l.Hold(ctx, id); err != nil {
			return Receipt{}, err
		}
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	l.charged[id]++
	return Receipt{PaymentID: id, AmountCents: amountCents, Receipt: fmt.Sprintf("r-%s-%d", id, l.charged[id])}, nil
}

// Overlaps returns how many charges started while another charge of the same
// payment was running: 0 when the lock did its job.
func (l *Ledger) Overlaps() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.overlaps
}

// Charges returns how many charges were made, of all payments.
func (l *Ledger) Charges() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.charged {
		n += c
	}
	return n
}

// DoubleCharges returns how many extra charges payments got beyond their
// first: 0 when each payment ran once.
func (l *Ledger) DoubleCharges() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.charged {
		n += c - 1
	}
	return n
}
